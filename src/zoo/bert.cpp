// BERT as Hugging Face's BertModel (eager attention): post-LN encoder layers, embeddings summed
// and normalised, an additive padding mask, and the tanh pooler on the first token.
#include <cmath>
#include <limits>

#include "layers.h"

namespace foldnorm::zoo {
namespace {

struct BertConfig {
  int64_t layers, hidden, heads, intermediate, vocab, maxPositions;
  int64_t typeVocab = 2;
  double eps = 1e-12;
  double dropout = 0.1;
};

struct BertEmbeddingsImpl : torch::nn::Module {
  explicit BertEmbeddingsImpl(const BertConfig& c) {
    word_embeddings = register_module("word_embeddings", torch::nn::Embedding(c.vocab, c.hidden));
    position_embeddings =
        register_module("position_embeddings", torch::nn::Embedding(c.maxPositions, c.hidden));
    token_type_embeddings =
        register_module("token_type_embeddings", torch::nn::Embedding(c.typeVocab, c.hidden));
    LayerNorm = register_module("LayerNorm", layerNorm(c.hidden, c.eps));
    dropout = register_module("dropout", torch::nn::Dropout(c.dropout));
    position_ids = register_buffer("position_ids", torch::arange(c.maxPositions).unsqueeze(0));
  }
  torch::Tensor forward(const torch::Tensor& inputIds, const torch::Tensor& tokenTypeIds) {
    auto positions = sliceTo(position_ids, 1, 0, dimOf(inputIds, 1));
    auto x = word_embeddings(inputIds) + token_type_embeddings(tokenTypeIds);
    x = x + position_embeddings(positions);
    return dropout(LayerNorm(x));
  }
  torch::nn::Embedding word_embeddings{nullptr}, position_embeddings{nullptr},
      token_type_embeddings{nullptr};
  torch::nn::LayerNorm LayerNorm{nullptr};
  torch::nn::Dropout dropout{nullptr};
  torch::Tensor position_ids;
};
TORCH_MODULE(BertEmbeddings);

struct BertSelfAttentionImpl : torch::nn::Module {
  explicit BertSelfAttentionImpl(const BertConfig& c) : heads(c.heads), headDim(c.hidden / c.heads) {
    query = register_module("query", makeLinear(c.hidden, c.hidden));
    key = register_module("key", makeLinear(c.hidden, c.hidden));
    value = register_module("value", makeLinear(c.hidden, c.hidden));
    dropout = register_module("dropout", torch::nn::Dropout(c.dropout));
  }
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& mask) {
    auto q = splitHeads(linear(query, x), heads);
    auto k = splitHeads(linear(key, x), heads);
    auto v = splitHeads(linear(value, x), heads);
    auto scores = torch::matmul(q, k.transpose(-1, -2)) / std::sqrt(static_cast<double>(headDim));
    auto probs = dropout(torch::softmax(scores + mask, -1));
    return mergeHeads(torch::matmul(probs, v));
  }
  int64_t heads, headDim;
  torch::nn::Linear query{nullptr}, key{nullptr}, value{nullptr};
  torch::nn::Dropout dropout{nullptr};
};
TORCH_MODULE(BertSelfAttention);

// BertSelfOutput and BertOutput: dense, dropout, then LayerNorm of the residual sum (post-LN).
struct BertSelfOutputImpl : torch::nn::Module {
  BertSelfOutputImpl(int64_t in, const BertConfig& c) {
    dense = register_module("dense", makeLinear(in, c.hidden));
    LayerNorm = register_module("LayerNorm", layerNorm(c.hidden, c.eps));
    dropout = register_module("dropout", torch::nn::Dropout(c.dropout));
  }
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& residual) {
    return LayerNorm(dropout(linear(dense, x)) + residual);
  }
  torch::nn::Linear dense{nullptr};
  torch::nn::LayerNorm LayerNorm{nullptr};
  torch::nn::Dropout dropout{nullptr};
};
TORCH_MODULE(BertSelfOutput);
struct BertOutputImpl : BertSelfOutputImpl {
  using BertSelfOutputImpl::BertSelfOutputImpl;
};
TORCH_MODULE(BertOutput);

struct BertAttentionImpl : torch::nn::Module {
  explicit BertAttentionImpl(const BertConfig& c) {
    self = register_module("self", BertSelfAttention(c));
    output = register_module("output", BertSelfOutput(c.hidden, c));
  }
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& mask) {
    return output(self(x, mask), x);
  }
  BertSelfAttention self{nullptr};
  BertSelfOutput output{nullptr};
};
TORCH_MODULE(BertAttention);

