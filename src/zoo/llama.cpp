// Llama as Hugging Face's LlamaForCausalLM (eager attention): RMSNorm written out like
// LlamaRMSNorm (pow/mean/add/rsqrt/mul, no mean subtraction, no bias), rotary positions,
// SwiGLU MLP, grouped-query attention. The zoo's negative control: it has no LayerNorm to fold.
#include <cmath>

#include "layers.h"

namespace foldnorm::zoo {
namespace {

struct LlamaConfig {
  int64_t layers, hidden, heads, kvHeads, intermediate, vocab;
  double eps;
  double ropeTheta = 10000.0;
};

LlamaConfig configFor(const std::string& preset) {
  if (preset == "tiny") return {2, 64, 4, 2, 172, 1000, 1e-6};
  if (preset == "tinyllama-1.1b") return {22, 2048, 32, 4, 5632, 32000, 1e-5};
  return {32, 4096, 32, 32, 11008, 32000, 1e-5};  // 7b (Llama-2-7b)
}

struct LlamaRMSNormImpl : torch::nn::Module, NormMarker {
  LlamaRMSNormImpl(int64_t dim, double eps) : eps(eps) {
    weight = register_parameter("weight", torch::ones({dim}));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    auto dtype = x.scalar_type();
    auto h = x.to(torch::kFloat32);
    auto variance = h.pow(2).mean(-1, /*keepdim=*/true);
    h = h * torch::rsqrt(variance + eps);
    return weight * h.to(dtype);
  }
  double eps;
  torch::Tensor weight;
};
TORCH_MODULE(LlamaRMSNorm);

struct LlamaRotaryEmbeddingImpl : RotaryEmbeddingImpl {
  using RotaryEmbeddingImpl::RotaryEmbeddingImpl;
};
TORCH_MODULE(LlamaRotaryEmbedding);

struct LlamaAttentionImpl : torch::nn::Module {
  explicit LlamaAttentionImpl(const LlamaConfig& c)
      : heads(c.heads), kvHeads(c.kvHeads), headDim(c.hidden / c.heads),
        scaling(1.0 / std::sqrt(static_cast<double>(c.hidden / c.heads))) {
    q_proj = register_module("q_proj", makeLinear(c.hidden, heads * headDim, false));
    k_proj = register_module("k_proj", makeLinear(c.hidden, kvHeads * headDim, false));
    v_proj = register_module("v_proj", makeLinear(c.hidden, kvHeads * headDim, false));
    o_proj = register_module("o_proj", makeLinear(heads * headDim, c.hidden, false));
  }
  // HF's repeat_kv: [B, kvH, T, D] -> [B, kvH * rep, T, D].
  torch::Tensor repeatKv(const torch::Tensor& x) {
    int64_t rep = heads / kvHeads;
    if (rep == 1) return x;
    auto expanded = expandTo(x.unsqueeze(2), {dimOf(x, 0), kvHeads, rep, dimOf(x, 2), headDim});
    return reshapeTo(expanded, {dimOf(x, 0), kvHeads * rep, dimOf(x, 2), headDim});
  }
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin) {
    auto rotate = [&](const torch::Tensor& t) { return applyRotary(t, cos, sin); };
    auto [q, k, v] = rotaryQkv(x, q_proj, k_proj, v_proj, heads, kvHeads, rotate);
    k = repeatKv(k);  // k before v: the trace keeps HF's order
    v = repeatKv(v);
    return linear(o_proj, causalAttention(q, k, v, x, scaling, /*softmaxInFloat32=*/true));
  }
  int64_t heads, kvHeads, headDim;
  double scaling;
  torch::nn::Linear q_proj{nullptr}, k_proj{nullptr}, v_proj{nullptr}, o_proj{nullptr};
};
TORCH_MODULE(LlamaAttention);

struct LlamaMLPImpl : torch::nn::Module {
  explicit LlamaMLPImpl(const LlamaConfig& c) {
    gate_proj = register_module("gate_proj", makeLinear(c.hidden, c.intermediate, false));
    up_proj = register_module("up_proj", makeLinear(c.hidden, c.intermediate, false));
    down_proj = register_module("down_proj", makeLinear(c.intermediate, c.hidden, false));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    return linear(down_proj, torch::silu(linear(gate_proj, x)) * linear(up_proj, x));
  }
  torch::nn::Linear gate_proj{nullptr}, up_proj{nullptr}, down_proj{nullptr};
};
TORCH_MODULE(LlamaMLP);

struct LlamaDecoderLayerImpl : torch::nn::Module {
  explicit LlamaDecoderLayerImpl(const LlamaConfig& c) {
    self_attn = register_module("self_attn", LlamaAttention(c));
    mlp = register_module("mlp", LlamaMLP(c));
    input_layernorm = register_module("input_layernorm", LlamaRMSNorm(c.hidden, c.eps));
    post_attention_layernorm =
        register_module("post_attention_layernorm", LlamaRMSNorm(c.hidden, c.eps));
  }
  torch::Tensor forward(torch::Tensor x, const torch::Tensor& cos, const torch::Tensor& sin) {
    x = x + self_attn(input_layernorm(x), cos, sin);
    return x + mlp(post_attention_layernorm(x));
  }
  LlamaAttention self_attn{nullptr};
  LlamaMLP mlp{nullptr};
  LlamaRMSNorm input_layernorm{nullptr}, post_attention_layernorm{nullptr};
};
TORCH_MODULE(LlamaDecoderLayer);

struct LlamaModelImpl : torch::nn::Module {
  explicit LlamaModelImpl(const LlamaConfig& c) {
    embed_tokens = register_module("embed_tokens", torch::nn::Embedding(c.vocab, c.hidden));
    layers = register_module("layers", torch::nn::ModuleList());
    for (int64_t i = 0; i < c.layers; ++i) layers->push_back(LlamaDecoderLayer(c));
    norm = register_module("norm", LlamaRMSNorm(c.hidden, c.eps));
    rotary_emb = register_module("rotary_emb", LlamaRotaryEmbedding(c.hidden / c.heads, c.ropeTheta));
  }
  torch::Tensor forward(const torch::Tensor& inputIds) {
    return norm(rotaryDecoderLayers<LlamaDecoderLayerImpl>(embed_tokens(inputIds), inputIds, *rotary_emb, layers));
  }
  torch::nn::Embedding embed_tokens{nullptr};
  torch::nn::ModuleList layers{nullptr};
  LlamaRMSNorm norm{nullptr};
  LlamaRotaryEmbedding rotary_emb{nullptr};
};
TORCH_MODULE(LlamaModel);

}  // namespace

EagerModel buildLlama(const std::string& preset, int64_t layers, at::Generator& gen) {
  auto c = configFor(preset);
  setDepth(c.layers, layers);
  CausalLM<LlamaModel> model("LlamaForCausalLM", "model", LlamaModel(c), c.hidden, c.vocab, false);
  return causalLmModel(model, preset, c.vocab, gen);
}

}  // namespace foldnorm::zoo
