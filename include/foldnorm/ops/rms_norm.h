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
//   foldnorm::add_rms_norm(Tensor input, Tensor residual, int[] normalized_shape, Tensor? weight,
//                          Tensor? bias, float eps) -> (Tensor normed, Tensor sum)
//     sum = input + residual (aten::add's result, rounded to the dtype before the statistics) and
//     normed = rms_norm(sum), bitwise equal to aten::add followed by foldnorm::rms_norm, in one
//     pass that reads input and residual once and writes both outputs once (the pre-LN
//     residual-add + norm pair). No broadcasting. And add_rms_norm.out(..., *, out, sum).
//   foldnorm::rms_norm_backward / foldnorm::layer_norm_backward(Tensor grad_out, Tensor input,
//       int[] normalized_shape, Tensor? weight, Tensor? bias, float eps, bool[3] output_mask)
//       -> (Tensor grad_input, Tensor grad_weight, Tensor grad_bias)
//     Gradients; the ops' Autograd kernels call them, so backward through a folded model works.
//
// Kernels: CPU (float32/float64/bfloat16/float16; AVX2 or portable, picked at run time) and CUDA
// (when built with FOLDNORM_CUDA). Weight and bias have the input's dtype, or float32 for a
// bfloat16/float16 input. docs/kernels.md describes the kernels.
//
// Python: torch.ops.load_library("<build>/lib/libfoldnorm_ops.so"); torch.ops.foldnorm.rms_norm(...)
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/Optional.h>

#include <array>
#include <optional>
#include <tuple>

namespace foldnorm::ops {

inline constexpr const char* kRmsNormOp = "foldnorm::rms_norm";
inline constexpr const char* kLayerNormOp = "foldnorm::layer_norm";
inline constexpr const char* kAddRmsNormOp = "foldnorm::add_rms_norm";

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

/// foldnorm::add_rms_norm: (rms_norm(input + residual), input + residual).
std::tuple<at::Tensor, at::Tensor> addRmsNorm(const at::Tensor& input, const at::Tensor& residual,
                                              at::IntArrayRef normalizedShape,
                                              const std::optional<at::Tensor>& weight,
                                              const std::optional<at::Tensor>& bias, double eps);

/// foldnorm::add_rms_norm.out: writes into `out` and `sum` (either may be input or residual
/// itself, for an in-place residual stream) and returns them.
std::tuple<at::Tensor&, at::Tensor&> addRmsNormOut(at::Tensor& out, at::Tensor& sum,
                                                   const at::Tensor& input,
                                                   const at::Tensor& residual,
                                                   at::IntArrayRef normalizedShape,
                                                   const std::optional<at::Tensor>& weight,
                                                   const std::optional<at::Tensor>& bias,
                                                   double eps);

/// foldnorm::rms_norm_backward (layer = false) / layer_norm_backward: (dx, dw, db) for the
/// gradient gradOut of the output; the entries output_mask leaves out (or whose parameter is
/// absent) are undefined.
std::tuple<at::Tensor, at::Tensor, at::Tensor> normBackward(
    bool layer, const at::Tensor& gradOut, const at::Tensor& input,
    at::IntArrayRef normalizedShape, const std::optional<at::Tensor>& weight,
    const std::optional<at::Tensor>& bias, double eps, std::array<bool, 3> outputMask);

/// The instruction set of the CPU kernels. AVX2 (with FMA) is used when the CPU has it and
/// ATen's own dispatch is not limited to DEFAULT (ATEN_CPU_CAPABILITY=default); kAvx512 when the
/// CPU has AVX-512 F/BW/VL/DQ and ATen itself dispatches to AVX512. kAvx512 runs the 16-bit RMS
/// rows with AVX-512 (the same bits as kAvx2) and everything else with the AVX2 kernels.
enum class CpuKernelIsa { kPortable, kAvx2, kAvx512 };

/// The instruction set the CPU kernels use now.
CpuKernelIsa cpuKernelIsa();

/// Forces the CPU kernels onto one instruction set (tests cover every path; one this CPU lacks
/// throws), or back to the automatic choice with std::nullopt.
void setCpuKernelIsa(std::optional<CpuKernelIsa> isa);

const char* toString(CpuKernelIsa isa);

}  // namespace foldnorm::ops
