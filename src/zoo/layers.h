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

torch::nn::LayerNorm layerNorm(int64_t dim, double eps);
torch::nn::Linear makeLinear(int64_t in, int64_t out, bool bias = true);

/// [B,T,d] -> [B,heads,T,d/heads] and back, with B and T symbolic.
torch::Tensor splitHeads(const torch::Tensor& x, int64_t heads);
torch::Tensor mergeHeads(const torch::Tensor& x);

/// Bool [T,T] mask, true where key j > query i (the positions a causal decoder must not see),
/// built from aten::arange over `x.size(dim)` so it follows the input length.
torch::Tensor futureMask(const torch::Tensor& x, int64_t dim);

/// torchvision's Sequential containers, as a plain holder: children keep the names they are
/// added under ("0", "encoder_layer_3", "head"); the owning model calls them in order itself.
struct SequentialImpl : torch::nn::Module {
  template <typename Holder>
  Holder add(const std::string& name, Holder module) {
    items.push_back(module.ptr());
    return register_module(name, module);
  }
  std::vector<std::shared_ptr<torch::nn::Module>> items;
};
TORCH_MODULE(Sequential);

/// torchvision.ops.misc.Permute.
struct PermuteImpl : torch::nn::Module {
  explicit PermuteImpl(std::vector<int64_t> dims) : dims(std::move(dims)) {}
  torch::Tensor forward(const torch::Tensor& x) { return x.permute(dims); }
  std::vector<int64_t> dims;
};
TORCH_MODULE(Permute);

/// torchvision.ops.StochasticDepth: the identity in eval mode (the module stays for its name).
struct StochasticDepthImpl : torch::nn::Module {
  explicit StochasticDepthImpl(double p) : p(p) {}
  torch::Tensor forward(const torch::Tensor& x) { return x; }
  double p;
};
TORCH_MODULE(StochasticDepth);

/// Rotary position embedding as in HF Llama/Phi: a non-learned `inv_freq` buffer; forward gives
/// cos and sin [B,T,dim] for int64 positions [B,T]. Models derive it to get their class name.
struct RotaryEmbeddingImpl : torch::nn::Module {
  RotaryEmbeddingImpl(int64_t dim, double theta);
  std::pair<torch::Tensor, torch::Tensor> forward(const torch::Tensor& x, const torch::Tensor& positions);
  torch::Tensor inv_freq;
};
/// x * cos + rotate_half(x) * sin, with cos/sin [B,T,d] broadcast over the heads of x [B,H,T,d].
torch::Tensor applyRotary(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin);

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
ZooEntry bertEntry();
ZooEntry optEntry();
ZooEntry opt350mEntry();
ZooEntry phiEntry();
ZooEntry llamaEntry();
ZooEntry vitEntry();
ZooEntry swinEntry();
ZooEntry convnextEntry();

}  // namespace foldnorm::zoo
