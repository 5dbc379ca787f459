// The schemas of the foldnorm operator library, and the Meta kernels (shape-only: torch.compile's
// fake tensors and shape propagation can run graphs that contain our ops).
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <array>
#include <tuple>

#include "norm_common.h"
#include "norm_op_table.h"

namespace foldnorm::ops {
namespace {

// The Meta column of the op table (norm_op_table.h): the checks and the outputs' shapes only.
struct MetaKernels {
  static constexpr const char* kName = "Meta";
  static bool holds(const at::Tensor&) { return true; }  // the dispatcher sent it here
  static void normRows(NormKind, const NormShape&, const at::Tensor&,
                       const std::optional<at::Tensor>&, const std::optional<at::Tensor>&, double,
                       at::Tensor&) {}
  static void addRmsNormRows(const NormShape&, const at::Tensor&, const at::Tensor&,
                             const std::optional<at::Tensor>&, const std::optional<at::Tensor>&,
                             double, at::Tensor&, at::Tensor&) {}

  static std::tuple<at::Tensor, at::Tensor, at::Tensor> normBackward(
      NormKind kind, const at::Tensor& gradOut, const at::Tensor& input,
      at::IntArrayRef normalizedShape, const std::optional<at::Tensor>& weight,
      const std::optional<at::Tensor>& bias, double eps, std::array<bool, 3> outputMask) {
    checkNormBackwardInputs(kind, gradOut, input, normalizedShape, weight, bias);
    const at::Tensor w = weight ? *weight : at::Tensor();
    const at::Tensor b = bias ? *bias : at::Tensor();
    const auto paramOptions = input.options().dtype(paramTypeOf(opName(kind), input, w, b));
    return {outputMask[0] ? at::empty(input.sizes(), input.options()) : at::Tensor(),
            outputMask[1] && w.defined() ? at::empty(normalizedShape, paramOptions) : at::Tensor(),
            outputMask[2] && b.defined() ? at::empty(normalizedShape, paramOptions) : at::Tensor()};
  }
};

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
  // (normed, sum): sum = input + residual (aten::add, alpha 1, rounded to the dtype) and
  // normed = rms_norm(sum), in one pass that reads both once and writes both once.
  m.def("add_rms_norm(Tensor input, Tensor residual, int[] normalized_shape, Tensor? weight, "
        "Tensor? bias, float eps) -> (Tensor, Tensor)");
  m.def("add_rms_norm.out(Tensor input, Tensor residual, int[] normalized_shape, Tensor? weight, "
        "Tensor? bias, float eps, *, Tensor(a!) out, Tensor(b!) sum) -> (Tensor(a!), Tensor(b!))");
  // Gradients of input, weight, bias (output_mask picks them; the others come back undefined).
  // Called by the Autograd kernels in norm_autograd.cpp.
  m.def("rms_norm_backward(Tensor grad_out, Tensor input, int[] normalized_shape, Tensor? weight, "
        "Tensor? bias, float eps, bool[3] output_mask) -> (Tensor, Tensor, Tensor)");
  m.def("layer_norm_backward(Tensor grad_out, Tensor input, int[] normalized_shape, "
        "Tensor? weight, Tensor? bias, float eps, bool[3] output_mask) -> (Tensor, Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(foldnorm, Meta, m) { NormOpTable<MetaKernels>::registerKernels(m); }

}  // namespace foldnorm::ops
