// TorchScript (.pt) -> foldnorm::Graph: importModule and its steps in order (see steps.h).
//
// Inline the forward, reject control flow, mirror parameters (tied storage grouped), then every
// node and value; infer module paths (a graph pass); check the input spec and record concrete
// shapes by running a copy of the graph whose every tensor value is an extra output.
#include "foldnorm/common/error.h"
#include "foldnorm/common/memory.h"
#include "steps.h"

namespace foldnorm::torchscript {

namespace jit = torch::jit;

void rejectControlFlow(const jit::Graph& graph) {
  for (auto* node : graph.nodes()) {
    auto kind = node->kind();
    bool controlFlow = !node->blocks().empty() || kind == c10::prim::If || kind == c10::prim::Loop;
    bool call = kind == c10::prim::CallFunction || kind == c10::prim::CallMethod;
    bool python = kind == c10::prim::PythonOp;
    if (!controlFlow && !call && !python) continue;
    auto where = sourceLocation(node);
    std::string what = controlFlow ? "control flow (" + std::string(kind.toQualString()) +
                                         ", from scripted code)"
                       : call      ? "a call that could not be inlined (" +
                                    std::string(kind.toQualString()) + ")"
                                   : "a Python op (prim::PythonOp)";
    throw Error("unsupported model: " + what + (where.empty() ? "" : " at " + where) +
                "; foldnorm reads traced modules without control flow: trace the model with "
                "torch.jit.trace");
  }
}

ImportedModel importModule(jit::Module module, std::shared_ptr<const std::string> archive, std::string path,
                           std::vector<InputSpec> specs, bool specFromModel, const ImportOptions& options) {
  module.eval();
  auto tm = std::make_shared<TorchModel>();
  tm->module = module;
  tm->archive = std::move(archive);
  // jit::load compiles the code lazily: a damaged code/ entry fails here, not at load.
  try {
    tm->graph = inlinedForward(module);
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    throw Error("the TorchScript code in '" + path + "' does not compile (a damaged archive?): " +
                firstLine(e.what()));
  }
  rejectControlFlow(*tm->graph);
  tm->tracedDevice = tracedDevice(module);
  if (tm->tracedDevice != "cpu" && options.progress)
    options.progress("the trace names " + tm->tracedDevice + " in its constants: run on the CPU here");

  ImportedModel result;
  result.path = std::move(path);
  result.specFromModel = specFromModel;
  const auto paramByPath = mirrorParameters(module, result.graph, *tm);
  const auto evidence = mirrorNodes(paramByPath, result.graph, *tm);
  inferModulePaths(result.graph, evidence);

  checkInputSpecs(result.graph, specs);
  result.inputSpecs = specs;
  tm->exampleInputs = makeInputs(specs, options.seed);
  if (options.progress) options.progress("recording shapes (one run on the example inputs)");
  recordShapes(result.graph, *tm, specs);
  releaseFreedHeap();  // the recording run's activations: as much again as the model, for GPT-2 XL
  result.torch = tm;
  return result;
}

}  // namespace foldnorm::torchscript
