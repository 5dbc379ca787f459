// C++ entry point that calls foldnorm::rms_norm through the dispatcher, so callers need no
// kernel headers and pick up CPU or CUDA by the input's device.
#include <ATen/core/dispatch/Dispatcher.h>

#include "foldnorm/ops/rms_norm.h"

namespace foldnorm::ops {

at::Tensor rmsNorm(const at::Tensor& input, at::IntArrayRef normalizedShape,
                   const std::optional<at::Tensor>& weight, const std::optional<at::Tensor>& bias,
                   double eps) {
  static auto op = c10::Dispatcher::singleton()
                       .findSchemaOrThrow(kRmsNormOp, "")
                       .typed<at::Tensor(const at::Tensor&, at::IntArrayRef,
                                         const std::optional<at::Tensor>&,
                                         const std::optional<at::Tensor>&, double)>();
  return op.call(input, normalizedShape, weight, bias, eps);
}

}  // namespace foldnorm::ops
