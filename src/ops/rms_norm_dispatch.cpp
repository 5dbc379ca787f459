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

}  // namespace foldnorm::ops
