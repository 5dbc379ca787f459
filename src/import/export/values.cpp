// The JSON encodings of torch/_export/serde/schema.py (torch 2.11, schema 8.17) read into our types.
#include <algorithm>

#include "export_steps.h"
#include "foldnorm/common/error.h"

namespace foldnorm::export_detail {

c10::ScalarType scalarType(int64_t v, const std::string& where) {
  using S = c10::ScalarType;
  switch (v) {
    case 1: return S::Byte;
    case 2: return S::Char;
    case 3: return S::Short;
    case 4: return S::Int;
    case 5: return S::Long;
    case 6: return S::Half;
    case 7: return S::Float;
    case 8: return S::Double;
    case 9: return S::ComplexHalf;
    case 10: return S::ComplexFloat;
    case 11: return S::ComplexDouble;
    case 12: return S::Bool;
    case 13: return S::BFloat16;
    case 28: return S::UInt16;
    case 29: return S::Float8_e4m3fn;
    case 30: return S::Float8_e5m2;
    case 31: return S::Float8_e4m3fnuz;
    case 32: return S::Float8_e5m2fnuz;
    default: throw Error(where + ": unknown dtype code " + std::to_string(v) + " (schema ScalarType)");
  }
}

int64_t layoutValue(int64_t v) {
  // schema: SparseCoo 1, SparseCsr 2, SparseCsc 3, SparseBsr 4, SparseBsc 5, _mkldnn 6, Strided 7
  // c10:    Strided 0, Sparse 1, SparseCsr 2, Mkldnn 3, SparseCsc 4, SparseBsr 5, SparseBsc 6
  switch (v) {
    case 7: return 0;
    case 1: return 1;
    case 2: return 2;
    case 6: return 3;
    case 3: return 4;
    case 4: return 5;
    case 5: return 6;
    default: return -1;
  }
}

int64_t memoryFormatValue(int64_t v) {
  // schema: ContiguousFormat 1, ChannelsLast 2, ChannelsLast3d 3, PreserveFormat 4
  // c10:    Contiguous 0, Preserve 1, ChannelsLast 2, ChannelsLast3d 3
  switch (v) {
    case 1: return 0;
    case 2: return 2;
    case 3: return 3;
    case 4: return 1;
    default: return -1;
  }
}

int64_t symIntValue(const nlohmann::json& s, const std::string& where) {
  if (s.is_number_integer()) return s.get<int64_t>();
  if (s.contains("as_int")) return s["as_int"].get<int64_t>();
  if (s.contains("as_expr")) {
    const auto& e = s["as_expr"];
    if (e.contains("hint") && e["hint"].is_object() && e["hint"].contains("as_int"))
      return e["hint"]["as_int"].get<int64_t>();
    throw Error(where + ": the symbolic size " + e.value("expr_str", std::string("?")) +
                " has no recorded example value (hint)");
  }
  throw Error(where + ": a size is neither an int nor a symbolic expression");
}

TensorShape tensorShape(const nlohmann::json& meta, const std::string& where) {
  TensorShape shape;
  shape.dtype = scalarType(meta.at("dtype").get<int64_t>(), where);
  for (const auto& s : meta.at("sizes")) shape.sizes.push_back(symIntValue(s, where));
  if (meta.contains("strides") && meta["strides"].is_array()) {
    for (const auto& s : meta["strides"]) shape.strides.push_back(symIntValue(s, where));
  }
  if (shape.strides.size() != shape.sizes.size()) {  // contiguous when the file has none
    shape.strides.assign(shape.sizes.size(), 1);
    for (std::size_t d = shape.sizes.size(); d-- > 1;)
      shape.strides[d - 1] = shape.strides[d] * std::max<int64_t>(shape.sizes[d], 1);
  }
  if (meta.contains("storage_offset") && !meta["storage_offset"].is_null())
    shape.offset = symIntValue(meta["storage_offset"], where);
  return shape;
}

OpTarget parseTarget(const std::string& target) {
  const std::string prefix = "torch.ops.";
  if (target.rfind(prefix, 0) != 0) return {};
  auto rest = target.substr(prefix.size());
  auto dot1 = rest.find('.');
  if (dot1 == std::string::npos) return {};
  OpTarget t;
  t.ns = rest.substr(0, dot1);
  auto dot2 = rest.find('.', dot1 + 1);
  t.name = rest.substr(dot1 + 1, dot2 == std::string::npos ? std::string::npos : dot2 - dot1 - 1);
  if (dot2 != std::string::npos) t.overload = rest.substr(dot2 + 1);
  return t;
}

}  // namespace foldnorm::export_detail
