// Importing a traced TorchScript module (.pt) into a foldnorm::Graph with concrete shapes.
// No torch types here: the torch side lives behind TorchModel (include/foldnorm/torch/).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "foldnorm/graph/graph.h"
#include "foldnorm/import/input_spec.h"

namespace foldnorm {

struct TorchModel;  // opaque: module, inlined graph, node/value tables (torch/torch_model.h)
struct ExportModel;  // the .pt2 side of an imported torch.export program (import/export.h)

using ProgressFn = std::function<void(const std::string&)>;

struct ImportOptions {
  std::vector<InputSpec> inputs;  // empty: use the spec embedded in the model
  uint64_t seed = 0;              // for the example inputs
  ProgressFn progress;            // optional: called with short progress messages
};

struct ImportedModel {
  std::string path;
  Graph graph;
  std::vector<InputSpec> inputSpecs;  // what the shapes were recorded with
  bool specFromModel = false;         // true when they came from the embedded spec
  std::shared_ptr<TorchModel> torch;       // TorchScript models; null for .pt2
  std::shared_ptr<ExportModel> exported;   // .pt2 (torch.export) models; null for TorchScript
};

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
