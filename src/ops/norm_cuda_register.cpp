// CUDA implementation of foldnorm::rms_norm / foldnorm::layer_norm (+ .out): tensors to a
// NormCudaCall on the current stream of the input's device. Compiled only with FOLDNORM_CUDA.
#ifdef FOLDNORM_WITH_CUDA

#include <ATen/core/Tensor.h>
#include <ATen/cuda/CUDAContext.h>
#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include "norm_common.h"
#include "norm_cuda.h"

namespace foldnorm::ops {
namespace {

cuda::NormDtype toNormDtype(c10::ScalarType t) {
  switch (t) {
    case c10::ScalarType::Float: return cuda::NormDtype::kFloat32;
    case c10::ScalarType::Double: return cuda::NormDtype::kFloat64;
    case c10::ScalarType::BFloat16: return cuda::NormDtype::kBFloat16;
    case c10::ScalarType::Half: return cuda::NormDtype::kFloat16;
    default: TORCH_CHECK(false, "foldnorm ops: no CUDA kernel for dtype ", t);
  }
}

at::Tensor& normCudaOut(NormKind kind, const at::Tensor& input, at::IntArrayRef normalizedShape,
                        const std::optional<at::Tensor>& weight,
                        const std::optional<at::Tensor>& bias, double eps, at::Tensor& out) {
  const NormShape shape = checkNormInputs(kind, input, normalizedShape, weight, bias);
  prepareNormOut(kind, input, out);
  TORCH_CHECK(input.is_cuda(), opName(kind), ": the CUDA kernel got a tensor on ", input.device());
  if (shape.rows == 0 || shape.cols == 0) return out;
  const c10::cuda::CUDAGuard guard(input.device());
  const at::Tensor x = input.contiguous();
  const at::Tensor w = contiguousOrUndefined(weight);
  const at::Tensor b = contiguousOrUndefined(bias);
  TORCH_CHECK(!w.defined() || !b.defined() || w.scalar_type() == b.scalar_type(), opName(kind),
              ": weight has dtype ", w.scalar_type(), " but bias has dtype ", b.scalar_type(),
              "; give both the same dtype");

  cuda::NormCudaCall call;
  call.layerNorm = kind == NormKind::kLayer;
  call.dataType = toNormDtype(x.scalar_type());
  call.paramType = toNormDtype(w.defined() ? w.scalar_type()
                                           : (b.defined() ? b.scalar_type() : x.scalar_type()));
  call.x = x.const_data_ptr();
  call.weight = w.defined() ? w.const_data_ptr() : nullptr;
  call.bias = b.defined() ? b.const_data_ptr() : nullptr;
  call.y = out.mutable_data_ptr();
  call.rows = shape.rows;
  call.cols = shape.cols;
  call.eps = eps;
  C10_CUDA_CHECK(cuda::launchNorm(call, at::cuda::getCurrentCUDAStream(input.get_device())));
  return out;
}

template <NormKind kKind>
at::Tensor normCuda(const at::Tensor& input, at::IntArrayRef normalizedShape,
                    const std::optional<at::Tensor>& weight, const std::optional<at::Tensor>& bias,
                    double eps) {
  checkNormInputs(kKind, input, normalizedShape, weight, bias);
  at::Tensor out =
      at::empty(input.sizes(), input.options().memory_format(at::MemoryFormat::Contiguous));
  return normCudaOut(kKind, input, normalizedShape, weight, bias, eps, out);
}

template <NormKind kKind>
at::Tensor& normCudaOutOp(const at::Tensor& input, at::IntArrayRef normalizedShape,
                          const std::optional<at::Tensor>& weight,
                          const std::optional<at::Tensor>& bias, double eps, at::Tensor& out) {
  return normCudaOut(kKind, input, normalizedShape, weight, bias, eps, out);
}

}  // namespace

TORCH_LIBRARY_IMPL(foldnorm, CUDA, m) {
  m.impl("rms_norm", &normCuda<NormKind::kRms>);
  m.impl("rms_norm.out", &normCudaOutOp<NormKind::kRms>);
  m.impl("layer_norm", &normCuda<NormKind::kLayer>);
  m.impl("layer_norm.out", &normCudaOutOp<NormKind::kLayer>);
}

}  // namespace foldnorm::ops

#endif  // FOLDNORM_WITH_CUDA
