#include "norm_common.h"

#include <ATen/MemoryOverlap.h>
#include <ATen/ops/empty.h>
#include <c10/util/Exception.h>
#include <c10/util/irange.h>

#include <string>

namespace foldnorm::ops {
namespace {

bool isReducedFloat(c10::ScalarType t) {
  return t == c10::ScalarType::BFloat16 || t == c10::ScalarType::Half;
}

bool isSupportedDtype(c10::ScalarType t) {
  return t == c10::ScalarType::Float || t == c10::ScalarType::Double || isReducedFloat(t);
}

void checkParameter(NormKind kind, const char* name, const at::Tensor& input,
                    const std::optional<at::Tensor>& param, at::IntArrayRef normalizedShape) {
  if (!param || !param->defined()) return;
  TORCH_CHECK(param->sizes() == normalizedShape, opName(kind), ": expected ", name,
              " of the same shape as normalized_shape, but got ", name, " of shape ",
              param->sizes(), " and normalized_shape = ", normalizedShape);
  TORCH_CHECK(param->device() == input.device(), opName(kind), ": ", name, " is on ",
              param->device(), " but input is on ", input.device(), "; move both to one device");
  const auto t = param->scalar_type();
  TORCH_CHECK(t == input.scalar_type() || (isReducedFloat(input.scalar_type()) &&
                                            t == c10::ScalarType::Float),
              opName(kind), ": ", name, " has dtype ", t, " but input has dtype ",
              input.scalar_type(), "; ", name,
              " must have the input's dtype (or float32 for a bfloat16/float16 input)");
}

}  // namespace

const char* opName(NormKind kind) {
  return kind == NormKind::kRms ? "foldnorm::rms_norm" : "foldnorm::layer_norm";
}

NormShape checkNormInputs(NormKind kind, const at::Tensor& input, at::IntArrayRef normalizedShape,
                          const std::optional<at::Tensor>& weight,
                          const std::optional<at::Tensor>& bias) {
  TORCH_CHECK(input.defined(), opName(kind), ": input is an undefined tensor");
  TORCH_CHECK(!normalizedShape.empty(), opName(kind),
              ": expected normalized_shape to be at least 1-dimensional, i.e., containing at "
              "least one element, but got normalized_shape = ",
              normalizedShape);
  TORCH_CHECK(isSupportedDtype(input.scalar_type()), opName(kind), ": input has dtype ",
              input.scalar_type(), "; supported are float32, float64, bfloat16 and float16");
  const auto inputDims = static_cast<int64_t>(input.dim());
  const auto normDims = static_cast<int64_t>(normalizedShape.size());
  const auto sizes = input.sizes();
  bool trailingMatch = inputDims >= normDims;
  for (int64_t i = 0; trailingMatch && i < normDims; ++i) {
    trailingMatch = sizes[inputDims - normDims + i] == normalizedShape[i];
  }
  if (!trailingMatch) {
    std::string expected = "[*";
    for (auto d : normalizedShape) expected += ", " + std::to_string(d);
    TORCH_CHECK(false, opName(kind), ": given normalized_shape = ", normalizedShape,
                ", expected input with shape ", expected,
                "] (trailing dims equal to normalized_shape), but got input of size ", sizes);
  }
  checkParameter(kind, "weight", input, weight, normalizedShape);
  checkParameter(kind, "bias", input, bias, normalizedShape);

  NormShape shape;
  shape.cols = 1;
  for (auto d : normalizedShape) shape.cols *= d;
  shape.rows = 1;
  for (int64_t i = 0; i < inputDims - normDims; ++i) shape.rows *= sizes[i];
  return shape;
}

void prepareNormOut(NormKind kind, const at::Tensor& input, at::Tensor& out) {
  TORCH_CHECK(out.defined(), opName(kind), ".out: out is an undefined tensor");
  TORCH_CHECK(out.scalar_type() == input.scalar_type(), opName(kind), ".out: out has dtype ",
              out.scalar_type(), " but input has dtype ", input.scalar_type());
  TORCH_CHECK(out.device() == input.device(), opName(kind), ".out: out is on ", out.device(),
              " but input is on ", input.device());
  if (out.sizes() != input.sizes()) out.resize_(input.sizes());
  TORCH_CHECK(out.is_contiguous(), opName(kind),
              ".out: out must be contiguous (pass a fresh tensor or .contiguous() storage)");
  // Writing into the input itself is fine (each element is read before it is written);
  // a shifted view of it is not.
  at::assert_no_partial_overlap(out, input);
}

NormShape checkAddNormInputs(const at::Tensor& input, const at::Tensor& residual,
                             at::IntArrayRef normalizedShape,
                             const std::optional<at::Tensor>& weight,
                             const std::optional<at::Tensor>& bias) {
  const NormShape shape = checkNormInputs(NormKind::kRms, input, normalizedShape, weight, bias);
  TORCH_CHECK(residual.defined(), kAddRmsNormName, ": residual is an undefined tensor");
  TORCH_CHECK(residual.sizes() == input.sizes(), kAddRmsNormName, ": residual has shape ",
              residual.sizes(), " but input has shape ", input.sizes(),
              "; the fused add does not broadcast (expand and make the residual contiguous "
              "first, or use aten::add)");
  TORCH_CHECK(residual.scalar_type() == input.scalar_type(), kAddRmsNormName,
              ": residual has dtype ", residual.scalar_type(), " but input has dtype ",
              input.scalar_type());
  TORCH_CHECK(residual.device() == input.device(), kAddRmsNormName, ": residual is on ",
              residual.device(), " but input is on ", input.device());
  return shape;
}

void prepareAddNormOut(const at::Tensor& input, const at::Tensor& residual, at::Tensor& out,
                       at::Tensor& sum) {
  for (at::Tensor* t : {&out, &sum}) {
    const char* name = t == &out ? "out" : "sum";
    TORCH_CHECK(t->defined(), kAddRmsNormName, ".out: ", name, " is an undefined tensor");
    TORCH_CHECK(t->scalar_type() == input.scalar_type(), kAddRmsNormName, ".out: ", name,
                " has dtype ", t->scalar_type(), " but input has dtype ", input.scalar_type());
    TORCH_CHECK(t->device() == input.device(), kAddRmsNormName, ".out: ", name, " is on ",
                t->device(), " but input is on ", input.device());
    if (t->sizes() != input.sizes()) t->resize_(input.sizes());
    TORCH_CHECK(t->is_contiguous(), kAddRmsNormName, ".out: ", name,
                " must be contiguous (pass a fresh tensor or .contiguous() storage)");
    // Each element of input and residual is read before the same element of out/sum is written.
    at::assert_no_partial_overlap(*t, input);
    at::assert_no_partial_overlap(*t, residual);
  }
  TORCH_CHECK(!out.is_same(sum), kAddRmsNormName, ".out: out and sum are the same tensor");
  at::assert_no_overlap(out, sum);
}

NormShape checkNormBackwardInputs(NormKind kind, const at::Tensor& gradOut,
                                  const at::Tensor& input, at::IntArrayRef normalizedShape,
                                  const std::optional<at::Tensor>& weight,
                                  const std::optional<at::Tensor>& bias) {
  const NormShape shape = checkNormInputs(kind, input, normalizedShape, weight, bias);
  TORCH_CHECK(gradOut.defined(), opName(kind), "_backward: grad_out is an undefined tensor");
  TORCH_CHECK(gradOut.sizes() == input.sizes() && gradOut.scalar_type() == input.scalar_type() &&
                  gradOut.device() == input.device(),
              opName(kind), "_backward: grad_out (", gradOut.sizes(), ", ", gradOut.scalar_type(),
              ", ", gradOut.device(), ") must have the input's shape, dtype and device (",
              input.sizes(), ", ", input.scalar_type(), ", ", input.device(), ")");
  return shape;
}

c10::ScalarType paramTypeOf(const char* op, const at::Tensor& input, const at::Tensor& weight,
                            const at::Tensor& bias) {
  TORCH_CHECK(!weight.defined() || !bias.defined() || weight.scalar_type() == bias.scalar_type(),
              op, ": weight has dtype ", weight.scalar_type(), " but bias has dtype ",
              bias.scalar_type(), "; give both the same dtype");
  if (weight.defined()) return weight.scalar_type();
  return bias.defined() ? bias.scalar_type() : input.scalar_type();
}

at::Tensor emptyNormOutput(const at::Tensor& input) {
  return at::empty(input.sizes(), input.options().memory_format(at::MemoryFormat::Contiguous));
}

at::Tensor contiguousOrUndefined(const std::optional<at::Tensor>& t) {
  if (!t || !t->defined()) return {};
  return t->contiguous();
}

}  // namespace foldnorm::ops
