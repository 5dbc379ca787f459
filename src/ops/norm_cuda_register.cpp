// CUDA implementation of the foldnorm ops (the CUDA column of norm_op_table.h): tensors to a
// NormCudaCall on the current stream of the input's device. Compiled only with FOLDNORM_CUDA.
#ifdef FOLDNORM_WITH_CUDA

#include <ATen/core/Tensor.h>
#include <ATen/cuda/CUDAContext.h>
#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <array>
#include <tuple>

#include "norm_backward.h"
#include "norm_common.h"
#include "norm_cuda.h"
#include "norm_op_table.h"

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

// The CUDA column of the op table (norm_op_table.h).
struct CudaKernels {
  static constexpr const char* kName = "CUDA";
  static bool holds(const at::Tensor& input) { return input.is_cuda(); }

  static void normRows(NormKind kind, const NormShape& shape, const at::Tensor& input,
                       const std::optional<at::Tensor>& weight,
                       const std::optional<at::Tensor>& bias, double eps, at::Tensor& out) {
    const c10::cuda::CUDAGuard guard(input.device());
    const at::Tensor x = input.contiguous();
    const at::Tensor w = contiguousOrUndefined(weight);
    const at::Tensor b = contiguousOrUndefined(bias);

    cuda::NormCudaCall call;
    call.layerNorm = kind == NormKind::kLayer;
    call.dataType = toNormDtype(x.scalar_type());
    call.paramType = toNormDtype(paramTypeOf(opName(kind), x, w, b));
    describeRows(call, shape, x, w, b, out, eps);
    C10_CUDA_CHECK(cuda::launchNorm(call, at::cuda::getCurrentCUDAStream(input.get_device())));
  }

  static void addRmsNormRows(const NormShape& shape, const at::Tensor& input,
                             const at::Tensor& residual, const std::optional<at::Tensor>& weight,
                             const std::optional<at::Tensor>& bias, double eps, at::Tensor& out,
                             at::Tensor& sum) {
    const c10::cuda::CUDAGuard guard(input.device());
    const at::Tensor x = input.contiguous();
    const at::Tensor r = residual.contiguous();
    const at::Tensor w = contiguousOrUndefined(weight);
    const at::Tensor b = contiguousOrUndefined(bias);
    cuda::NormCudaCall call;
    call.dataType = toNormDtype(x.scalar_type());
    call.paramType = toNormDtype(paramTypeOf(kAddRmsNormName, x, w, b));
    describeRows(call, shape, x, w, b, out, eps);
    call.residual = r.const_data_ptr();
    call.sum = sum.mutable_data_ptr();
    C10_CUDA_CHECK(cuda::launchNorm(call, at::cuda::getCurrentCUDAStream(input.get_device())));
  }

  static std::tuple<at::Tensor, at::Tensor, at::Tensor> normBackward(
      NormKind kind, const at::Tensor& gradOut, const at::Tensor& input,
      at::IntArrayRef normalizedShape, const std::optional<at::Tensor>& weight,
      const std::optional<at::Tensor>& bias, double eps, std::array<bool, 3> outputMask) {
    TORCH_CHECK(input.is_cuda(), opName(kind), "_backward: the CUDA kernel got a tensor on ",
                input.device());
    const c10::cuda::CUDAGuard guard(input.device());
    NormBackwardBuffers buf =
        prepareNormBackward(kind, gradOut, input, normalizedShape, weight, bias, outputMask);
    if (buf.shape.rows > 0 && buf.shape.cols > 0) {
      const auto accType = input.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
      const at::Tensor stats = at::empty({2 * buf.shape.rows}, input.options().dtype(accType));
      cuda::NormBackwardCudaCall call;
      call.layerNorm = kind == NormKind::kLayer;
      call.dataType = toNormDtype(buf.x.scalar_type());
      call.paramType = toNormDtype(buf.paramType);
      describeBackwardRows(call, buf, eps);
      call.stats = stats.mutable_data_ptr();
      C10_CUDA_CHECK(
          cuda::launchNormBackward(call, at::cuda::getCurrentCUDAStream(input.get_device())));
    }
    return finishNormBackward(buf, normalizedShape);
  }
};

}  // namespace

TORCH_LIBRARY_IMPL(foldnorm, CUDA, m) { NormOpTable<CudaKernels>::registerKernels(m); }

}  // namespace foldnorm::ops

#endif  // FOLDNORM_WITH_CUDA