struct BertIntermediateImpl : torch::nn::Module {
  explicit BertIntermediateImpl(const BertConfig& c) {
    dense = register_module("dense", makeLinear(c.hidden, c.intermediate));
  }
  torch::Tensor forward(const torch::Tensor& x) { return torch::gelu(linear(dense, x)); }
  torch::nn::Linear dense{nullptr};
};
TORCH_MODULE(BertIntermediate);

struct BertLayerImpl : torch::nn::Module {
  explicit BertLayerImpl(const BertConfig& c) {
    attention = register_module("attention", BertAttention(c));
    intermediate = register_module("intermediate", BertIntermediate(c));
    output = register_module("output", BertOutput(c.intermediate, c));
  }
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& mask) {
    auto a = attention(x, mask);
    return output(intermediate(a), a);
  }
  BertAttention attention{nullptr};
  BertIntermediate intermediate{nullptr};
  BertOutput output{nullptr};
};
TORCH_MODULE(BertLayer);

struct BertEncoderImpl : torch::nn::Module {
  explicit BertEncoderImpl(const BertConfig& c) {
    layer = register_module("layer", torch::nn::ModuleList());
    for (int64_t i = 0; i < c.layers; ++i) layer->push_back(BertLayer(c));
  }
  torch::Tensor forward(torch::Tensor x, const torch::Tensor& mask) {
    for (const auto& l : *layer) x = l->as<BertLayerImpl>()->forward(x, mask);
    return x;
  }
  torch::nn::ModuleList layer{nullptr};
};
TORCH_MODULE(BertEncoder);

struct BertPoolerImpl : torch::nn::Module {
  explicit BertPoolerImpl(const BertConfig& c) {
    dense = register_module("dense", makeLinear(c.hidden, c.hidden));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    return torch::tanh(linear(dense, x.select(1, 0)));
  }
  torch::nn::Linear dense{nullptr};
};
TORCH_MODULE(BertPooler);

struct BertModelImpl : torch::nn::Module {
  explicit BertModelImpl(const BertConfig& c) {
    embeddings = register_module("embeddings", BertEmbeddings(c));
    encoder = register_module("encoder", BertEncoder(c));
    pooler = register_module("pooler", BertPooler(c));
  }
  std::vector<torch::Tensor> forward(const torch::Tensor& inputIds, const torch::Tensor& tokenTypeIds,
                                     const torch::Tensor& attentionMask) {
    auto x = embeddings(inputIds, tokenTypeIds);
    // HF's extended mask: [B,1,1,T], 0 where attended, finfo.min where padded.
    auto extended = attentionMask.unsqueeze(1).unsqueeze(2).to(x.scalar_type());
    extended = (1.0 - extended) * std::numeric_limits<float>::lowest();
    auto hidden = encoder(x, extended);
    return {hidden, pooler(hidden)};
  }
  BertEmbeddings embeddings{nullptr};
  BertEncoder encoder{nullptr};
  BertPooler pooler{nullptr};
};
TORCH_MODULE(BertModel);

// The presets, beside the build that reads them.
BertConfig configFor(const std::string& preset) {
  if (preset == "tiny") return {2, 64, 4, 256, 1000, 64};
  // base-16k: base with its learned position table grown to 16384 rows (as long-context BERTs
  // extend it), so the end-to-end sweep can run BERT to 16k tokens; the same graph and verdicts.
  if (preset == "base-16k") return {12, 768, 12, 3072, 30522, 16384};
  return {12, 768, 12, 3072, 30522, 512};  // base
}

}  // namespace

EagerModel buildBert(const std::string& preset, int64_t layers, at::Generator& gen) {
  auto c = configFor(preset);
  setDepth(c.layers, layers);
  auto model = BertModel(c);
  initParameters(*model, gen);
  EagerModel m;
  m.root = model.ptr();
  m.inputNames = {"input_ids", "token_type_ids", "attention_mask"};
  const auto shape = tokenShape(preset);
  m.inputs = {InputSpec{shape, "int64", 0.0, static_cast<double>(c.vocab)},
              InputSpec{shape, "int64", 0.0, 2.0}, InputSpec{shape, "int64", 1.0, 2.0}};
  m.outputNames = {"last_hidden_state", "pooler_output"};
  m.forward = [model](const std::vector<torch::Tensor>& in) mutable {
    return model->forward(in.at(0), in.at(1), in.at(2));
  };
  return m;
}

}  // namespace foldnorm::zoo
