// The device-independent half of rms_norm_backward / layer_norm_backward: argument checks,
// contiguous operands, the gradient tensors and the per-block partial sums of dw/db, and the
// final block-order sum. The CPU (norm_backward.cpp) and CUDA (norm_cuda_register.cpp) kernels
// fill the buffers in between.
#pragma once

#include <ATen/core/Tensor.h>

#include <array>
#include <optional>
#include <tuple>

#include "norm_common.h"

namespace foldnorm::ops {

struct NormBackwardBuffers {
  NormShape shape;
  c10::ScalarType paramType = c10::ScalarType::Float;
  at::Tensor gradOut, x, weight;  // contiguous; weight undefined when absent
  at::Tensor gradInput;           // undefined when not asked for
  at::Tensor gradWeightPartial;   // [blocks, cols] of the accumulation type, zeroed; or undefined
  at::Tensor gradBiasPartial;     // likewise
  int64_t rowsPerBlock = 1;
};

/// Checks the arguments and allocates what output_mask asks for. dw needs a weight, db a bias.
NormBackwardBuffers prepareNormBackward(NormKind kind, const at::Tensor& gradOut,
                                        const at::Tensor& input, at::IntArrayRef normalizedShape,
                                        const std::optional<at::Tensor>& weight,
                                        const std::optional<at::Tensor>& bias,
                                        std::array<bool, 3> outputMask);

/// (dx, dw, db): the partial rows summed in block order and cast to the parameters' dtype.
std::tuple<at::Tensor, at::Tensor, at::Tensor> finishNormBackward(
    const NormBackwardBuffers& buffers, at::IntArrayRef normalizedShape);

/// The CPU kernel of both backward ops (norm_backward.cpp; registered by norm_cpu.cpp).
std::tuple<at::Tensor, at::Tensor, at::Tensor> normBackwardCpu(
    NormKind kind, const at::Tensor& gradOut, const at::Tensor& input,
    at::IntArrayRef normalizedShape, const std::optional<at::Tensor>& weight,
    const std::optional<at::Tensor>& bias, double eps, std::array<bool, 3> outputMask);

}  // namespace foldnorm::ops
