// The foldnorm operator library (libfoldnorm_ops.so), registered with TORCH_LIBRARY(foldnorm):
//
//   foldnorm::rms_norm(Tensor input, int[] normalized_shape, Tensor? weight, Tensor? bias,
//                      float eps) -> Tensor
//     y = x / sqrt(mean(x^2 over the trailing normalized_shape dims) + eps) * weight + bias
//     (weight/bias optional). Same arguments and eps semantics as aten::layer_norm minus the
//     mean subtraction, so a folded LayerNorm keeps its exact eps, weight and bias.
//   foldnorm::rms_norm.out(..., *, Tensor(a!) out) -> Tensor(a!)
//     The same, written into `out` (resized to the input's shape if needed; must be contiguous
//     and of the input's dtype). Benchmarks time this form so no page faults of a fresh output
//     are counted.
//   foldnorm::layer_norm(Tensor input, int[] normalized_shape, Tensor? weight, Tensor? bias,
//                        float eps) -> Tensor,  and foldnorm::layer_norm.out
//     Our own fused LayerNorm, written with the same care as rms_norm, so that a benchmark can
//     separate what dropping the mean saves from what kernel quality saves.
//
// Kernels: CPU (float32/float64/bfloat16/float16; AVX2 or portable, picked at run time) and CUDA
// (when built with FOLDNORM_CUDA). Weight and bias have the input's dtype, or float32 for a
// bfloat16/float16 input. docs/kernels.md describes the kernels.
//
// Python: torch.ops.load_library("<build>/lib/libfoldnorm_ops.so"); torch.ops.foldnorm.rms_norm(...)
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/Optional.h>

#include <optional>

namespace foldnorm::ops {

inline constexpr const char* kRmsNormOp = "foldnorm::rms_norm";
inline constexpr const char* kLayerNormOp = "foldnorm::layer_norm";

/// Calls the registered operator through the dispatcher (CPU or CUDA by the input's device).
at::Tensor rmsNorm(const at::Tensor& input, at::IntArrayRef normalizedShape,
                   const std::optional<at::Tensor>& weight, const std::optional<at::Tensor>& bias,
                   double eps);

/// foldnorm::rms_norm.out: writes into `out` and returns it.
at::Tensor& rmsNormOut(at::Tensor& out, const at::Tensor& input, at::IntArrayRef normalizedShape,
                       const std::optional<at::Tensor>& weight,
                       const std::optional<at::Tensor>& bias, double eps);

/// foldnorm::layer_norm: y = (x - mean) / sqrt(var + eps) * weight + bias (biased variance),
/// the function of aten::layer_norm.
at::Tensor layerNorm(const at::Tensor& input, at::IntArrayRef normalizedShape,
                     const std::optional<at::Tensor>& weight,
                     const std::optional<at::Tensor>& bias, double eps);

/// foldnorm::layer_norm.out: writes into `out` and returns it.
at::Tensor& layerNormOut(at::Tensor& out, const at::Tensor& input,
                         at::IntArrayRef normalizedShape, const std::optional<at::Tensor>& weight,
                         const std::optional<at::Tensor>& bias, double eps);

/// The instruction set of the CPU kernels. AVX2 (with FMA) is used when the CPU has it and
/// ATen's own dispatch is not limited to DEFAULT (ATEN_CPU_CAPABILITY=default).
enum class CpuKernelIsa { kPortable, kAvx2 };

/// The instruction set the CPU kernels use now.
CpuKernelIsa cpuKernelIsa();

/// Forces the CPU kernels onto one instruction set (tests cover both paths; kAvx2 on a CPU without
/// AVX2 throws), or back to the automatic choice with std::nullopt.
void setCpuKernelIsa(std::optional<CpuKernelIsa> isa);

const char* toString(CpuKernelIsa isa);

}  // namespace foldnorm::ops
