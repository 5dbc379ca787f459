// GPT-2 as Hugging Face's GPT2LMHeadModel (eager attention path): Conv1D projections computed
// with addmm, pre-LN blocks, a final ln_f, and an lm_head tied to the token embedding.
#include <cmath>
#include <limits>

#include "foldnorm/common/error.h"
#include "layers.h"

namespace foldnorm::zoo {
namespace {

struct Gpt2Config {
  int64_t nLayer, nEmbd, nHead, vocab, nPositions;
  double layerNormEps = 1e-5;
  double dropout = 0.1;  // resid, embd and attn dropout: identities in eval
};

Gpt2Config configFor(const std::string& preset) {
  if (preset == "tiny") return {2, 64, 4, 1000, 64};
  if (preset == "small") return {12, 768, 12, 50257, 1024};
  if (preset == "medium") return {24, 1024, 16, 50257, 1024};
  if (preset == "large") return {36, 1280, 20, 50257, 1024};
  if (preset == "xl") return {48, 1600, 25, 50257, 1024};
  // GPT-2-XL's graph (48 blocks, the same ops and edges) at width 64 and a small vocabulary:
  // what analysis and rendering cost depends on, without XL's 6 GB of weights.
  if (preset == "xl-graph") return {48, 64, 4, 1000, 1024};
  throw Error("gpt2: unknown preset '" + preset + "'");
}

// HF's Conv1D: a linear layer with the weight stored [in, out]; the forward flattens the
// leading dimensions and calls addmm, which is the trace form the analysis sees in real GPT-2s.
struct Conv1DImpl : torch::nn::Module {
  Conv1DImpl(int64_t nx, int64_t nf) : nf(nf) {
    weight = register_parameter("weight", torch::empty({nx, nf}));
    bias = register_parameter("bias", torch::zeros({nf}));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    std::vector<Dim> outShape;
    for (int64_t d = 0; d + 1 < x.dim(); ++d) outShape.push_back(dimOf(x, d));
    outShape.push_back(nf);
    auto flat = x.view({-1, weight.size(0)});
    return viewTo(torch::addmm(bias, flat, weight), outShape);
  }
  int64_t nf;
  torch::Tensor weight, bias;
};
TORCH_MODULE(Conv1D);

struct GPT2AttentionImpl : torch::nn::Module {
  explicit GPT2AttentionImpl(const Gpt2Config& c)
      : nHead(c.nHead), headDim(c.nEmbd / c.nHead), splitSize(c.nEmbd) {
    // HF registers the causal mask as a bool buffer "bias" of the full context.
    bias = register_buffer(
        "bias", torch::tril(torch::ones({c.nPositions, c.nPositions}, torch::kBool))
                    .view({1, 1, c.nPositions, c.nPositions}));
    c_attn = register_module("c_attn", Conv1D(c.nEmbd, 3 * c.nEmbd));
    c_proj = register_module("c_proj", Conv1D(c.nEmbd, c.nEmbd));
    attn_dropout = register_module("attn_dropout", torch::nn::Dropout(c.dropout));
    resid_dropout = register_module("resid_dropout", torch::nn::Dropout(c.dropout));
  }

  torch::Tensor splitHeads(const torch::Tensor& x) {
    return viewTo(x, {dimOf(x, 0), dimOf(x, 1), nHead, headDim}).permute({0, 2, 1, 3});
  }
  torch::Tensor mergeHeads(const torch::Tensor& x) {
    auto y = x.permute({0, 2, 1, 3}).contiguous();
    return viewTo(y, {dimOf(y, 0), dimOf(y, 1), nHead * headDim});
  }

  torch::Tensor forward(const torch::Tensor& hidden) {
    auto qkv = c_attn(hidden).split(splitSize, 2);
    auto query = splitHeads(qkv[0]);
    auto key = splitHeads(qkv[1]);
    auto value = splitHeads(qkv[2]);

    auto opts = torch::TensorOptions().dtype(query.dtype()).device(query.device());
    auto weights = torch::matmul(query, key.transpose(-1, -2));
    weights = weights / torch::full({}, std::sqrt(static_cast<double>(headDim)), opts);
    // No past keys: the query block is the last `T` rows of the first `T` columns.
    auto causal = sliceTo(sliceTo(bias, 2, 0, dimOf(key, -2)), 3, 0, dimOf(key, -2));
    auto maskValue = torch::full({}, std::numeric_limits<float>::lowest(), opts);
    weights = torch::where(causal, weights, maskValue);
    weights = attn_dropout(torch::softmax(weights, -1));
    auto out = mergeHeads(torch::matmul(weights, value));
    return resid_dropout(c_proj(out));
  }

