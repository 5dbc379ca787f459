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

/// The tensor if present and defined, made contiguous; an undefined tensor otherwise.
at::Tensor contiguousOrUndefined(const std::optional<at::Tensor>& t);

}  // namespace foldnorm::ops
