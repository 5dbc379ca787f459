// The import's public face: a model file of either format read into our Graph with concrete
// shapes, and the handle on the torch side that the fold needs. No torch types here: the
// TorchScript side lives behind TorchModel (torch/torch_model.h), the .pt2 side behind
// ExportModel (import/export.h). The readers themselves: importTorchScript (import/torchscript.h)
// and importExport (import/export.h); what a consumer does with an ImportedModel of either
// format goes through the model handle (fold/model.h).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "foldnorm/graph/graph.h"
#include "foldnorm/import/input_spec.h"

namespace foldnorm {

struct TorchModel;   // opaque: module, inlined graph, node/value tables (torch/torch_model.h)
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

/// The reader for `path` by content: a zip with models/model.json (or a file named .pt2) is a
/// torch.export archive (importExport), anything else is read as TorchScript (importTorchScript,
/// which names what it found when that fails). Throws foldnorm::Error for every user-caused
/// problem. (src/import/import_model.cpp, built with the readers.)
ImportedModel importModel(const std::string& path, const ImportOptions& options = {});

}  // namespace foldnorm
