#include "foldnorm/torch/ivalue_constant.h"
#include "foldnorm/torch/torch_model.h"

namespace foldnorm {

std::optional<ConstantValue> constantOf(const c10::IValue& iv) {
  if (iv.isNone()) return ConstantValue{std::monostate{}};
  if (iv.isInt()) return ConstantValue{iv.toInt()};
  if (iv.isDouble()) return ConstantValue{iv.toDouble()};
  if (iv.isBool()) return ConstantValue{iv.toBool()};
  if (iv.isString()) return ConstantValue{iv.toStringRef()};
  if (iv.isIntList()) return ConstantValue{iv.toIntVector()};
  if (iv.isDoubleList()) return ConstantValue{iv.toDoubleVector()};
  if (iv.isDevice()) return ConstantValue{iv.toDevice().str()};
  return std::nullopt;
}

Parameter describeTensor(std::string path, const at::Tensor& t) {
  Parameter param;
  param.path = std::move(path);
  param.shape = t.sizes().vec();
  param.dtype = dtypeName(t.scalar_type());
  param.bytes = static_cast<int64_t>(t.numel() * t.element_size());
  if (t.is_floating_point() && t.numel() > 0 && t.numel() <= Parameter::kValueRangeElements) {
    auto a = t.detach().abs().to(at::kDouble);
    param.absMin = a.min().item<double>();
    param.absMax = a.max().item<double>();
  }
  return param;
}

}  // namespace foldnorm
