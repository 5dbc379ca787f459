// Shared between the CPU and CUDA implementations of foldnorm::rms_norm / foldnorm::layer_norm:
// argument checks with aten::layer_norm's wording, and the plain-pointer description of one call
// that the kernels receive (kernels see no Tensor, so the .cu file needs no LibTorch headers).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <optional>

namespace foldnorm::ops {

enum class NormKind { kRms, kLayer };

const char* opName(NormKind kind);

/// Rows are all leading dims flattened, cols the product of normalized_shape.
struct NormShape {
  int64_t rows = 0;
  int64_t cols = 0;
};

/// Throws c10::Error naming the argument and what was expected when the shapes, dtypes or devices
/// do not fit; returns the row/column split otherwise.
NormShape checkNormInputs(NormKind kind, const at::Tensor& input, at::IntArrayRef normalizedShape,
                          const std::optional<at::Tensor>& weight,
                          const std::optional<at::Tensor>& bias);

/// Checks `out` for the out= variants (dtype, device, contiguity) and resizes it to the input's
/// shape when it has another shape.
void prepareNormOut(NormKind kind, const at::Tensor& input, at::Tensor& out);

inline constexpr const char* kAddRmsNormName = "foldnorm::add_rms_norm";

/// foldnorm::add_rms_norm's checks: rms_norm's on the input, and a residual of the input's exact
/// shape (no broadcasting: the fused pass reads both row by row), dtype and device.
NormShape checkAddNormInputs(const at::Tensor& input, const at::Tensor& residual,
                             at::IntArrayRef normalizedShape,
                             const std::optional<at::Tensor>& weight,
                             const std::optional<at::Tensor>& bias);

/// add_rms_norm.out: checks and resizes `out` and `sum` as prepareNormOut does; each may be
/// input or residual itself, but `out` and `sum` must not share memory.
void prepareAddNormOut(const at::Tensor& input, const at::Tensor& residual, at::Tensor& out,
                       at::Tensor& sum);

/// rms_norm_backward / layer_norm_backward: the forward's checks, and a grad_out of the input's
/// shape, dtype and device.
NormShape checkNormBackwardInputs(NormKind kind, const at::Tensor& gradOut,
                                  const at::Tensor& input, at::IntArrayRef normalizedShape,
                                  const std::optional<at::Tensor>& weight,
                                  const std::optional<at::Tensor>& bias);

/// The dtype weight and bias share (the input's when both are absent); throws when they differ.
c10::ScalarType paramTypeOf(const char* op, const at::Tensor& input, const at::Tensor& weight,
                            const at::Tensor& bias);

/// A fresh contiguous tensor of the input's shape and options: every op's output.
at::Tensor emptyNormOutput(const at::Tensor& input);

/// The tensor if present and defined, made contiguous; an undefined tensor otherwise.
at::Tensor contiguousOrUndefined(const std::optional<at::Tensor>& t);

}  // namespace foldnorm::ops
