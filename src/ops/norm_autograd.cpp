// Autograd kernels of the foldnorm ops (TORCH_LIBRARY_IMPL(foldnorm, Autograd)): without them
// PyTorch's fallback ran the forward and warned that backward "may lead to silently incorrect
// behavior". Each forward op becomes a torch::autograd::Function whose forward calls the op below
// autograd (CPU or CUDA kernel by device) and whose backward calls rms_norm_backward /
// layer_norm_backward, so gradients of input, weight and bias come from our kernels on either
// device. First derivatives only: the backward ops have no autograd kernel of their own.
// The out= variants refuse inputs that require grad, as ATen's out= ops do.
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/autograd.h>
#include <torch/csrc/autograd/VariableTypeUtils.h>
#include <torch/library.h>

#include <array>
#include <tuple>
#include <vector>

#include "foldnorm/ops/rms_norm.h"
#include "norm_common.h"

namespace foldnorm::ops {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

bool requiresGrad(const std::optional<at::Tensor>& t) {
  return t && t->defined() && t->requires_grad();
}

// What the backward must produce, and what it needs, recorded by a forward.
void saveNormContext(AutogradContext* ctx, const at::Tensor& input, at::IntArrayRef shape,
                     const std::optional<at::Tensor>& weight,
                     const std::optional<at::Tensor>& bias, double eps) {
  ctx->saved_data["shape"] = shape.vec();
  ctx->saved_data["eps"] = eps;
  ctx->saved_data["needs_input"] = input.requires_grad();
  ctx->saved_data["needs_weight"] = requiresGrad(weight);
  ctx->saved_data["needs_bias"] = requiresGrad(bias);
}

// Gradients of (input, weight, bias) of a norm whose saved input is `x`.
std::tuple<at::Tensor, at::Tensor, at::Tensor> normGradients(NormKind kind, AutogradContext* ctx,
                                                             const at::Tensor& gradOut,
                                                             const at::Tensor& x,
                                                             const at::Tensor& weight,
                                                             const at::Tensor& bias,
                                                             bool needsInput) {
  if (!gradOut.defined()) return {};
  const std::vector<int64_t> shape = ctx->saved_data["shape"].toIntVector();
  const std::array<bool, 3> mask{needsInput, ctx->saved_data["needs_weight"].toBool(),
                                 ctx->saved_data["needs_bias"].toBool()};
  const auto optional = [](const at::Tensor& t) {
    return t.defined() ? std::optional<at::Tensor>(t) : std::nullopt;
  };
  return normBackward(kind == NormKind::kLayer, gradOut.contiguous(), x, shape, optional(weight),
                      optional(bias), ctx->saved_data["eps"].toDouble(), mask);
}

template <NormKind kKind>
class NormFunction : public torch::autograd::Function<NormFunction<kKind>> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& input, at::IntArrayRef shape,
                            const std::optional<at::Tensor>& weight,
                            const std::optional<at::Tensor>& bias, double eps) {
    saveNormContext(ctx, input, shape, weight, bias, eps);
    ctx->save_for_backward({input, weight.value_or(at::Tensor()), bias.value_or(at::Tensor())});
    at::AutoDispatchBelowADInplaceOrView below;
    return kKind == NormKind::kRms ? rmsNorm(input, shape, weight, bias, eps)
                                   : layerNorm(input, shape, weight, bias, eps);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    auto [dx, dw, db] = normGradients(kKind, ctx, grads[0], saved[0], saved[1], saved[2],
                                      ctx->saved_data["needs_input"].toBool());
    return {dx, at::Tensor(), dw, db, at::Tensor()};
  }
};

class AddRmsNormFunction : public torch::autograd::Function<AddRmsNormFunction> {
 public:
  static variable_list forward(AutogradContext* ctx, const at::Tensor& input,
                               const at::Tensor& residual, at::IntArrayRef shape,
                               const std::optional<at::Tensor>& weight,
                               const std::optional<at::Tensor>& bias, double eps) {
    saveNormContext(ctx, input, shape, weight, bias, eps);
    ctx->saved_data["needs_residual"] = residual.requires_grad();
    at::Tensor normed, sum;
    {
      at::AutoDispatchBelowADInplaceOrView below;
      std::tie(normed, sum) = addRmsNorm(input, residual, shape, weight, bias, eps);
    }
    // The backward normalizes through the sum, an output: saved as such (no copy).
    ctx->save_for_backward({sum, weight.value_or(at::Tensor()), bias.value_or(at::Tensor())});
    return {normed, sum};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const bool needsSum = ctx->saved_data["needs_input"].toBool() ||
                          ctx->saved_data["needs_residual"].toBool();
    // d(sum) = d(normed) through the norm + d(sum) from the sum's other readers; input and
    // residual both receive it (alpha = 1).
    auto [dSum, dw, db] =
        normGradients(NormKind::kRms, ctx, grads[0], saved[0], saved[1], saved[2], needsSum);
    if (grads[1].defined() && needsSum) dSum = dSum.defined() ? dSum + grads[1] : grads[1];
    const at::Tensor dInput = ctx->saved_data["needs_input"].toBool() ? dSum : at::Tensor();
    const at::Tensor dResidual = ctx->saved_data["needs_residual"].toBool() ? dSum : at::Tensor();
    return {dInput, dResidual, at::Tensor(), dw, db, at::Tensor()};
  }
};

