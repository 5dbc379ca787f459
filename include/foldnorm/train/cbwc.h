// The paper's training-time form: column-based weight centering (CBWC) and the RMSNorm that
// replaces LayerNorm behind it (docs/method.md section 2).
//
//   Before:  y = x W^T + b            -> LayerNorm(y)
//   After:   y = x V^T + c            -> RMSNorm(y)
//            V = W - mean_over_outputs(W)   (W [out,in]: mean over dim 0, one per input column)
//            c = b - mean(b)
//
// W and b stay free parameters (the proxies); V and c are recomputed on every forward, so the
// centering is part of the autograd graph and the optimizer updates the proxies. Every output row
// of a CBWC layer sums to zero for every input, so the RMSNorm that reads it sees mean-zero rows,
// where RMSNorm and LayerNorm are the same function with the same eps, weight and bias. The
// parameter names (weight, bias) are those of torch::nn::Linear / Embedding / LayerNorm, so
// weights copy across by name between the LayerNorm model and its CBWC twin.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <vector>

namespace foldnorm::train {

/// W - W.mean(dim, keepdim): removes, along `dim`, the component a following norm ignores.
torch::Tensor centerAlong(const torch::Tensor& tensor, int64_t dim);

/// A linear layer whose effective weight is column-centered (CCC) on every forward.
class CBWCLinearImpl : public torch::nn::Cloneable<CBWCLinearImpl> {
 public:
  CBWCLinearImpl(int64_t inFeatures, int64_t outFeatures, bool bias = true);

  void reset() override;
  /// torch::nn::Linear's initialization (Kaiming-uniform weight, uniform bias), so that a CBWC
  /// layer built on its own starts like a Linear of the same size.
  void resetParameters();

  /// x V^T + c.
  torch::Tensor forward(const torch::Tensor& input);

  /// V = W - W.mean(0): the weight the forward uses ([out,in], each column sums to zero).
  torch::Tensor effectiveWeight() const;
  /// c = b - mean(b); undefined when built without bias.
  torch::Tensor effectiveBias() const;

  int64_t inFeatures() const { return inFeatures_; }
  int64_t outFeatures() const { return outFeatures_; }

  torch::Tensor weight;  // the proxy W [out,in]
  torch::Tensor bias;    // the proxy b [out], or undefined

 private:
  int64_t inFeatures_;
  int64_t outFeatures_;
  bool hasBias_;
};
TORCH_MODULE(CBWCLinear);

/// An embedding whose table rows are centered over the features on every forward. A lookup is a
/// linear map of a one-hot vector, and its "columns" are the table rows (docs/method.md section 2).
class CBWCEmbeddingImpl : public torch::nn::Cloneable<CBWCEmbeddingImpl> {
 public:
  CBWCEmbeddingImpl(int64_t numEmbeddings, int64_t embeddingDim);

  void reset() override;
  torch::Tensor forward(const torch::Tensor& indices);
  /// The table the lookup uses: each row of the proxy minus its own mean.
  torch::Tensor effectiveWeight() const;

  torch::Tensor weight;  // the proxy [numEmbeddings, embeddingDim]

 private:
  int64_t numEmbeddings_;
  int64_t embeddingDim_;
};
TORCH_MODULE(CBWCEmbedding);

/// RMSNorm over the trailing `normalizedShape` dims with LayerNorm's parameters (weight, bias, eps):
///   y = x / sqrt(mean(x^2) + eps) * weight + bias
///
/// Two paths, the same function:
/// - no autograd needed (grad mode off, or nothing requires grad: evaluation, inference): the
///   project's operator foldnorm::rms_norm (ops/rms_norm.h), the kernel the fold installs.
/// - autograd needed (training): foldnorm::rms_norm is registered for CPU, CUDA and Meta only,
///   with no Autograd kernel, so a call on tensors that require grad would silently produce an
///   output with no grad_fn. Training therefore composes ATen's differentiable at::rms_norm with
///   the bias add (at::rms_norm has no bias argument).
class RMSNormImpl : public torch::nn::Cloneable<RMSNormImpl> {
 public:
  explicit RMSNormImpl(std::vector<int64_t> normalizedShape, double eps = 1e-5);

  void reset() override;
  torch::Tensor forward(const torch::Tensor& input);

  /// Whether forward(input) takes the differentiable ATen path (see the class comment).
  bool needsAutograd(const torch::Tensor& input) const;

  double eps() const { return eps_; }

  torch::Tensor weight;  // ones at reset
  torch::Tensor bias;    // zeros at reset

 private:
  std::vector<int64_t> normalizedShape_;
  double eps_;
};
TORCH_MODULE(RMSNorm);

}  // namespace foldnorm::train
