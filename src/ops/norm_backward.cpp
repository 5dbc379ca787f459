// rms_norm_backward / layer_norm_backward: the shared buffers (norm_backward.h) and the CPU
// kernel (registered by norm_cpu.cpp's op table). The row kernels are in norm_cpu_backward_rows.h.
#include "norm_backward.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <c10/util/Exception.h>

#include "norm_cpu_kernels.h"
#include "norm_op_table.h"

namespace foldnorm::ops {
namespace {

// dw/db are summed over rows in this many fixed blocks at most: enough to keep every core busy,
// few enough that the partial rows stay small; fixed so the bits do not depend on threads.
constexpr int64_t kBackwardBlocks = 64;

c10::ScalarType accumulateType(c10::ScalarType t) {
  return t == c10::ScalarType::Double ? c10::ScalarType::Double : c10::ScalarType::Float;
}

}  // namespace

NormBackwardBuffers prepareNormBackward(NormKind kind, const at::Tensor& gradOut,
                                        const at::Tensor& input, at::IntArrayRef normalizedShape,
                                        const std::optional<at::Tensor>& weight,
                                        const std::optional<at::Tensor>& bias,
                                        std::array<bool, 3> outputMask) {
  NormBackwardBuffers buf;
  buf.shape = checkNormBackwardInputs(kind, gradOut, input, normalizedShape, weight, bias);
  buf.x = input.contiguous();
  buf.gradOut = gradOut.contiguous();
  buf.weight = contiguousOrUndefined(weight);
  const at::Tensor b = contiguousOrUndefined(bias);
  buf.paramType = paramTypeOf(opName(kind), buf.x, buf.weight, b);
  if (outputMask[0]) {
    buf.gradInput = at::empty(input.sizes(), buf.x.options());
  }
  const int64_t rows = buf.shape.rows;
  buf.rowsPerBlock = std::max<int64_t>(1, (rows + kBackwardBlocks - 1) / kBackwardBlocks);
  const int64_t blocks = rows == 0 ? 0 : (rows + buf.rowsPerBlock - 1) / buf.rowsPerBlock;
  const auto partialOptions = buf.x.options().dtype(accumulateType(buf.x.scalar_type()));
  if (outputMask[1] && buf.weight.defined()) {
    buf.gradWeightPartial = at::zeros({blocks, buf.shape.cols}, partialOptions);
  }
  if (outputMask[2] && b.defined()) {
    buf.gradBiasPartial = at::zeros({blocks, buf.shape.cols}, partialOptions);
  }
  return buf;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> finishNormBackward(
    const NormBackwardBuffers& buf, at::IntArrayRef normalizedShape) {
  auto reduce = [&](const at::Tensor& partial) -> at::Tensor {
    if (!partial.defined()) return {};
    return partial.sum(0).to(buf.paramType).view(normalizedShape);
  };
  return {buf.gradInput, reduce(buf.gradWeightPartial), reduce(buf.gradBiasPartial)};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> normBackwardCpu(
    NormKind kind, const at::Tensor& gradOut, const at::Tensor& input,
    at::IntArrayRef normalizedShape, const std::optional<at::Tensor>& weight,
    const std::optional<at::Tensor>& bias, double eps, std::array<bool, 3> outputMask) {
  NormBackwardBuffers buf =
      prepareNormBackward(kind, gradOut, input, normalizedShape, weight, bias, outputMask);
  TORCH_CHECK(input.device().is_cpu(), opName(kind), "_backward: the CPU kernel got a tensor on ",
              input.device());
  if (buf.shape.rows > 0 && buf.shape.cols > 0) {
    NormBackwardCpuCall call;
    call.kind = kind;
    call.dataType = buf.x.scalar_type();
    call.paramType = buf.paramType;
    describeBackwardRows(call, buf, eps);
    runNormBackwardCpu(call);
  }
  return finishNormBackward(buf, normalizedShape);
}

}  // namespace foldnorm::ops