// Whether a graph must be recorded. When not (no_grad, or nothing requires grad: inference
// outside InferenceMode), the kernels are called directly, skipping the autograd node that
// Function::apply would build and throw away on every call.
bool recordsGraph(std::initializer_list<std::optional<at::Tensor>> inputs) {
  if (!at::GradMode::is_enabled()) return false;
  for (const auto& t : inputs) {
    if (requiresGrad(t)) return true;
  }
  return false;
}

template <NormKind kKind>
at::Tensor normAutograd(const at::Tensor& input, at::IntArrayRef shape,
                        const std::optional<at::Tensor>& weight,
                        const std::optional<at::Tensor>& bias, double eps) {
  if (recordsGraph({input, weight, bias})) {
    return NormFunction<kKind>::apply(input, shape, weight, bias, eps);
  }
  at::AutoDispatchBelowADInplaceOrView below;
  return kKind == NormKind::kRms ? rmsNorm(input, shape, weight, bias, eps)
                                 : layerNorm(input, shape, weight, bias, eps);
}

std::tuple<at::Tensor, at::Tensor> addRmsNormAutograd(const at::Tensor& input,
                                                      const at::Tensor& residual,
                                                      at::IntArrayRef shape,
                                                      const std::optional<at::Tensor>& weight,
                                                      const std::optional<at::Tensor>& bias,
                                                      double eps) {
  if (!recordsGraph({input, residual, weight, bias})) {
    at::AutoDispatchBelowADInplaceOrView below;
    return addRmsNorm(input, residual, shape, weight, bias, eps);
  }
  auto outputs = AddRmsNormFunction::apply(input, residual, shape, weight, bias, eps);
  return {outputs[0], outputs[1]};
}

void refuseGrad(const char* op, std::initializer_list<std::optional<at::Tensor>> inputs) {
  TORCH_CHECK(!recordsGraph(inputs), op,
              ".out: out= does not support automatic differentiation (an argument requires "
              "grad); call the functional form, or run under torch.no_grad()");
}

template <NormKind kKind>
at::Tensor& normOutAutograd(const at::Tensor& input, at::IntArrayRef shape,
                            const std::optional<at::Tensor>& weight,
                            const std::optional<at::Tensor>& bias, double eps, at::Tensor& out) {
  refuseGrad(opName(kKind), {input, weight, bias});
  {
    at::AutoDispatchBelowADInplaceOrView below;
    kKind == NormKind::kRms ? rmsNormOut(out, input, shape, weight, bias, eps)
                            : layerNormOut(out, input, shape, weight, bias, eps);
  }
  torch::autograd::increment_version(out);
  return out;
}

std::tuple<at::Tensor&, at::Tensor&> addRmsNormOutAutograd(
    const at::Tensor& input, const at::Tensor& residual, at::IntArrayRef shape,
    const std::optional<at::Tensor>& weight, const std::optional<at::Tensor>& bias, double eps,
    at::Tensor& out, at::Tensor& sum) {
  refuseGrad(kAddRmsNormName, {input, residual, weight, bias});
  {
    at::AutoDispatchBelowADInplaceOrView below;
    addRmsNormOut(out, sum, input, residual, shape, weight, bias, eps);
  }
  torch::autograd::increment_version(out);
  torch::autograd::increment_version(sum);
  return {out, sum};
}

}  // namespace

TORCH_LIBRARY_IMPL(foldnorm, Autograd, m) {
  m.impl("rms_norm", &normAutograd<NormKind::kRms>);
  m.impl("layer_norm", &normAutograd<NormKind::kLayer>);
  m.impl("add_rms_norm", &addRmsNormAutograd);
  m.impl("rms_norm.out", &normOutAutograd<NormKind::kRms>);
  m.impl("layer_norm.out", &normOutAutograd<NormKind::kLayer>);
  m.impl("add_rms_norm.out", &addRmsNormOutAutograd);
}

}  // namespace foldnorm::ops
