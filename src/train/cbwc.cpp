#include "foldnorm/train/cbwc.h"

#include <torch/torch.h>

#include <cmath>
#include <utility>

#include "foldnorm/ops/rms_norm.h"

namespace foldnorm::train {

torch::Tensor centerAlong(const torch::Tensor& tensor, int64_t dim) {
  return tensor - tensor.mean(dim, /*keepdim=*/true);
}

CBWCLinearImpl::CBWCLinearImpl(int64_t inFeatures, int64_t outFeatures, bool bias)
    : inFeatures_(inFeatures), outFeatures_(outFeatures), hasBias_(bias) {
  reset();
}

void CBWCLinearImpl::reset() {
  weight = register_parameter("weight", torch::empty({outFeatures_, inFeatures_}));
  if (hasBias_) {
    bias = register_parameter("bias", torch::empty({outFeatures_}));
  } else {
    bias = register_parameter("bias", torch::Tensor(), /*requires_grad=*/false);
  }
  resetParameters();
}

void CBWCLinearImpl::resetParameters() {
  torch::NoGradGuard noGrad;
  torch::nn::init::kaiming_uniform_(weight, std::sqrt(5.0));
  if (bias.defined()) {
    const double bound = inFeatures_ > 0 ? 1.0 / std::sqrt(static_cast<double>(inFeatures_)) : 0.0;
    torch::nn::init::uniform_(bias, -bound, bound);
  }
}

torch::Tensor CBWCLinearImpl::effectiveWeight() const { return centerAlong(weight, 0); }

torch::Tensor CBWCLinearImpl::effectiveBias() const {
  return bias.defined() ? centerAlong(bias, 0) : torch::Tensor();
}

torch::Tensor CBWCLinearImpl::forward(const torch::Tensor& input) {
  return torch::nn::functional::linear(input, effectiveWeight(), effectiveBias());
}

CBWCEmbeddingImpl::CBWCEmbeddingImpl(int64_t numEmbeddings, int64_t embeddingDim)
    : numEmbeddings_(numEmbeddings), embeddingDim_(embeddingDim) {
  reset();
}

void CBWCEmbeddingImpl::reset() {
  weight = register_parameter("weight", torch::empty({numEmbeddings_, embeddingDim_}));
  torch::NoGradGuard noGrad;
  torch::nn::init::normal_(weight);  // torch::nn::Embedding's initialization
}

torch::Tensor CBWCEmbeddingImpl::effectiveWeight() const { return centerAlong(weight, 1); }

torch::Tensor CBWCEmbeddingImpl::forward(const torch::Tensor& indices) {
  // Centering the whole table costs vocab x d per step; for the small vocabularies trained here
  // that is cheaper than gathering first and centering the looked-up rows, and it keeps the
  // module's function independent of which rows a batch touches.
  return torch::embedding(effectiveWeight(), indices);
}

RMSNormImpl::RMSNormImpl(std::vector<int64_t> normalizedShape, double eps)
    : normalizedShape_(std::move(normalizedShape)), eps_(eps) {
  reset();
}

void RMSNormImpl::reset() {
  weight = register_parameter("weight", torch::ones(normalizedShape_));
  bias = register_parameter("bias", torch::zeros(normalizedShape_));
}

bool RMSNormImpl::needsAutograd(const torch::Tensor& input) const {
  return torch::GradMode::is_enabled() &&
         (input.requires_grad() || weight.requires_grad() || bias.requires_grad());
}

torch::Tensor RMSNormImpl::forward(const torch::Tensor& input) {
  if (needsAutograd(input)) {
    return at::rms_norm(input, normalizedShape_, weight, eps_) + bias;
  }
  return ops::rmsNorm(input, normalizedShape_, weight, bias, eps_);
}

}  // namespace foldnorm::train
