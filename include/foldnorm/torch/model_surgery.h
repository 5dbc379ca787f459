// Model surgery on the torch side: copies of a traced module made to run in another floating
// dtype or on another device. One home for what the fold's float64 verification and the
// benchmark's bfloat16/float16/CUDA copies both need.
//
// A trace bakes in what it saw while tracing:
//   - the float32 dtype code wherever it converted to the model's dtype (aten::to(x, 6)),
//   - floating tensor constants (a causal mask's fill value, a scale),
//   - the tracing device (aten::arange(..., device="cpu")).
// Converting the module's tensors (module.to()) leaves all three as they were, so a "float64"
// copy still rounds to float32 at every aten::to. retargetGraph rewrites them as a trace made in
// the target dtype on the target device would have them.
#pragma once

#include <torch/script.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace foldnorm {

/// Where and in which floating dtype a copy runs.
struct RetargetOptions {
  std::optional<at::ScalarType> dtype;  // floating tensors become this; others (or all: nullopt) keep theirs
  c10::Device device{c10::kCPU};
};

/// Floating tensor attributes of `module` and its submodules (recursively) to `dtype`, every
/// tensor attribute to `device`. Tensors that share a storage (the same offset, sizes and
/// strides) share their copy, so tied weights stay tied.
void retargetAttributes(const torch::jit::Module& module, const RetargetOptions& to);

/// Rewrites what the trace baked into `graph` (see above): floating tensor constants to `dtype`
/// (all tensor constants to `device`), device constants to `device`, and dtype codes passed as
/// a dtype argument: the float32 code, and for a float64 target also the float16 and bfloat16
/// codes (a float64 oracle keeps no narrower step). The same integer 6 used as a size stays 6.
/// Returns how many constants and uses were rewritten.
int retargetGraph(const std::shared_ptr<torch::jit::Graph>& graph, const RetargetOptions& to);

/// Floating inputs to `dtype`, every input to `device`.
std::vector<at::Tensor> retargetInputs(const std::vector<at::Tensor>& inputs, const RetargetOptions& to);

/// The module's bytes as torch.jit.save writes them.
std::string serializeModule(const torch::jit::Module& module);

/// A fresh, independent module (own types and tensors) from `bytes`, on the CPU.
torch::jit::Module loadModule(const std::string& bytes);

}  // namespace foldnorm
