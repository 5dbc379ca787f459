// CUDA implementation of foldnorm::rms_norm / foldnorm::layer_norm (+ .out): tensors to a
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

  cuda::NormCudaCall call;
  call.layerNorm = kind == NormKind::kLayer;
  call.dataType = toNormDtype(x.scalar_type());
  call.paramType = toNormDtype(paramTypeOf(opName(kind), x, w, b));
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
  at::Tensor out = emptyNormOutput(input);
  return normCudaOut(kKind, input, normalizedShape, weight, bias, eps, out);
}

template <NormKind kKind>
at::Tensor& normCudaOutOp(const at::Tensor& input, at::IntArrayRef normalizedShape,
                          const std::optional<at::Tensor>& weight,
                          const std::optional<at::Tensor>& bias, double eps, at::Tensor& out) {
  return normCudaOut(kKind, input, normalizedShape, weight, bias, eps, out);
}

std::tuple<at::Tensor&, at::Tensor&> addRmsNormCudaOut(const at::Tensor& input,
                                                       const at::Tensor& residual,
                                                       at::IntArrayRef normalizedShape,
                                                       const std::optional<at::Tensor>& weight,
                                                       const std::optional<at::Tensor>& bias,
                                                       double eps, at::Tensor& out,
                                                       at::Tensor& sum) {
  const NormShape shape = checkAddNormInputs(input, residual, normalizedShape, weight, bias);
  prepareAddNormOut(input, residual, out, sum);
  TORCH_CHECK(input.is_cuda(), kAddRmsNormName, ": the CUDA kernel got a tensor on ",
              input.device());
  if (shape.rows == 0 || shape.cols == 0) return {out, sum};
  const c10::cuda::CUDAGuard guard(input.device());
  const at::Tensor x = input.contiguous();
  const at::Tensor r = residual.contiguous();
  const at::Tensor w = contiguousOrUndefined(weight);
  const at::Tensor b = contiguousOrUndefined(bias);
  cuda::NormCudaCall call;
  call.dataType = toNormDtype(x.scalar_type());
  call.paramType = toNormDtype(paramTypeOf(kAddRmsNormName, x, w, b));
  call.x = x.const_data_ptr();
  call.residual = r.const_data_ptr();
  call.weight = w.defined() ? w.const_data_ptr() : nullptr;
  call.bias = b.defined() ? b.const_data_ptr() : nullptr;
  call.y = out.mutable_data_ptr();
  call.sum = sum.mutable_data_ptr();
  call.rows = shape.rows;
  call.cols = shape.cols;
  call.eps = eps;
  C10_CUDA_CHECK(cuda::launchNorm(call, at::cuda::getCurrentCUDAStream(input.get_device())));
  return {out, sum};
}

std::tuple<at::Tensor, at::Tensor> addRmsNormCuda(const at::Tensor& input,
                                                  const at::Tensor& residual,
                                                  at::IntArrayRef normalizedShape,
                                                  const std::optional<at::Tensor>& weight,
                                                  const std::optional<at::Tensor>& bias,
                                                  double eps) {
  checkAddNormInputs(input, residual, normalizedShape, weight, bias);
  at::Tensor out = emptyNormOutput(input);
  at::Tensor sum = emptyNormOutput(input);
  addRmsNormCudaOut(input, residual, normalizedShape, weight, bias, eps, out, sum);
  return {out, sum};
}

template <NormKind kKind>
std::tuple<at::Tensor, at::Tensor, at::Tensor> normBackwardCuda(
    const at::Tensor& gradOut, const at::Tensor& input, at::IntArrayRef normalizedShape,
    const std::optional<at::Tensor>& weight, const std::optional<at::Tensor>& bias, double eps,
    std::array<bool, 3> outputMask) {
  TORCH_CHECK(input.is_cuda(), opName(kKind), "_backward: the CUDA kernel got a tensor on ",
              input.device());
  const c10::cuda::CUDAGuard guard(input.device());
  NormBackwardBuffers buf =
      prepareNormBackward(kKind, gradOut, input, normalizedShape, weight, bias, outputMask);
  if (buf.shape.rows > 0 && buf.shape.cols > 0) {
    const auto accType = input.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
    const at::Tensor stats = at::empty({2 * buf.shape.rows}, input.options().dtype(accType));
    cuda::NormBackwardCudaCall call;
    call.layerNorm = kKind == NormKind::kLayer;
    call.dataType = toNormDtype(buf.x.scalar_type());
    call.paramType = toNormDtype(buf.paramType);
    call.gradOut = buf.gradOut.const_data_ptr();
    call.x = buf.x.const_data_ptr();
    call.weight = buf.weight.defined() ? buf.weight.const_data_ptr() : nullptr;
    call.gradInput = buf.gradInput.defined() ? buf.gradInput.mutable_data_ptr() : nullptr;
    call.gradWeightPartial =
        buf.gradWeightPartial.defined() ? buf.gradWeightPartial.mutable_data_ptr() : nullptr;
    call.gradBiasPartial =
        buf.gradBiasPartial.defined() ? buf.gradBiasPartial.mutable_data_ptr() : nullptr;
    call.stats = stats.mutable_data_ptr();
    call.rows = buf.shape.rows;
    call.cols = buf.shape.cols;
    call.rowsPerBlock = buf.rowsPerBlock;
    call.eps = eps;
    C10_CUDA_CHECK(
        cuda::launchNormBackward(call, at::cuda::getCurrentCUDAStream(input.get_device())));
  }
  return finishNormBackward(buf, normalizedShape);
}

}  // namespace

TORCH_LIBRARY_IMPL(foldnorm, CUDA, m) {
  m.impl("rms_norm", &normCuda<NormKind::kRms>);
  m.impl("rms_norm.out", &normCudaOutOp<NormKind::kRms>);
  m.impl("layer_norm", &normCuda<NormKind::kLayer>);
  m.impl("layer_norm.out", &normCudaOutOp<NormKind::kLayer>);
  m.impl("add_rms_norm", &addRmsNormCuda);
  m.impl("add_rms_norm.out", &addRmsNormCudaOut);
  m.impl("rms_norm_backward", &normBackwardCuda<NormKind::kRms>);
  m.impl("layer_norm_backward", &normBackwardCuda<NormKind::kLayer>);
}

}  // namespace foldnorm::ops

#endif  // FOLDNORM_WITH_CUDA
