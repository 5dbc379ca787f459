// Llama as Hugging Face's LlamaForCausalLM (eager attention): RMSNorm written out like
// LlamaRMSNorm (pow/mean/add/rsqrt/mul, no mean subtraction, no bias), rotary positions,
// SwiGLU MLP, grouped-query attention. The zoo's negative control: it has no LayerNorm to fold.
#include <cmath>
#include <limits>

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
    auto q = applyRotary(splitHeads(linear(q_proj, x), heads), cos, sin);
    auto k = applyRotary(splitHeads(linear(k_proj, x), kvHeads), cos, sin);
    auto v = splitHeads(linear(v_proj, x), kvHeads);
    k = repeatKv(k);
    v = repeatKv(v);
    auto weights = torch::matmul(q, k.transpose(2, 3)) * scaling;
    weights = weights.masked_fill(futureMask(x, 1), std::numeric_limits<float>::lowest());
    auto probs = torch::softmax(weights, -1, torch::kFloat32).to(q.scalar_type());
    return linear(o_proj, mergeHeads(torch::matmul(probs, v)));
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
    auto x = embed_tokens(inputIds);
    auto positions = arangeTo(0, dimOf(inputIds, 1), torch::TensorOptions().dtype(torch::kLong)).unsqueeze(0);
    auto [cos, sin] = rotary_emb(x, positions);
    for (const auto& l : *layers) x = l->as<LlamaDecoderLayerImpl>()->forward(x, cos, sin);
    return norm(x);
  }
  torch::nn::Embedding embed_tokens{nullptr};
  torch::nn::ModuleList layers{nullptr};
  LlamaRMSNorm norm{nullptr};
  LlamaRotaryEmbedding rotary_emb{nullptr};
};
TORCH_MODULE(LlamaModel);

struct LlamaForCausalLMImpl : torch::nn::Module {
  explicit LlamaForCausalLMImpl(const LlamaConfig& c) {
    model = register_module("model", LlamaModel(c));
    lm_head = register_module("lm_head", makeLinear(c.hidden, c.vocab, false));
  }
  torch::Tensor forward(const torch::Tensor& inputIds) { return linear(lm_head, model(inputIds)); }
  LlamaModel model{nullptr};
  torch::nn::Linear lm_head{nullptr};
};
TORCH_MODULE(LlamaForCausalLM);

EagerModel build(const std::string& preset, at::Generator& gen) {
  auto c = configFor(preset);
  auto model = LlamaForCausalLM(c);
  initParameters(*model, gen);
  EagerModel m;
  m.root = model.ptr();
  m.inputNames = {"input_ids"};
  auto shape = preset == "tiny" ? std::vector<int64_t>{2, 16} : std::vector<int64_t>{1, 128};
  m.inputs = {InputSpec{shape, "int64", 0.0, static_cast<double>(c.vocab)}};
  m.outputNames = {"logits"};
  m.forward = [model](const std::vector<torch::Tensor>& in) mutable {
    return std::vector<torch::Tensor>{model->forward(in.at(0))};
  };
  return m;
}

}  // namespace

ZooEntry llamaEntry() {
  return {{"llama",
           "Llama decoder (negative control): RMSNorm written out (pow/mean/rsqrt/mul), rotary "
           "positions, SwiGLU MLP, grouped-query attention, untied lm_head",
           "Hugging Face transformers LlamaForCausalLM (eager attention)",
           {"tiny", "tinyllama-1.1b", "7b"},
           "tinyllama-1.1b"},
          &build};
}

}  // namespace foldnorm::zoo
