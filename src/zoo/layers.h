// Building blocks shared by the zoo's model files: shape arguments that stay symbolic in the
// trace, parameter tying and initialisation, and the registry entry each model file provides.
#pragma once

#include <torch/torch.h>

#include <array>
#include <optional>
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

/// The eager attention core of HF's causal decoders (Llama, Phi, OPT): softmax(q k^T [* scaling],
/// masked to the past) v, heads merged. q, k, v are [B,H,T,D]; `hidden` [B,T,d] gives the mask
/// its length. Without `scaling` the caller has scaled q (OPT); `softmaxInFloat32` takes the
/// softmax in float32 and casts back (Llama, Phi). GPT-2 masks with its own buffer instead.
torch::Tensor causalAttention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                              const torch::Tensor& hidden, std::optional<double> scaling,
                              bool softmaxInFloat32);

/// HF's *ForCausalLM (GPT2LMHeadModel, ...): the decoder registered as `bodyName` and an
/// lm_head on its output. `className` is the reference class the trace shows.
template <typename Body>
struct CausalLMImpl : torch::nn::Module {
  CausalLMImpl(std::string className, const std::string& bodyName, Body decoder, int64_t hidden,
               int64_t vocab, bool headBias)
      : torch::nn::Module(std::move(className)) {
    body = register_module(bodyName, std::move(decoder));
    lm_head = register_module("lm_head", makeLinear(hidden, vocab, headBias));
  }
  torch::Tensor forward(const torch::Tensor& inputIds) { return linear(lm_head, body(inputIds)); }
  Body body{nullptr};
  torch::nn::Linear lm_head{nullptr};
};
template <typename Body>
using CausalLM = torch::nn::ModuleHolder<CausalLMImpl<Body>>;

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

/// q, k and v of a rotary decoder's attention (Llama, Phi): each projection of x [B,T,d] split
/// into heads (k and v into kvHeads), `rotate` applied to q and k; in that order, as HF runs them.
template <typename Rotate>
std::array<torch::Tensor, 3> rotaryQkv(const torch::Tensor& x, const torch::nn::Linear& qProj,
                                       const torch::nn::Linear& kProj, const torch::nn::Linear& vProj,
                                       int64_t heads, int64_t kvHeads, Rotate rotate) {
  auto q = rotate(splitHeads(linear(qProj, x), heads));
  auto k = rotate(splitHeads(linear(kProj, x), kvHeads));
  return {q, k, splitHeads(linear(vProj, x), kvHeads)};
}

/// The decoder stack of Llama and Phi: cos/sin of the positions 0..T-1 of `inputIds` [B,T], then
/// every layer of `layers` (all of type LayerImpl) on (x, cos, sin).
template <typename LayerImpl>
torch::Tensor rotaryDecoderLayers(torch::Tensor x, const torch::Tensor& inputIds, RotaryEmbeddingImpl& rotary,
                                  const torch::nn::ModuleList& layers) {
  auto positions = arangeTo(0, dimOf(inputIds, 1), torch::TensorOptions().dtype(torch::kLong)).unsqueeze(0);
  auto [cos, sin] = rotary.forward(x, positions);
  for (const auto& l : *layers) x = l->as<LayerImpl>()->forward(x, cos, sin);
  return x;
}

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

// ---- from a module to an EagerModel ----------------------------------------------------------
/// The example token batch of a language model: [2, 16] for the tiny preset, else [1, 128].
std::vector<int64_t> tokenShape(const std::string& preset);

/// `model` with parameters drawn from `gen` (initParameters), as an EagerModel whose forward
/// maps the one input `inputName` to the one output `outputName`.
template <typename Holder>
EagerModel oneTensorModel(Holder model, at::Generator& gen, std::string inputName, InputSpec input,
                          std::string outputName) {
  initParameters(*model, gen);
  EagerModel m;
  m.root = model.ptr();
  m.inputNames = {std::move(inputName)};
  m.inputs = {std::move(input)};
  m.outputNames = {std::move(outputName)};
  m.forward = [model](const std::vector<torch::Tensor>& in) mutable {
    return std::vector<torch::Tensor>{model->forward(in.at(0))};
  };
  return m;
}

/// A causal LM: input_ids (tokenShape, ids below `vocab`) -> logits.
template <typename Holder>
EagerModel causalLmModel(Holder model, const std::string& preset, int64_t vocab, at::Generator& gen) {
  return oneTensorModel(std::move(model), gen, "input_ids",
                        InputSpec{tokenShape(preset), "int64", 0.0, static_cast<double>(vocab)}, "logits");
}

/// An image classifier: x [2 (tiny) or 1, 3, image, image] float32 -> logits.
template <typename Holder>
EagerModel imageModel(Holder model, const std::string& preset, int64_t image, at::Generator& gen) {
  return oneTensorModel(std::move(model), gen, "x",
                        InputSpec{{preset == "tiny" ? 2 : 1, 3, image, image}, "float32", {}, {}}, "logits");
}

/// `layers` > 0: that many layers instead of the preset's (a model with one stack of layers);
/// 0: the preset's. Throws foldnorm::Error for a model whose depth is per stage (Swin, ConvNeXt).
void setDepth(int64_t& configLayers, int64_t layers);
void refuseDepth(const std::string& model, int64_t layers);

// ---- the models (one file each; zoo.cpp lists them) -----------------------------------------
EagerModel buildGpt2(const std::string& preset, int64_t layers, at::Generator& gen);
EagerModel buildBert(const std::string& preset, int64_t layers, at::Generator& gen);
EagerModel buildOpt(const std::string& preset, int64_t layers, at::Generator& gen);
EagerModel buildOpt350m(const std::string& preset, int64_t layers, at::Generator& gen);
EagerModel buildPhi(const std::string& preset, int64_t layers, at::Generator& gen);
EagerModel buildLlama(const std::string& preset, int64_t layers, at::Generator& gen);
EagerModel buildVit(const std::string& preset, int64_t layers, at::Generator& gen);
EagerModel buildSwin(const std::string& preset, int64_t layers, at::Generator& gen);
EagerModel buildConvnext(const std::string& preset, int64_t layers, at::Generator& gen);

}  // namespace foldnorm::zoo
