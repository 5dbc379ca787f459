// The library's eight kernels for one dispatch key, written once for every device (CPU in
// norm_cpu.cpp, CUDA in norm_cuda_register.cpp, Meta in register_ops.cpp). A device supplies
//
//   static constexpr const char* kName;              // "CPU": said when a tensor is elsewhere
//   static bool holds(const at::Tensor& input);      // the input is on this device
//   static void normRows(NormKind, const NormShape&, input, weight, bias, eps, at::Tensor& out);
//   static void addRmsNormRows(const NormShape&, input, residual, weight, bias, eps, out, sum);
//   static std::tuple<at::Tensor, at::Tensor, at::Tensor> normBackward(NormKind, grad_out, input,
//                                     normalized_shape, weight, bias, eps, output_mask);
//
// (the *Rows functions see checked arguments, outputs of the right shape and at least one
// element), and NormOpTable<Device> writes the rest: the out= forms (check the arguments and
// the outputs, refuse a tensor on another device), the functional forms over them (allocate,
// then call the out= form), and the registration of all eight, so that an op or a device is
// added in one place. Also here: the pointers and sizes every kernel call carries
// (NormCpuCall, cuda::NormCudaCall and their backward twins), filled once from tensors.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <array>
#include <optional>
#include <tuple>

#include "norm_backward.h"
#include "norm_common.h"

namespace foldnorm::ops {

template <class Device>
struct NormOpTable {
  template <NormKind kKind>
  static at::Tensor norm(const at::Tensor& input, at::IntArrayRef normalizedShape,
                         const std::optional<at::Tensor>& weight,
                         const std::optional<at::Tensor>& bias, double eps) {
    // Check before allocating, so that a bad call reports its arguments, not an allocation.
    const NormShape shape = checkNormInputs(kKind, input, normalizedShape, weight, bias);
    at::Tensor out = emptyNormOutput(input);
    // A fresh output needs none of the out= form's preparation (resize, overlap checks), and the
    // Meta kernels run on symbolic shapes (torch.export, torch.compile), where the overlap check
    // cannot count elements.
    return normRun<kKind>(shape, input, weight, bias, eps, out);
  }

  template <NormKind kKind>
  static at::Tensor& normRun(const NormShape& shape, const at::Tensor& input,
                             const std::optional<at::Tensor>& weight,
                             const std::optional<at::Tensor>& bias, double eps, at::Tensor& out) {
    TORCH_CHECK(Device::holds(input), opName(kKind), ": the ", Device::kName,
                " kernel got a tensor on ", input.device());
    if (shape.rows == 0 || shape.cols == 0) return out;
    Device::normRows(kKind, shape, input, weight, bias, eps, out);
    return out;
  }

  template <NormKind kKind>
  static at::Tensor& normOut(const at::Tensor& input, at::IntArrayRef normalizedShape,
                             const std::optional<at::Tensor>& weight,
                             const std::optional<at::Tensor>& bias, double eps, at::Tensor& out) {
    const NormShape shape = checkNormInputs(kKind, input, normalizedShape, weight, bias);
    prepareNormOut(kKind, input, out);
    return normRun<kKind>(shape, input, weight, bias, eps, out);
  }

  static std::tuple<at::Tensor, at::Tensor> addRmsNorm(const at::Tensor& input,
                                                       const at::Tensor& residual,
                                                       at::IntArrayRef normalizedShape,
                                                       const std::optional<at::Tensor>& weight,
                                                       const std::optional<at::Tensor>& bias,
                                                       double eps) {
    const NormShape shape = checkAddNormInputs(input, residual, normalizedShape, weight, bias);
    at::Tensor out = emptyNormOutput(input);
    at::Tensor sum = emptyNormOutput(input);
    addRmsNormRun(shape, input, residual, weight, bias, eps, out, sum);  // fresh outputs: as norm()
    return {out, sum};
  }

