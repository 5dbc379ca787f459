#include "foldnorm/torch/ivalue_constant.h"

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

}  // namespace foldnorm
