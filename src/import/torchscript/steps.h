// The TorchScript importer's steps, shared by its files (private to src/import/torchscript/).
//
//   archive.cpp          load the .pt, classify what cannot be loaded (user errors)
//   reader.cpp           importModule: the steps below in order
//   mirror.cpp           parameters and tied storage; nodes and values into our Graph
//   shapes.cpp           example inputs checked against the model; shapes recorded by one run
//   source_location.cpp  "file.py:123" of a node, when the trace kept it
//   debug_records.cpp    the archive's debug records checked before LibTorch reads them
//   ir_model.cpp         a module built from IR text (tests, docs)
// Module paths are inferred by a graph pass (graph/module_paths.h) from what mirror.cpp
// collects; any importer can feed it.
#pragma once

#include <torch/script.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "foldnorm/common/error.h"
#include "foldnorm/graph/module_paths.h"
#include "foldnorm/import/torchscript.h"
#include "foldnorm/torch/torch_model.h"

namespace foldnorm::torchscript {


/// Imports an already-loaded module (shared by the .pt and IR paths).
ImportedModel importModule(torch::jit::Module module, std::shared_ptr<const std::string> archive,
                           std::string path, std::vector<InputSpec> specs, bool specFromModel,
                           const ImportOptions& options);

/// Throws a user error for control flow, calls that could not be inlined and Python ops.
void rejectControlFlow(const torch::jit::Graph& graph);

/// Every tensor attribute of the module tree as a Parameter of `graph` (tensors into
/// `model.parameterTensors`), and the groups of parameters that share a storage. Returns the
/// parameter ids by attribute path.
std::map<std::string, ParamId> mirrorParameters(const torch::jit::Module& module, Graph& graph,
                                                TorchModel& model);

/// Every node and value of `model.graph` into `graph`, in the order the fold's copies walk them
/// (Node::origin and TorchModel::nodes/values keep the correspondence); constants folded into
/// values, parameter reads resolved through GetAttr chains. Returns what the module-path pass
/// needs.
ModuleEvidence mirrorNodes(const std::map<std::string, ParamId>& paramByPath, Graph& graph, TorchModel& model);

/// The spec the model is run with: one tensor spec per model input, or a user error naming
/// what is missing.
void checkInputSpecs(const Graph& graph, const std::vector<InputSpec>& specs);

/// Runs a copy of the graph whose every tensor value is an extra output on the example inputs;
/// sets Value::tensor and TorchModel::exampleOutputs.
void recordShapes(Graph& graph, TorchModel& model, const std::vector<InputSpec>& specs);

/// The first damaged debug record (*.debug_pkl) of the archive at `path` and what is wrong with
/// it, or "" when all are sound (or the archive is no readable zip: jit::load says so). A damaged
/// record that LibTorch would read crashes it; the archive is then loaded without its debug records.
std::string damagedDebugRecord(const std::string& path);

/// "model.py:42" for a node whose trace kept a source range, else "".
std::string sourceLocation(const torch::jit::Node* node);

}  // namespace foldnorm::torchscript
