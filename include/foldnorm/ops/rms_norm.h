// The foldnorm operator library (libfoldnorm_ops.so), registered with TORCH_LIBRARY(foldnorm):
//
//   foldnorm::rms_norm(Tensor input, int[] normalized_shape, Tensor? weight, Tensor? bias,
//                      float eps) -> Tensor
//     y = x / sqrt(mean(x^2 over the trailing normalized_shape dims) + eps) * weight + bias
//     (weight/bias optional). Same arguments and eps semantics as aten::layer_norm minus the
//     mean subtraction, so a folded LayerNorm keeps its exact eps, weight and bias.
//
// Python: torch.ops.load_library("<build>/lib/libfoldnorm_ops.so"); torch.ops.foldnorm.rms_norm(...)
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/Optional.h>

namespace foldnorm::ops {

inline constexpr const char* kRmsNormOp = "foldnorm::rms_norm";

/// Calls the registered operator through the dispatcher (CPU or CUDA by the input's device).
at::Tensor rmsNorm(const at::Tensor& input, at::IntArrayRef normalizedShape,
                   const std::optional<at::Tensor>& weight, const std::optional<at::Tensor>& bias,
                   double eps);

}  // namespace foldnorm::ops
