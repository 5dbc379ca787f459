#include "foldnorm/train/tiny_gpt.h"

#include <torch/torch.h>

#include <cmath>
#include <limits>
#include <string>

#include "foldnorm/common/error.h"
#include "foldnorm/train/cbwc.h"

namespace foldnorm::train {
namespace {

bool centersStream(const TinyGptConfig& config) {
  return config.norm == NormVariant::kCbwcRmsNorm;
}

torch::nn::AnyModule makeNorm(const TinyGptConfig& config) {
  if (config.norm == NormVariant::kLayerNorm) {
    return torch::nn::AnyModule(
        torch::nn::LayerNorm(torch::nn::LayerNormOptions({config.dModel}).eps(config.eps)));
  }
  return torch::nn::AnyModule(RMSNorm(std::vector<int64_t>{config.dModel}, config.eps));
}

// A linear layer whose output is added to the residual stream.
torch::nn::AnyModule makeStreamLinear(const TinyGptConfig& config, int64_t in, int64_t out) {
  if (centersStream(config)) return torch::nn::AnyModule(CBWCLinear(in, out));
  return torch::nn::AnyModule(torch::nn::Linear(in, out));
}

void checkConfig(const TinyGptConfig& c) {
  if (c.vocabSize <= 0 || c.context <= 0 || c.dModel <= 0 || c.heads <= 0 || c.layers <= 0 ||
      c.mlpRatio <= 0) {
    throw Error("tiny GPT: vocab, context, d_model, heads, layers and mlp ratio must be positive");
  }
  if (c.dModel % c.heads != 0) {
    throw Error("tiny GPT: d_model " + std::to_string(c.dModel) + " is not divisible by heads " +
                std::to_string(c.heads) + "; pick heads that divide d_model");
  }
  if (c.dropout < 0.0 || c.dropout >= 1.0) {
    throw Error("tiny GPT: dropout must be in [0, 1), got " + std::to_string(c.dropout));
  }
}

}  // namespace

const char* toString(NormVariant variant) {
  switch (variant) {
    case NormVariant::kLayerNorm: return "LayerNorm";
    case NormVariant::kRmsNorm: return "RMSNorm";
    case NormVariant::kCbwcRmsNorm: return "CBWC+RMSNorm";
  }
  return "?";
}

TinyGptBlockImpl::TinyGptBlockImpl(const TinyGptConfig& config) : config_(config) {
  const int64_t d = config.dModel;
  norm1_ = makeNorm(config);
  register_module("norm1", norm1_.ptr());
  qkv_ = register_module("qkv", torch::nn::Linear(d, 3 * d));
  attentionOut_ = makeStreamLinear(config, d, d);
  register_module("attention_out", attentionOut_.ptr());
  norm2_ = makeNorm(config);
  register_module("norm2", norm2_.ptr());
  mlpIn_ = register_module("mlp_in", torch::nn::Linear(d, config.mlpRatio * d));
  mlpOut_ = makeStreamLinear(config, config.mlpRatio * d, d);
  register_module("mlp_out", mlpOut_.ptr());
  attentionDropout_ = register_module("attention_dropout", torch::nn::Dropout(config.dropout));
  residualDropout_ = register_module("residual_dropout", torch::nn::Dropout(config.dropout));
}

torch::Tensor TinyGptBlockImpl::attention(const torch::Tensor& x) {
  const int64_t batch = x.size(0), time = x.size(1), d = config_.dModel;
  const int64_t heads = config_.heads, headDim = d / heads;
  auto qkv = qkv_(x).view({batch, time, 3, heads, headDim}).permute({2, 0, 3, 1, 4});
  auto q = qkv[0], k = qkv[1], v = qkv[2];  // [batch, heads, time, headDim]
  auto scores = torch::matmul(q, k.transpose(-2, -1)) / std::sqrt(static_cast<double>(headDim));
  auto future = torch::ones({time, time}, x.options().dtype(torch::kBool)).triu(1);
  scores = scores.masked_fill(future, -std::numeric_limits<double>::infinity());
  auto probabilities = attentionDropout_(torch::softmax(scores, -1));
  auto mixed = torch::matmul(probabilities, v).transpose(1, 2).reshape({batch, time, d});
  return attentionOut_.forward(mixed);
}

torch::Tensor TinyGptBlockImpl::forward(const torch::Tensor& x) {
  auto h = x + residualDropout_(attention(norm1_.forward(x)));
  auto mlp = mlpOut_.forward(torch::gelu(mlpIn_(norm2_.forward(h))));
  return h + residualDropout_(mlp);
}

TinyGptImpl::TinyGptImpl(const TinyGptConfig& config) : config_(config) {
  checkConfig(config);
  if (centersStream(config)) {
    tokenEmbedding_ = torch::nn::AnyModule(CBWCEmbedding(config.vocabSize, config.dModel));
  } else {
    tokenEmbedding_ = torch::nn::AnyModule(torch::nn::Embedding(config.vocabSize, config.dModel));
  }
  register_module("token_embedding", tokenEmbedding_.ptr());
  position_ = register_parameter("position", torch::zeros({config.context, config.dModel}));
  blocks_ = register_module("blocks", torch::nn::ModuleList());
  for (int64_t i = 0; i < config.layers; ++i) blocks_->push_back(TinyGptBlock(config));
  finalNorm_ = makeNorm(config);
  register_module("final_norm", finalNorm_.ptr());
  head_ = register_module("head", torch::nn::Linear(config.dModel, config.vocabSize));
  embeddingDropout_ = register_module("embedding_dropout", torch::nn::Dropout(config.dropout));
}

torch::Tensor TinyGptImpl::finalStream(const torch::Tensor& ids) {
  const int64_t time = ids.size(1);
  if (time > config_.context) {
    throw Error("tiny GPT: sequence of " + std::to_string(time) + " tokens is longer than the " +
                "context of " + std::to_string(config_.context) + "; shorten it or raise context");
  }
  // The position table enters the stream on its own, so it is centered like an embedding row.
  auto position = position_.slice(0, 0, time);
  if (centersStream(config_)) position = centerAlong(position, 1);
  auto x = embeddingDropout_(tokenEmbedding_.forward(ids) + position);
  for (const auto& block : *blocks_) x = block->as<TinyGptBlock>()->forward(x);
  return x;
}

torch::Tensor TinyGptImpl::forward(const torch::Tensor& ids) {
  return head_(finalNorm_.forward(finalStream(ids)));
}

torch::Tensor TinyGptImpl::loss(const torch::Tensor& ids, const torch::Tensor& targets) {
  auto logits = forward(ids);
  return torch::nn::functional::cross_entropy(logits.reshape({-1, logits.size(-1)}),
                                              targets.reshape({-1}));
}

void initializeGpt2Style(TinyGpt& model, uint64_t seed) {
  const auto& config = model->config();
  const double streamStd = 0.02 / std::sqrt(2.0 * static_cast<double>(config.layers));
  auto generator = at::make_generator<at::CPUGeneratorImpl>(seed);
  torch::NoGradGuard noGrad;
  for (auto& item : model->named_parameters()) {
    const std::string& name = item.key();
    auto& p = item.value();
    const bool isNorm = name.find("norm") != std::string::npos;
    const bool isBias = name.size() >= 4 && name.compare(name.size() - 4, 4, "bias") == 0;
    if (isNorm) {
      p.fill_(isBias ? 0.0 : 1.0);
    } else if (isBias) {
      p.zero_();
    } else {
      const bool writesStream = name.find("attention_out") != std::string::npos ||
                                name.find("mlp_out") != std::string::npos;
      // Drawn in float64 on the CPU whatever the model's dtype, so every dtype starts alike.
      auto draw = at::normal(0.0, writesStream ? streamStd : 0.02, p.sizes(), generator,
                             torch::TensorOptions().dtype(torch::kFloat64));
      p.copy_(draw);
    }
  }
}

void copyParameters(const torch::nn::Module& from, torch::nn::Module& to) {
  auto source = from.named_parameters();
  auto target = to.named_parameters();
  if (source.size() != target.size()) {
    throw Error("copyParameters: the models have " + std::to_string(source.size()) + " and " +
                std::to_string(target.size()) + " parameters; build both from the same config");
  }
  torch::NoGradGuard noGrad;
  for (auto& item : target) {
    const auto* value = source.find(item.key());
    if (value == nullptr) {
      throw Error("copyParameters: parameter '" + item.key() +
                  "' is missing in the source model; build both from the same config");
    }
    if (!value->sizes().equals(item.value().sizes())) {
      throw Error("copyParameters: parameter '" + item.key() + "' has different shapes in the " +
                  "two models; build both from the same config");
    }
    item.value().copy_(*value);
  }
}

}  // namespace foldnorm::train
