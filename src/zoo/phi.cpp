// Phi as Hugging Face's PhiForCausalLM (phi-1.5 / phi-2, eager attention): each layer runs
// attention and MLP in parallel on ONE input_layernorm output and adds both to the residual;
// partial rotary embeddings; final_layernorm; lm_head with a bias.
#include <cmath>

#include "layers.h"

namespace foldnorm::zoo {
namespace {

struct PhiConfig {
  int64_t layers, hidden, heads, intermediate, vocab;
  double partialRotary;
  double eps = 1e-5;
  double ropeTheta = 10000.0;
  double dropout = 0.1;  // resid/embd dropout modules, identities in eval
};

struct PhiRotaryEmbeddingImpl : RotaryEmbeddingImpl {
  using RotaryEmbeddingImpl::RotaryEmbeddingImpl;
};
TORCH_MODULE(PhiRotaryEmbedding);

struct PhiAttentionImpl : torch::nn::Module {
  explicit PhiAttentionImpl(const PhiConfig& c)
      : heads(c.heads), headDim(c.hidden / c.heads),
        rotaryDim(static_cast<int64_t>(static_cast<double>(c.hidden / c.heads) * c.partialRotary)),
        scaling(1.0 / std::sqrt(static_cast<double>(c.hidden / c.heads))) {
    q_proj = register_module("q_proj", makeLinear(c.hidden, c.hidden));
    k_proj = register_module("k_proj", makeLinear(c.hidden, c.hidden));
    v_proj = register_module("v_proj", makeLinear(c.hidden, c.hidden));
    dense = register_module("dense", makeLinear(c.hidden, c.hidden));
  }
  // Rotary on the first rotaryDim channels of each head, the rest passes through.
  torch::Tensor partialRotary(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin) {
    auto rot = x.slice(-1, 0, rotaryDim);
    auto pass = x.slice(-1, rotaryDim, headDim);
    return torch::cat({applyRotary(rot, cos, sin), pass}, -1);
  }
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin) {
    auto rotate = [&](const torch::Tensor& t) { return partialRotary(t, cos, sin); };
    auto [q, k, v] = rotaryQkv(x, q_proj, k_proj, v_proj, heads, heads, rotate);
    return linear(dense, causalAttention(q, k, v, x, scaling, /*softmaxInFloat32=*/true));
  }
  int64_t heads, headDim, rotaryDim;
  double scaling;
  torch::nn::Linear q_proj{nullptr}, k_proj{nullptr}, v_proj{nullptr}, dense{nullptr};
};
TORCH_MODULE(PhiAttention);

struct PhiMLPImpl : torch::nn::Module {
  explicit PhiMLPImpl(const PhiConfig& c) {
    fc1 = register_module("fc1", makeLinear(c.hidden, c.intermediate));
    fc2 = register_module("fc2", makeLinear(c.intermediate, c.hidden));
  }
  torch::Tensor forward(const torch::Tensor& x) { return linear(fc2, geluNew(linear(fc1, x))); }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
};
TORCH_MODULE(PhiMLP);

struct PhiDecoderLayerImpl : torch::nn::Module {
  explicit PhiDecoderLayerImpl(const PhiConfig& c) {
    self_attn = register_module("self_attn", PhiAttention(c));
    mlp = register_module("mlp", PhiMLP(c));
    input_layernorm = register_module("input_layernorm", layerNorm(c.hidden, c.eps));
    resid_dropout = register_module("resid_dropout", torch::nn::Dropout(c.dropout));
  }
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin) {
    auto h = input_layernorm(x);
    auto attn = resid_dropout(self_attn(h, cos, sin));
    auto ff = resid_dropout(mlp(h));
    return attn + ff + x;
  }
  PhiAttention self_attn{nullptr};
  PhiMLP mlp{nullptr};
  torch::nn::LayerNorm input_layernorm{nullptr};
  torch::nn::Dropout resid_dropout{nullptr};
};
TORCH_MODULE(PhiDecoderLayer);

struct PhiModelImpl : torch::nn::Module {
  explicit PhiModelImpl(const PhiConfig& c) {
    embed_tokens = register_module("embed_tokens", torch::nn::Embedding(c.vocab, c.hidden));
    embed_dropout = register_module("embed_dropout", torch::nn::Dropout(c.dropout));
    layers = register_module("layers", torch::nn::ModuleList());
    for (int64_t i = 0; i < c.layers; ++i) layers->push_back(PhiDecoderLayer(c));
    final_layernorm = register_module("final_layernorm", layerNorm(c.hidden, c.eps));
    auto headDim = c.hidden / c.heads;
    auto rotaryDim = static_cast<int64_t>(static_cast<double>(headDim) * c.partialRotary);
    rotary_emb = register_module("rotary_emb", PhiRotaryEmbedding(rotaryDim, c.ropeTheta));
  }
  torch::Tensor forward(const torch::Tensor& inputIds) {
    auto x = embed_dropout(embed_tokens(inputIds));
    return final_layernorm(rotaryDecoderLayers<PhiDecoderLayerImpl>(x, inputIds, *rotary_emb, layers));
  }
  torch::nn::Embedding embed_tokens{nullptr};
  torch::nn::Dropout embed_dropout{nullptr};
  torch::nn::ModuleList layers{nullptr};
  torch::nn::LayerNorm final_layernorm{nullptr};
  PhiRotaryEmbedding rotary_emb{nullptr};
};
TORCH_MODULE(PhiModel);

// The presets, beside the build that reads them.
PhiConfig configFor(const std::string& preset) {
  if (preset == "tiny") return {2, 64, 4, 256, 1000, 0.5};
  if (preset == "phi-1_5") return {24, 2048, 32, 8192, 51200, 0.5};
  return {32, 2560, 32, 10240, 51200, 0.4};  // phi-2
}

}  // namespace

EagerModel buildPhi(const std::string& preset, int64_t layers, at::Generator& gen) {
  auto c = configFor(preset);
  setDepth(c.layers, layers);
  CausalLM<PhiModel> model("PhiForCausalLM", "model", PhiModel(c), c.hidden, c.vocab, true);
  return causalLmModel(model, preset, c.vocab, gen);
}

}  // namespace foldnorm::zoo
