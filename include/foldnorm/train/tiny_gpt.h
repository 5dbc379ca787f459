// A small pre-LN GPT (character level) in three norm variants with identical parameter names, so
// one initialization copies into all three:
//
//   kLayerNorm     Linear/Embedding everywhere, LayerNorm before each branch and before the head.
//   kRmsNorm       the same with RMSNorm (same weight, bias, eps): not the same function.
//   kCbwcRmsNorm   RMSNorm, and every layer that writes into the residual stream is centered:
//                  token embedding and position table (rows over d), attention output projection
//                  and MLP output projection (CBWCLinear). The residual stream is then mean-zero
//                  in every row and each RMSNorm computes what the LayerNorm computed.
//
// Layers that do not write into the stream (qkv, MLP input, head) stay plain Linear: their
// outputs feed attention, GELU or the loss, never a norm. The head is untied from the token
// embedding: a tied head would read the centered table (docs/method.md section 4).
//
// Dropout (p = config.dropout, training mode only) sits where GPT-2 has it: after the embedding
// sum, on the attention probabilities and on each branch output before the residual add. The
// branch and embedding dropouts rescale each centered row element by element, so the stream is no
// longer mean-zero and kCbwcRmsNorm stops being the LayerNorm model (the paper's observation).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>

namespace foldnorm::train {

enum class NormVariant { kLayerNorm, kRmsNorm, kCbwcRmsNorm };

const char* toString(NormVariant variant);  // "LayerNorm", "RMSNorm", "CBWC+RMSNorm"

struct TinyGptConfig {
  int64_t vocabSize = 96;
  int64_t context = 64;  // longest sequence; the position table has this many rows
  int64_t dModel = 64;
  int64_t heads = 4;
  int64_t layers = 2;
  int64_t mlpRatio = 4;
  double dropout = 0.0;
  double eps = 1e-5;
  NormVariant norm = NormVariant::kLayerNorm;
};

class TinyGptBlockImpl : public torch::nn::Module {
 public:
  explicit TinyGptBlockImpl(const TinyGptConfig& config);
  torch::Tensor forward(const torch::Tensor& x);

 private:
  torch::Tensor attention(const torch::Tensor& x);

  TinyGptConfig config_;
  torch::nn::AnyModule norm1_;
  torch::nn::Linear qkv_{nullptr};
  torch::nn::AnyModule attentionOut_;  // writes into the stream
  torch::nn::AnyModule norm2_;
  torch::nn::Linear mlpIn_{nullptr};
  torch::nn::AnyModule mlpOut_;  // writes into the stream
  torch::nn::Dropout attentionDropout_{nullptr};
  torch::nn::Dropout residualDropout_{nullptr};
};
TORCH_MODULE(TinyGptBlock);

class TinyGptImpl : public torch::nn::Module {
 public:
  explicit TinyGptImpl(const TinyGptConfig& config);

  /// ids [batch, time] (int64, time <= context) -> logits [batch, time, vocab].
  torch::Tensor forward(const torch::Tensor& ids);

  /// Mean next-token cross entropy of forward(ids) against targets [batch, time].
  torch::Tensor loss(const torch::Tensor& ids, const torch::Tensor& targets);

  const TinyGptConfig& config() const { return config_; }

  /// The residual stream just before the final norm (for checks of the mean-zero property).
  torch::Tensor finalStream(const torch::Tensor& ids);

 private:
  TinyGptConfig config_;
  torch::nn::AnyModule tokenEmbedding_;
  torch::Tensor position_;  // [context, dModel]
  torch::nn::ModuleList blocks_;
  torch::nn::AnyModule finalNorm_;
  torch::nn::Linear head_{nullptr};
  torch::nn::Dropout embeddingDropout_{nullptr};
};
TORCH_MODULE(TinyGpt);

/// GPT-2's initialization drawn from `seed`: weights and embeddings normal(0, 0.02), the two
/// projections into the stream normal(0, 0.02 / sqrt(2 * layers)), biases zero, norms weight 1
/// and bias 0. Draws from a private generator, so it leaves the global RNG alone.
void initializeGpt2Style(TinyGpt& model, uint64_t seed);

/// Copies every parameter of `from` into the parameter of the same name in `to` (dtype and
/// device of `to`). Throws foldnorm::Error naming the parameter when the two models' names or
/// shapes differ.
void copyParameters(const torch::nn::Module& from, torch::nn::Module& to);

}  // namespace foldnorm::train
