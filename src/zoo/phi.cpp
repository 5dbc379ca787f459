// Phi as Hugging Face's PhiForCausalLM (phi-1.5 / phi-2, eager attention): each layer runs
// attention and MLP in parallel on ONE input_layernorm output and adds both to the residual;
// partial rotary embeddings; final_layernorm; lm_head with a bias.
#include <cmath>
#include <limits>

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

PhiConfig configFor(const std::string& preset) {
  if (preset == "tiny") return {2, 64, 4, 256, 1000, 0.5};
  if (preset == "phi-1_5") return {24, 2048, 32, 8192, 51200, 0.5};
  return {32, 2560, 32, 10240, 51200, 0.4};  // phi-2
}

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
    auto q = partialRotary(splitHeads(linear(q_proj, x), heads), cos, sin);
    auto k = partialRotary(splitHeads(linear(k_proj, x), heads), cos, sin);
    auto v = splitHeads(linear(v_proj, x), heads);
    auto weights = torch::matmul(q, k.transpose(2, 3)) * scaling;
    weights = weights.masked_fill(futureMask(x, 1), std::numeric_limits<float>::lowest());
    auto probs = torch::softmax(weights, -1, torch::kFloat32).to(v.scalar_type());
    return linear(dense, mergeHeads(torch::matmul(probs, v)));
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
    auto positions = arangeTo(0, dimOf(inputIds, 1), torch::TensorOptions().dtype(torch::kLong)).unsqueeze(0);
    auto [cos, sin] = rotary_emb(x, positions);
    for (const auto& l : *layers) x = l->as<PhiDecoderLayerImpl>()->forward(x, cos, sin);
    return final_layernorm(x);
  }
  torch::nn::Embedding embed_tokens{nullptr};
  torch::nn::Dropout embed_dropout{nullptr};
  torch::nn::ModuleList layers{nullptr};
  torch::nn::LayerNorm final_layernorm{nullptr};
  PhiRotaryEmbedding rotary_emb{nullptr};
};
TORCH_MODULE(PhiModel);

struct PhiForCausalLMImpl : torch::nn::Module {
  explicit PhiForCausalLMImpl(const PhiConfig& c) {
    model = register_module("model", PhiModel(c));
    lm_head = register_module("lm_head", makeLinear(c.hidden, c.vocab, true));
  }
  torch::Tensor forward(const torch::Tensor& inputIds) { return linear(lm_head, model(inputIds)); }
  PhiModel model{nullptr};
  torch::nn::Linear lm_head{nullptr};
};
TORCH_MODULE(PhiForCausalLM);

EagerModel build(const std::string& preset, at::Generator& gen) {
  auto c = configFor(preset);
  auto model = PhiForCausalLM(c);
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

ZooEntry phiEntry() {
  return {{"phi",
           "Phi decoder: parallel attention and MLP sharing one input_layernorm, partial rotary, "
           "gelu_new, final_layernorm, lm_head with bias",
           "Hugging Face transformers PhiForCausalLM (eager attention)",
           {"tiny", "phi-1_5", "phi-2"},
           "phi-2"},
          &build};
}

}  // namespace foldnorm::zoo
