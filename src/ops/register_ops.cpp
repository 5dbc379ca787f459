// The schemas of the foldnorm operator library, and the Meta kernels (shape-only: torch.compile's
// fake tensors and shape propagation can run graphs that contain our ops).
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <array>
#include <tuple>

#include "norm_common.h"

namespace foldnorm::ops {
namespace {

template <NormKind kKind>
at::Tensor normMeta(const at::Tensor& input, at::IntArrayRef normalizedShape,
                    const std::optional<at::Tensor>& weight, const std::optional<at::Tensor>& bias,
                    double eps) {
  checkNormInputs(kKind, input, normalizedShape, weight, bias);
  return emptyNormOutput(input);
}

template <NormKind kKind>
at::Tensor& normMetaOut(const at::Tensor& input, at::IntArrayRef normalizedShape,
                        const std::optional<at::Tensor>& weight,
                        const std::optional<at::Tensor>& bias, double eps, at::Tensor& out) {
  checkNormInputs(kKind, input, normalizedShape, weight, bias);
  prepareNormOut(kKind, input, out);
  return out;
}

std::tuple<at::Tensor, at::Tensor> addRmsNormMeta(const at::Tensor& input,
                                                  const at::Tensor& residual,
                                                  at::IntArrayRef normalizedShape,
                                                  const std::optional<at::Tensor>& weight,
                                                  const std::optional<at::Tensor>& bias,
                                                  double eps) {
  checkAddNormInputs(input, residual, normalizedShape, weight, bias);
  return {emptyNormOutput(input), emptyNormOutput(input)};
}

std::tuple<at::Tensor&, at::Tensor&> addRmsNormMetaOut(
    const at::Tensor& input, const at::Tensor& residual, at::IntArrayRef normalizedShape,
    const std::optional<at::Tensor>& weight, const std::optional<at::Tensor>& bias, double eps,
    at::Tensor& out, at::Tensor& sum) {
  checkAddNormInputs(input, residual, normalizedShape, weight, bias);
  prepareAddNormOut(input, residual, out, sum);
  return {out, sum};
}

template <NormKind kKind>
std::tuple<at::Tensor, at::Tensor, at::Tensor> normBackwardMeta(
    const at::Tensor& gradOut, const at::Tensor& input, at::IntArrayRef normalizedShape,
    const std::optional<at::Tensor>& weight, const std::optional<at::Tensor>& bias, double eps,
    std::array<bool, 3> outputMask) {
  checkNormBackwardInputs(kKind, gradOut, input, normalizedShape, weight, bias);
  const at::Tensor w = weight ? *weight : at::Tensor();
  const at::Tensor b = bias ? *bias : at::Tensor();
  const auto paramOptions = input.options().dtype(paramTypeOf(opName(kKind), input, w, b));
  return {outputMask[0] ? at::empty(input.sizes(), input.options()) : at::Tensor(),
          outputMask[1] && w.defined() ? at::empty(normalizedShape, paramOptions) : at::Tensor(),
          outputMask[2] && b.defined() ? at::empty(normalizedShape, paramOptions) : at::Tensor()};
}

}  // namespace

TORCH_LIBRARY(foldnorm, m) {
  // No defaults: the fold step writes every argument, copied from the aten::layer_norm it replaces.
  m.def("rms_norm(Tensor input, int[] normalized_shape, Tensor? weight, Tensor? bias, float eps) "
        "-> Tensor");
  m.def("rms_norm.out(Tensor input, int[] normalized_shape, Tensor? weight, Tensor? bias, "
        "float eps, *, Tensor(a!) out) -> Tensor(a!)");
  m.def("layer_norm(Tensor input, int[] normalized_shape, Tensor? weight, Tensor? bias, "
        "float eps) -> Tensor");
  m.def("layer_norm.out(Tensor input, int[] normalized_shape, Tensor? weight, Tensor? bias, "
        "float eps, *, Tensor(a!) out) -> Tensor(a!)");
  // (normed, sum): sum = input + residual (aten::add, alpha 1, rounded to the dtype) and
  // normed = rms_norm(sum), in one pass that reads both once and writes both once.
  m.def("add_rms_norm(Tensor input, Tensor residual, int[] normalized_shape, Tensor? weight, "
        "Tensor? bias, float eps) -> (Tensor, Tensor)");
  m.def("add_rms_norm.out(Tensor input, Tensor residual, int[] normalized_shape, Tensor? weight, "
        "Tensor? bias, float eps, *, Tensor(a!) out, Tensor(b!) sum) -> (Tensor(a!), Tensor(b!))");
  // Gradients of input, weight, bias (output_mask picks them; the others come back undefined).
  // Called by the Autograd kernels in norm_autograd.cpp.
  m.def("rms_norm_backward(Tensor grad_out, Tensor input, int[] normalized_shape, Tensor? weight, "
        "Tensor? bias, float eps, bool[3] output_mask) -> (Tensor, Tensor, Tensor)");
  m.def("layer_norm_backward(Tensor grad_out, Tensor input, int[] normalized_shape, "
        "Tensor? weight, Tensor? bias, float eps, bool[3] output_mask) -> (Tensor, Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(foldnorm, Meta, m) {
  m.impl("rms_norm", &normMeta<NormKind::kRms>);
  m.impl("rms_norm.out", &normMetaOut<NormKind::kRms>);
  m.impl("layer_norm", &normMeta<NormKind::kLayer>);
  m.impl("layer_norm.out", &normMetaOut<NormKind::kLayer>);
  m.impl("add_rms_norm", &addRmsNormMeta);
  m.impl("add_rms_norm.out", &addRmsNormMetaOut);
  m.impl("rms_norm_backward", &normBackwardMeta<NormKind::kRms>);
  m.impl("layer_norm_backward", &normBackwardMeta<NormKind::kLayer>);
}

}  // namespace foldnorm::ops
