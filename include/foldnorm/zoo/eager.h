// The zoo's models as eager LibTorch modules, and the steps that turn one into a saved
// TorchScript module. zoo.h is the entry point for users; this header is for code that needs the
// model before tracing (tests comparing eager and traced outputs, experiments on the weights).
#pragma once

#include <torch/torch.h>
#include <torch/script.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "foldnorm/import/input_spec.h"

namespace foldnorm::zoo {

struct EagerModel {
  std::string name;    // "gpt2"
  std::string preset;  // "tiny"
  // The module tree whose names the saved model keeps; in eval mode.
  std::shared_ptr<torch::nn::Module> root;
  std::vector<std::string> inputNames;  // the traced graph's input names, e.g. "input_ids"
  std::vector<InputSpec> inputs;        // the example inputs embedded in the saved model
  std::vector<std::string> outputNames;  // one tensor per name; more than one: a tuple
  std::function<std::vector<torch::Tensor>(const std::vector<torch::Tensor>&)> forward;
};

/// Builds model `name` at `preset` with weights drawn from `seed` (`layers` > 0: that many layers
/// instead of the preset's, the width unchanged). Throws foldnorm::Error for an unknown name or
/// preset, or a depth the model cannot take.
EagerModel makeEagerModel(const std::string& name, const std::string& preset, uint64_t seed, int64_t layers = 0);

/// Tensors matching `specs`, drawn from `seed` (integers uniform in the range, floats standard
/// normal or uniform in the range).
std::vector<torch::Tensor> makeInputs(const std::vector<InputSpec>& specs, uint64_t seed);

/// Traces `model.forward` on `inputs` into a TorchScript module whose submodules mirror
/// `model.root` and hold the very same tensors (so tied weights stay one tensor).
torch::jit::Module traceEagerModel(const EagerModel& model, const std::vector<torch::Tensor>& inputs);

/// The traced module's outputs as a list (a tuple output is unpacked).
std::vector<torch::Tensor> runTraced(torch::jit::Module& module, const std::vector<torch::Tensor>& inputs);

/// Number of distinct parameter elements (a tied weight counts once).
int64_t countParameters(const torch::nn::Module& root);

}  // namespace foldnorm::zoo