  static void addRmsNormRun(const NormShape& shape, const at::Tensor& input, const at::Tensor& residual,
                            const std::optional<at::Tensor>& weight, const std::optional<at::Tensor>& bias,
                            double eps, at::Tensor& out, at::Tensor& sum) {
    TORCH_CHECK(Device::holds(input), kAddRmsNormName, ": the ", Device::kName,
                " kernel got a tensor on ", input.device());
    if (shape.rows == 0 || shape.cols == 0) return;
    Device::addRmsNormRows(shape, input, residual, weight, bias, eps, out, sum);
  }

  static std::tuple<at::Tensor&, at::Tensor&> addRmsNormOut(
      const at::Tensor& input, const at::Tensor& residual, at::IntArrayRef normalizedShape,
      const std::optional<at::Tensor>& weight, const std::optional<at::Tensor>& bias, double eps,
      at::Tensor& out, at::Tensor& sum) {
    const NormShape shape = checkAddNormInputs(input, residual, normalizedShape, weight, bias);
    prepareAddNormOut(input, residual, out, sum);
    addRmsNormRun(shape, input, residual, weight, bias, eps, out, sum);
    return {out, sum};
  }

  template <NormKind kKind>
  static std::tuple<at::Tensor, at::Tensor, at::Tensor> normBackward(
      const at::Tensor& gradOut, const at::Tensor& input, at::IntArrayRef normalizedShape,
      const std::optional<at::Tensor>& weight, const std::optional<at::Tensor>& bias, double eps,
      std::array<bool, 3> outputMask) {
    return Device::normBackward(kKind, gradOut, input, normalizedShape, weight, bias, eps,
                                outputMask);
  }

  /// Inside TORCH_LIBRARY_IMPL(foldnorm, <key>, m): every op of TORCH_LIBRARY(foldnorm, m)
  /// (register_ops.cpp) gets this device's kernel.
  static void registerKernels(torch::Library& m) {
    m.impl("rms_norm", &NormOpTable::norm<NormKind::kRms>);
    m.impl("rms_norm.out", &NormOpTable::normOut<NormKind::kRms>);
    m.impl("layer_norm", &NormOpTable::norm<NormKind::kLayer>);
    m.impl("layer_norm.out", &NormOpTable::normOut<NormKind::kLayer>);
    m.impl("add_rms_norm", &NormOpTable::addRmsNorm);
    m.impl("add_rms_norm.out", &NormOpTable::addRmsNormOut);
    m.impl("rms_norm_backward", &NormOpTable::normBackward<NormKind::kRms>);
    m.impl("layer_norm_backward", &NormOpTable::normBackward<NormKind::kLayer>);
  }
};

/// The operands of a forward call as a kernel reads them: contiguous rows, y written. `Call` is
/// NormCpuCall or cuda::NormCudaCall; the dtypes are the device's own business.
template <class Call>
void describeRows(Call& call, const NormShape& shape, const at::Tensor& x, const at::Tensor& w,
                  const at::Tensor& b, at::Tensor& y, double eps) {
  call.x = x.const_data_ptr();
  call.weight = w.defined() ? w.const_data_ptr() : nullptr;
  call.bias = b.defined() ? b.const_data_ptr() : nullptr;
  call.y = y.mutable_data_ptr();
  call.rows = shape.rows;
  call.cols = shape.cols;
  call.eps = eps;
}

/// The same for a backward call (NormBackwardCpuCall or cuda::NormBackwardCudaCall).
template <class Call>
void describeBackwardRows(Call& call, const NormBackwardBuffers& buf, double eps) {
  call.gradOut = buf.gradOut.const_data_ptr();
  call.x = buf.x.const_data_ptr();
  call.weight = buf.weight.defined() ? buf.weight.const_data_ptr() : nullptr;
  call.gradInput = buf.gradInput.defined() ? buf.gradInput.mutable_data_ptr() : nullptr;
  call.gradWeightPartial =
      buf.gradWeightPartial.defined() ? buf.gradWeightPartial.mutable_data_ptr() : nullptr;
  call.gradBiasPartial =
      buf.gradBiasPartial.defined() ? buf.gradBiasPartial.mutable_data_ptr() : nullptr;
  call.rows = buf.shape.rows;
  call.cols = buf.shape.cols;
  call.rowsPerBlock = buf.rowsPerBlock;
  call.eps = eps;
}

}  // namespace foldnorm::ops
