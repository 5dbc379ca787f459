// Building blocks shared by the zoo's model files: shape arguments that stay symbolic in the
// trace, parameter tying and initialisation, and the registry entry each model file provides.
#pragma once

#include <torch/torch.h>

#include <string>
#include <vector>

#include "foldnorm/zoo/eager.h"
#include "foldnorm/zoo/zoo.h"

namespace foldnorm::zoo {

// ---- sizes that the trace records as aten::size --------------------------------------------
// In C++ `x.size(0)` is a plain int64_t, so a traced `view({B, T, H, D})` would bake the example's
// batch and length into the graph and the saved model would only run at that shape. Python's
// tracer records such sizes as `aten::size` values instead; these helpers do the same through
// the tracer's argument stash, so zoo models run at any batch size and sequence length.

/// A size argument: a constant, or dimension `dim` of `source` (recorded in the trace).
struct Dim {
  Dim(int64_t constant) : value(constant) {}  // NOLINT: constants convert implicitly
  int64_t value;
  torch::Tensor source;
  int64_t dim = 0;
};
Dim dimOf(const torch::Tensor& t, int64_t dim);

torch::Tensor viewTo(const torch::Tensor& x, const std::vector<Dim>& sizes);
torch::Tensor reshapeTo(const torch::Tensor& x, const std::vector<Dim>& sizes);
torch::Tensor expandTo(const torch::Tensor& x, const std::vector<Dim>& sizes);
/// x[..., start:end, ...] along `dim`.
torch::Tensor sliceTo(const torch::Tensor& x, int64_t dim, Dim start, Dim end);
/// torch.arange(start, end) as int64.
torch::Tensor arangeTo(Dim start, Dim end, const torch::TensorOptions& options);

// ---- layers ----------------------------------------------------------------------------------
/// `torch::linear` (traced as aten::linear, like Python's nn.Linear).
torch::Tensor linear(const torch::nn::Linear& layer, const torch::Tensor& x);
/// Hugging Face's "gelu_new" / "gelu_pytorch_tanh" written out as in NewGELUActivation.
torch::Tensor geluNew(const torch::Tensor& x);

/// Makes `module.name` the very tensor `shared` (one storage under two names, like HF's tied
/// lm_head/wte). Returns `shared`.
torch::Tensor tieParameter(torch::nn::Module& module, const std::string& name,
                           const torch::Tensor& shared);

/// Norm modules the initialiser treats as norms (weight near 1, bias near 0) besides
/// torch::nn::LayerNorm: a zoo module class derives from this marker.
struct NormMarker {
  virtual ~NormMarker() = default;
};

/// Draws every parameter from `gen`: norm weights 1 + 0.1 N(0,1), norm biases 0.1 N(0,1),
/// everything else N(0, std^2) (biases included: all-zero biases would hide what a fold must
/// move into them). Buffers are left as constructed.
void initParameters(torch::nn::Module& root, at::Generator& gen, double std = 0.02);

// ---- registry --------------------------------------------------------------------------------
struct ZooEntry {
  ZooModelInfo info;
  EagerModel (*build)(const std::string& preset, at::Generator& gen);
};

ZooEntry gpt2Entry();

}  // namespace foldnorm::zoo
