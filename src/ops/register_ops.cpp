// The schemas of the foldnorm operator library, and the Meta kernels (shape-only: torch.compile's
// fake tensors and shape propagation can run graphs that contain our ops).
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include "norm_common.h"

namespace foldnorm::ops {
namespace {

template <NormKind kKind>
at::Tensor normMeta(const at::Tensor& input, at::IntArrayRef normalizedShape,
                    const std::optional<at::Tensor>& weight, const std::optional<at::Tensor>& bias,
                    double eps) {
  checkNormInputs(kKind, input, normalizedShape, weight, bias);
  return at::empty(input.sizes(), input.options().memory_format(at::MemoryFormat::Contiguous));
}

template <NormKind kKind>
at::Tensor& normMetaOut(const at::Tensor& input, at::IntArrayRef normalizedShape,
                        const std::optional<at::Tensor>& weight,
                        const std::optional<at::Tensor>& bias, double eps, at::Tensor& out) {
  checkNormInputs(kKind, input, normalizedShape, weight, bias);
  prepareNormOut(kKind, input, out);
  return out;
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
}

TORCH_LIBRARY_IMPL(foldnorm, Meta, m) {
  m.impl("rms_norm", &normMeta<NormKind::kRms>);
  m.impl("rms_norm.out", &normMetaOut<NormKind::kRms>);
  m.impl("layer_norm", &normMeta<NormKind::kLayer>);
  m.impl("layer_norm.out", &normMetaOut<NormKind::kLayer>);
}

}  // namespace foldnorm::ops
