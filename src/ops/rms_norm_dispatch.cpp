// C++ entry points that call the foldnorm ops through the dispatcher, so callers need no
// kernel headers and pick up CPU or CUDA by the input's device.
#include <ATen/core/dispatch/Dispatcher.h>

#include "foldnorm/ops/rms_norm.h"

namespace foldnorm::ops {
namespace {

using NormSignature = at::Tensor(const at::Tensor&, at::IntArrayRef,
                                 const std::optional<at::Tensor>&,
                                 const std::optional<at::Tensor>&, double);
using NormOutSignature = at::Tensor&(const at::Tensor&, at::IntArrayRef,
                                     const std::optional<at::Tensor>&,
                                     const std::optional<at::Tensor>&, double, at::Tensor&);

c10::TypedOperatorHandle<NormSignature> normOp(const char* name) {
  return c10::Dispatcher::singleton().findSchemaOrThrow(name, "").typed<NormSignature>();
}

c10::TypedOperatorHandle<NormOutSignature> normOutOp(const char* name) {
  return c10::Dispatcher::singleton().findSchemaOrThrow(name, "out").typed<NormOutSignature>();
}

}  // namespace

at::Tensor rmsNorm(const at::Tensor& input, at::IntArrayRef normalizedShape,
                   const std::optional<at::Tensor>& weight, const std::optional<at::Tensor>& bias,
                   double eps) {
  static auto op = normOp(kRmsNormOp);
  return op.call(input, normalizedShape, weight, bias, eps);
}

at::Tensor& rmsNormOut(at::Tensor& out, const at::Tensor& input, at::IntArrayRef normalizedShape,
                       const std::optional<at::Tensor>& weight,
                       const std::optional<at::Tensor>& bias, double eps) {
  static auto op = normOutOp(kRmsNormOp);
  return op.call(input, normalizedShape, weight, bias, eps, out);
}

at::Tensor layerNorm(const at::Tensor& input, at::IntArrayRef normalizedShape,
                     const std::optional<at::Tensor>& weight,
                     const std::optional<at::Tensor>& bias, double eps) {
  static auto op = normOp(kLayerNormOp);
  return op.call(input, normalizedShape, weight, bias, eps);
}

at::Tensor& layerNormOut(at::Tensor& out, const at::Tensor& input,
                         at::IntArrayRef normalizedShape, const std::optional<at::Tensor>& weight,
                         const std::optional<at::Tensor>& bias, double eps) {
  static auto op = normOutOp(kLayerNormOp);
  return op.call(input, normalizedShape, weight, bias, eps, out);
}

std::tuple<at::Tensor, at::Tensor> addRmsNorm(const at::Tensor& input, const at::Tensor& residual,
                                              at::IntArrayRef normalizedShape,
                                              const std::optional<at::Tensor>& weight,
                                              const std::optional<at::Tensor>& bias, double eps) {
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow(kAddRmsNormOp, "")
                       .typed<std::tuple<at::Tensor, at::Tensor>(
                           const at::Tensor&, const at::Tensor&, at::IntArrayRef,
                           const std::optional<at::Tensor>&, const std::optional<at::Tensor>&,
                           double)>();
  return op.call(input, residual, normalizedShape, weight, bias, eps);
}

std::tuple<at::Tensor&, at::Tensor&> addRmsNormOut(at::Tensor& out, at::Tensor& sum,
                                                   const at::Tensor& input,
                                                   const at::Tensor& residual,
                                                   at::IntArrayRef normalizedShape,
                                                   const std::optional<at::Tensor>& weight,
                                                   const std::optional<at::Tensor>& bias,
                                                   double eps) {
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow(kAddRmsNormOp, "out")
                       .typed<std::tuple<at::Tensor&, at::Tensor&>(
                           const at::Tensor&, const at::Tensor&, at::IntArrayRef,
                           const std::optional<at::Tensor>&, const std::optional<at::Tensor>&,
                           double, at::Tensor&, at::Tensor&)>();
  return op.call(input, residual, normalizedShape, weight, bias, eps, out, sum);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> normBackward(
    bool layer, const at::Tensor& gradOut, const at::Tensor& input,
    at::IntArrayRef normalizedShape, const std::optional<at::Tensor>& weight,
    const std::optional<at::Tensor>& bias, double eps, std::array<bool, 3> outputMask) {
  using Signature = std::tuple<at::Tensor, at::Tensor, at::Tensor>(
      const at::Tensor&, const at::Tensor&, at::IntArrayRef, const std::optional<at::Tensor>&,
      const std::optional<at::Tensor>&, double, std::array<bool, 3>);
  static auto rms = c10::Dispatcher::singleton()
                        .findSchemaOrThrow("foldnorm::rms_norm_backward", "")
                        .typed<Signature>();
  static auto ln = c10::Dispatcher::singleton()
                       .findSchemaOrThrow("foldnorm::layer_norm_backward", "")
                       .typed<Signature>();
  return (layer ? ln : rms).call(gradOut, input, normalizedShape, weight, bias, eps, outputMask);
}

}  // namespace foldnorm::ops