  int64_t nHead, headDim, splitSize;
  torch::Tensor bias;
  Conv1D c_attn{nullptr}, c_proj{nullptr};
  torch::nn::Dropout attn_dropout{nullptr}, resid_dropout{nullptr};
};
TORCH_MODULE(GPT2Attention);

struct GPT2MLPImpl : torch::nn::Module {
  explicit GPT2MLPImpl(const Gpt2Config& c) {
    c_fc = register_module("c_fc", Conv1D(c.nEmbd, 4 * c.nEmbd));
    c_proj = register_module("c_proj", Conv1D(4 * c.nEmbd, c.nEmbd));
    dropout = register_module("dropout", torch::nn::Dropout(c.dropout));
  }
  torch::Tensor forward(const torch::Tensor& x) { return dropout(c_proj(geluNew(c_fc(x)))); }
  Conv1D c_fc{nullptr}, c_proj{nullptr};
  torch::nn::Dropout dropout{nullptr};
};
TORCH_MODULE(GPT2MLP);

struct GPT2BlockImpl : torch::nn::Module {
  explicit GPT2BlockImpl(const Gpt2Config& c) {
    ln_1 = register_module("ln_1", layerNorm(c.nEmbd, c.layerNormEps));
    attn = register_module("attn", GPT2Attention(c));
    ln_2 = register_module("ln_2", layerNorm(c.nEmbd, c.layerNormEps));
    mlp = register_module("mlp", GPT2MLP(c));
  }
  torch::Tensor forward(torch::Tensor x) {
    x = x + attn(ln_1(x));
    return x + mlp(ln_2(x));
  }
  torch::nn::LayerNorm ln_1{nullptr}, ln_2{nullptr};
  GPT2Attention attn{nullptr};
  GPT2MLP mlp{nullptr};
};
TORCH_MODULE(GPT2Block);

struct GPT2ModelImpl : torch::nn::Module {
  explicit GPT2ModelImpl(const Gpt2Config& c) {
    wte = register_module("wte", torch::nn::Embedding(c.vocab, c.nEmbd));
    wpe = register_module("wpe", torch::nn::Embedding(c.nPositions, c.nEmbd));
    drop = register_module("drop", torch::nn::Dropout(c.dropout));
    h = register_module("h", torch::nn::ModuleList());
    for (int64_t i = 0; i < c.nLayer; ++i) h->push_back(GPT2Block(c));
    ln_f = register_module("ln_f", layerNorm(c.nEmbd, c.layerNormEps));
  }
  torch::Tensor forward(const torch::Tensor& inputIds) {
    auto positions = arangeTo(0, dimOf(inputIds, -1), torch::TensorOptions().dtype(torch::kLong))
                         .unsqueeze(0);
    auto x = drop(wte(inputIds) + wpe(positions));
    for (const auto& block : *h) x = block->as<GPT2BlockImpl>()->forward(x);
    return ln_f(x);
  }
  torch::nn::Embedding wte{nullptr}, wpe{nullptr};
  torch::nn::Dropout drop{nullptr};
  torch::nn::ModuleList h{nullptr};
  torch::nn::LayerNorm ln_f{nullptr};
};
TORCH_MODULE(GPT2Model);

}  // namespace

// GPT2LMHeadModel: the head is tied to the token embedding wte.
EagerModel buildGpt2(const std::string& preset, int64_t layers, at::Generator& gen) {
  auto c = configFor(preset);
  setDepth(c.nLayer, layers);
  CausalLM<GPT2Model> model("GPT2LMHeadModel", "transformer", GPT2Model(c), c.nEmbd, c.vocab, false);
  model->lm_head->weight = tieParameter(*model->lm_head, "weight", model->body->wte->weight);
  return causalLmModel(model, preset, c.vocab, gen);
}

}  // namespace foldnorm::zoo
