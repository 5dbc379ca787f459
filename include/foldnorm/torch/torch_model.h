// The torch side of an imported model: what the fold, the verifier and the benchmarks need
// beyond foldnorm::Graph. Only torch-facing code includes this.
#pragma once

#include <torch/script.h>

#include <functional>
#include <string>
#include <vector>

#include "foldnorm/import/input_spec.h"
#include "foldnorm/import/torchscript.h"

namespace foldnorm {

struct TorchModel {
  torch::jit::Module module;                  // as loaded (not modified by import)
  std::shared_ptr<torch::jit::Graph> graph;   // forward, inlined; first input is `self`
  std::vector<torch::jit::Node*> nodes;       // Node::origin -> node of `graph`
  std::vector<torch::jit::Value*> values;     // ValueId -> value of `graph`
  std::vector<at::Tensor> parameterTensors;   // ParamId -> tensor (constants included)
  std::vector<at::Tensor> exampleInputs;      // what shapes were recorded with
  std::vector<at::Tensor> exampleOutputs;     // the model's outputs on them (flattened)
  /// The device the trace's constants named ("cuda:0" for a trace made on a GPU); `graph` and
  /// every copy foldnorm runs name the CPU instead (inlinedForward).
  std::string tracedDevice = "cpu";
  /// The archive `module` was loaded from, where it is kept (the TorchScript import keeps none:
  /// its makeCopy loads the file again). Fresh copies are loaded from these bytes: the same
  /// code compiles to the same graph, node for node, so analysed node ids map onto the copy.
  std::shared_ptr<const std::string> archive;
  /// Whether copies load the archive's debug records (source ranges): false when they are
  /// damaged (LibTorch would crash reading them).
  bool debugRecords = true;
  /// Models without archive bytes (built from IR, or imported from a file) make their fresh
  /// copies with this instead.
  std::function<torch::jit::Module()> makeCopy;
};

/// A fresh, independent module (own types and tensors) loaded from `model.archive`.
torch::jit::Module freshCopy(const TorchModel& model);

/// Bytes of the distinct storages among `tensors` (tied tensors, views of one storage: once).
int64_t distinctStorageBytes(const std::vector<at::Tensor>& tensors);

/// `module`'s tensor attributes (parameters, buffers), submodules included: what a loaded copy holds.
std::vector<at::Tensor> attributeTensors(const torch::jit::Module& module);

/// Example inputs drawn from specs (seeded, reproducible).
std::vector<at::Tensor> makeInputs(const std::vector<InputSpec>& specs, uint64_t seed);

/// The tensors of a model's output, in order: tuples, lists and dicts (a Hugging Face trace's
/// output) flattened, other values (ints, None) dropped. The one flattening every comparison of
/// outputs uses, so a model and its copy are compared leaf for leaf.
std::vector<at::Tensor> outputTensors(const c10::IValue& value);

/// Runs `graph` (first input `self`) on `module` and `inputs`; returns the graph's outputs
/// flattened to tensors (outputTensors). Runs with the graph executor's optimisations and
/// autograd off (outputs keep no forward alive).
std::vector<at::Tensor> runGraph(const torch::jit::Module& module,
                                 const std::shared_ptr<torch::jit::Graph>& graph,
                                 const std::vector<at::Tensor>& inputs);

/// Inlined copy of a module's forward graph, without dead code but LayerNorms (the results of
/// inlined calls that nothing reads), its device constants naming the CPU. Foldnorm loads
/// every model onto the CPU, but a trace bakes in the device it ran on (`torch.device("cuda:0")`
/// arguments of arange, to, zeros...): a GPU trace would make CUDA tensors on a machine without
/// one, or mix devices on one with. To run on another device, retargetGraph the result.
std::shared_ptr<torch::jit::Graph> inlinedForward(const torch::jit::Module& module);

/// The module's own forward graph, inlined in place (what runs and what gets saved), its device
/// constants naming the CPU as inlinedForward's. A fresh copy inlined so has the node order the
/// importer walked (same code, same inlining; the device rewrite adds no node).
std::shared_ptr<torch::jit::Graph> inlineForwardInPlace(torch::jit::Module& module);

/// Rewrites every device constant of `graph` that names another device to "cpu", in place;
/// returns the first device it rewrote ("" where all named the CPU).
std::string constantsToCpu(torch::jit::Graph& graph);

/// constantsToCpu on every method of `module` and its submodules, in place: for a copy with types
/// of its own (a clone), whose file then names the CPU in every method, not only the forward.
void methodsToCpu(const torch::jit::Module& module);

/// The device `module`'s forward names in its constants: "cpu", or the first other one
/// ("cuda:0" for a model traced on a GPU). Reads a copy; the module is not changed.
std::string tracedDevice(const torch::jit::Module& module);

std::string dtypeName(at::ScalarType type);

}  // namespace foldnorm
