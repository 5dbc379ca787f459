// OPT as Hugging Face's OPTForCausalLM (eager attention). Two variants: the usual pre-LN stack
// with a final_layer_norm (125m, ...), and OPT-350m's post-LN stack (do_layer_norm_before=False)
// whose 512-wide embeddings go through project_in/project_out and which has no final norm.
#include <cmath>

#include "layers.h"

namespace foldnorm::zoo {
namespace {

struct OptConfig {
  int64_t layers, hidden, heads, ffn, vocab, maxPositions;
  int64_t wordEmbedProjDim;  // == hidden except for 350m
  bool layerNormBefore;      // pre-LN; false: post-LN (350m)
  double dropout = 0.1;
  int64_t padTokenId = 1;
};

OptConfig preLnConfig(const std::string& preset) {
  if (preset == "tiny") return {2, 64, 4, 256, 1000, 64, 64, true};
  return {12, 768, 12, 3072, 50272, 2048, 768, true};  // 125m
}

OptConfig postLnConfig(const std::string& preset) {
  if (preset == "tiny") return {2, 64, 4, 256, 1000, 64, 32, false};
  return {24, 1024, 16, 4096, 50272, 2048, 512, false};  // 350m
}

// OPT offsets learned positions by 2 (a fairseq legacy); positions come from the mask's cumsum.
struct OPTLearnedPositionalEmbeddingImpl : torch::nn::EmbeddingImpl {
  OPTLearnedPositionalEmbeddingImpl(int64_t positions, int64_t dim)
      : torch::nn::EmbeddingImpl(positions + kOffset, dim) {}
  torch::Tensor forward(const torch::Tensor& attentionMask) {
    auto positions = (torch::cumsum(attentionMask, 1) * attentionMask).to(torch::kLong) - 1;
    return torch::nn::EmbeddingImpl::forward(positions + kOffset);
  }
  static constexpr int64_t kOffset = 2;
};
TORCH_MODULE(OPTLearnedPositionalEmbedding);

struct OPTAttentionImpl : torch::nn::Module {
  explicit OPTAttentionImpl(const OptConfig& c)
      : heads(c.heads), scaling(1.0 / std::sqrt(static_cast<double>(c.hidden / c.heads))) {
    k_proj = register_module("k_proj", makeLinear(c.hidden, c.hidden));
    v_proj = register_module("v_proj", makeLinear(c.hidden, c.hidden));
    q_proj = register_module("q_proj", makeLinear(c.hidden, c.hidden));
    out_proj = register_module("out_proj", makeLinear(c.hidden, c.hidden));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    auto q = splitHeads(linear(q_proj, x) * scaling, heads);
    auto k = splitHeads(linear(k_proj, x), heads);
    auto v = splitHeads(linear(v_proj, x), heads);
    return linear(out_proj, causalAttention(q, k, v, x, std::nullopt, /*softmaxInFloat32=*/false));
  }
  int64_t heads;
  double scaling;
  torch::nn::Linear k_proj{nullptr}, v_proj{nullptr}, q_proj{nullptr}, out_proj{nullptr};
};
TORCH_MODULE(OPTAttention);

struct OPTDecoderLayerImpl : torch::nn::Module {
  explicit OPTDecoderLayerImpl(const OptConfig& c) : before(c.layerNormBefore) {
    self_attn = register_module("self_attn", OPTAttention(c));
    self_attn_layer_norm = register_module("self_attn_layer_norm", layerNorm(c.hidden, 1e-5));
    fc1 = register_module("fc1", makeLinear(c.hidden, c.ffn));
    fc2 = register_module("fc2", makeLinear(c.ffn, c.hidden));
    final_layer_norm = register_module("final_layer_norm", layerNorm(c.hidden, 1e-5));
    dropout = register_module("dropout", torch::nn::Dropout(c.dropout));
  }
  torch::Tensor forward(torch::Tensor x) {
    auto residual = x;
    if (before) x = self_attn_layer_norm(x);
    x = residual + dropout(self_attn(x));
    if (!before) x = self_attn_layer_norm(x);
    residual = x;
    if (before) x = final_layer_norm(x);
    x = residual + dropout(linear(fc2, torch::relu(linear(fc1, x))));
    if (!before) x = final_layer_norm(x);
    return x;
  }
  bool before;
  OPTAttention self_attn{nullptr};
  torch::nn::LayerNorm self_attn_layer_norm{nullptr}, final_layer_norm{nullptr};
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
  torch::nn::Dropout dropout{nullptr};
};
TORCH_MODULE(OPTDecoderLayer);

struct OPTDecoderImpl : torch::nn::Module {
  explicit OPTDecoderImpl(const OptConfig& c) {
    embed_tokens = register_module(
        "embed_tokens", torch::nn::Embedding(torch::nn::EmbeddingOptions(c.vocab, c.wordEmbedProjDim)
                                                 .padding_idx(c.padTokenId)));
    embed_positions =
        register_module("embed_positions", OPTLearnedPositionalEmbedding(c.maxPositions, c.hidden));
    if (c.wordEmbedProjDim != c.hidden) {
      project_out = register_module("project_out", makeLinear(c.hidden, c.wordEmbedProjDim, false));
      project_in = register_module("project_in", makeLinear(c.wordEmbedProjDim, c.hidden, false));
    }
    if (c.layerNormBefore) final_layer_norm = register_module("final_layer_norm", layerNorm(c.hidden, 1e-5));
    layers = register_module("layers", torch::nn::ModuleList());
    for (int64_t i = 0; i < c.layers; ++i) layers->push_back(OPTDecoderLayer(c));
    dropout = register_module("dropout", torch::nn::Dropout(c.dropout));
  }
  torch::Tensor forward(const torch::Tensor& inputIds) {
    auto x = embed_tokens(inputIds);
    if (project_in) x = linear(project_in, x);
    // HF builds an all-ones mask when none is given; positions are its running count.
    x = dropout(x + embed_positions(torch::ones_like(inputIds)));
    for (const auto& l : *layers) x = l->as<OPTDecoderLayerImpl>()->forward(x);
    if (final_layer_norm) x = final_layer_norm(x);
    if (project_out) x = linear(project_out, x);
    return x;
  }
  torch::nn::Embedding embed_tokens{nullptr};
  OPTLearnedPositionalEmbedding embed_positions{nullptr};
  torch::nn::Linear project_out{nullptr}, project_in{nullptr};
  torch::nn::LayerNorm final_layer_norm{nullptr};
  torch::nn::ModuleList layers{nullptr};
  torch::nn::Dropout dropout{nullptr};
};
TORCH_MODULE(OPTDecoder);

struct OPTModelImpl : torch::nn::Module {
  explicit OPTModelImpl(const OptConfig& c) { decoder = register_module("decoder", OPTDecoder(c)); }
  torch::Tensor forward(const torch::Tensor& inputIds) { return decoder(inputIds); }
  OPTDecoder decoder{nullptr};
};
TORCH_MODULE(OPTModel);

// The head is tied to embed_tokens (both wordEmbedProjDim wide).
EagerModel build(const OptConfig& c, const std::string& preset, at::Generator& gen) {
  CausalLM<OPTModel> model("OPTForCausalLM", "model", OPTModel(c), c.wordEmbedProjDim, c.vocab, false);
  model->lm_head->weight = tieParameter(*model->lm_head, "weight", model->body->decoder->embed_tokens->weight);
  return causalLmModel(model, preset, c.vocab, gen);
}

}  // namespace

EagerModel buildOpt(const std::string& preset, int64_t layers, at::Generator& gen) {
  auto c = preLnConfig(preset);
  setDepth(c.layers, layers);
  return build(c, preset, gen);
}

EagerModel buildOpt350m(const std::string& preset, int64_t layers, at::Generator& gen) {
  auto c = postLnConfig(preset);
  setDepth(c.layers, layers);
  return build(c, preset, gen);
}

}  // namespace foldnorm::zoo
