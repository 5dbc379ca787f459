// Importing a traced TorchScript module (.pt) into a foldnorm::Graph with concrete shapes
// (ImportedModel: import/import.h). No torch types here: the torch side lives behind TorchModel
// (include/foldnorm/torch/).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "foldnorm/import/import.h"

namespace foldnorm {

/// Loads, inlines, validates (no control flow), imports and records shapes.
/// Throws foldnorm::Error for every user-caused problem (missing file, not TorchScript,
/// truncated archive, control flow, input spec that does not match the model).
ImportedModel importTorchScript(const std::string& path, const ImportOptions& options = {});

/// A model written as TorchScript IR text, for tests and docs. Graph inputs whose names are keys
/// of `parameters` become module parameters (named by the key with "__" read as "." so
/// "h0__ln__weight" is the parameter "h0.ln.weight" of submodule "h0.ln"), initialised randomly
/// from their spec; the remaining inputs are the model's inputs, fed from `inputs`.
struct IrModel {
  std::string ir;
  std::vector<InputSpec> inputs;
  std::vector<std::pair<std::string, InputSpec>> parameters;
};

/// Builds a real TorchScript module from IR text and imports it like a loaded .pt.
ImportedModel importIrModel(const IrModel& model, uint64_t seed = 0);

}  // namespace foldnorm
