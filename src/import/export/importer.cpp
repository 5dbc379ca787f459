// ExportedProgram (models/model.json) -> Graph: placeholders, then every node in order with its
// arguments bound by the op's schema (the dispatcher's, so omitted defaults are filled as the
// TorchScript importer sees them), then the outputs. See import/export.h for the Graph's shape.
#include <ATen/core/dispatch/Dispatcher.h>

#include <filesystem>
#include <limits>

#include "export_steps.h"
#include "foldnorm/common/error.h"
#include "foldnorm/graph/module_paths.h"
#include "foldnorm/import/export.h"
#include "foldnorm/import/export_archive.h"
#include "foldnorm/torch/ivalue_constant.h"
#include "program.h"

namespace foldnorm::export_detail {
namespace {

using nlohmann::json;

double floatOf(const json& v) {
  if (v.is_number()) return v.get<double>();
  const auto s = v.get<std::string>();  // non-finite floats are strings (allow_nan=False)
  if (s == "Infinity") return std::numeric_limits<double>::infinity();
  if (s == "-Infinity") return -std::numeric_limits<double>::infinity();
  if (s == "NaN") return std::numeric_limits<double>::quiet_NaN();
  throw Error("a float argument is the string '" + s + "'");
}

ValueKind kindOfType(const c10::TypePtr& type) {
  using K = c10::TypeKind;
  switch (type->kind()) {
    case K::TensorType: return ValueKind::Tensor;
    case K::IntType: case K::SymIntType: return ValueKind::Int;
    case K::FloatType: case K::SymFloatType: return ValueKind::Float;
    case K::BoolType: case K::SymBoolType: return ValueKind::Bool;
    case K::StringType: return ValueKind::String;
    case K::DeviceObjType: return ValueKind::Device;
    case K::ScalarTypeType: return ValueKind::ScalarType;
    case K::NoneType: return ValueKind::None;
    case K::ListType: {
      auto elem = type->containedTypes().at(0)->kind();
      if (elem == K::IntType || elem == K::SymIntType) return ValueKind::IntList;
      if (elem == K::FloatType) return ValueKind::FloatList;
      if (elem == K::BoolType) return ValueKind::BoolList;
      if (elem == K::TensorType) return ValueKind::TensorList;
      return ValueKind::Other;
    }
    case K::OptionalType: return kindOfType(type->containedTypes().at(0));
    default: return ValueKind::Other;
  }
}

/// "File \"/x/y.py\", line 9, in forward\n ..." -> "y.py:9" of the innermost frame.
std::string sourceOf(const json& metadata) {
  if (!metadata.is_object() || !metadata.contains("stack_trace") || !metadata["stack_trace"].is_string()) return {};
  const auto trace = metadata["stack_trace"].get<std::string>();
  auto at = trace.rfind("File \"");
  if (at == std::string::npos) return {};
  auto end = trace.find('"', at + 6);
  auto line = trace.find(", line ", end);
  if (end == std::string::npos || line == std::string::npos) return {};
  auto digits = trace.substr(line + 7);
  digits = digits.substr(0, digits.find_first_not_of("0123456789"));
  return std::filesystem::path(trace.substr(at + 6, end - at - 6)).filename().string() + ":" + digits;
}

/// The innermost module of nn_module_stack ("key,path,type;..."; the path sits between the first
/// and the last comma of an entry, and may hold commas itself).
std::string moduleOf(const json& metadata) {
  if (!metadata.is_object() || !metadata.contains("nn_module_stack") || !metadata["nn_module_stack"].is_string())
    return {};
  auto stack = metadata["nn_module_stack"].get<std::string>();
  auto last = stack.substr(stack.rfind(';') == std::string::npos ? 0 : stack.rfind(';') + 1);
  auto first = last.find(','), lastComma = last.rfind(',');
  if (first == std::string::npos || lastComma <= first) return {};
  return last.substr(first + 1, lastComma - first - 1);
}

}  // namespace

ProgramImporter::ProgramImporter(const ExportArchive& archive, Graph& graph, ExportModel& model)
    : archive_(archive), g_(graph), model_(model) {}

NodeId ProgramImporter::addNode(const std::string& kind, const std::vector<std::size_t>& location,
                                const std::string& name, const json* metadata) {
  auto id = g_.addNode(kind, {}, metadata ? sourceOf(*metadata) : std::string{});
  g_.node(id).origin = location.empty() ? kNone : location.front();
  model_.nodeLocation.push_back(location);
  model_.nodeName.push_back(name);
  model_.standsFor.push_back(kNone);
  auto module = metadata ? moduleOf(*metadata) : std::string{};
  std::size_t site = kNone;
  if (metadata && metadata->contains("nn_module_stack"))
    site = callSites_.emplace(module, callSites_.size()).first->second;
  evidence_.callStackPath.push_back(module);
  evidence_.callSite.push_back(site);
  evidence_.attributePath.emplace_back();
  return id;
}

ValueId ProgramImporter::constant(ConstantValue c, ValueKind kind, const std::string& typeName) {
  auto node = addNode("prim::Constant", {}, {}, nullptr);
  auto v = g_.addOutput(node, {}, kind, typeName);
  g_.value(v).constant = std::move(c);
  return v;
}

ValueId ProgramImporter::tensorRef(const std::string& name, const std::string& where) {
  auto it = scope_.find(name);
  if (it == scope_.end()) throw Error(where + " reads '" + name + "', which no earlier node produces (a damaged program?)");
  // A value whose storage was written since it was made reads the storage's newest value.
  return it->second = current(it->second, name, where);
}

void ProgramImporter::setTensorInfo(ValueId v, const std::string& name, const json& graph) {
  const auto& tv = graph.contains("tensor_values") ? graph["tensor_values"] : json::object();
  if (!tv.is_object() || !tv.contains(name)) return;
  auto shape = tensorShape(tv[name], "tensor '" + name + "'");
  g_.value(v).tensor = TensorInfo{shape.sizes, dtypeName(shape.dtype)};
}

std::optional<ConstantValue> ProgramImporter::symbolic(const std::string& name, const json& graph, ValueKind& kind) {
  auto lookup = [&](const char* table) -> const json* {
    if (graph.contains(table) && graph[table].is_object() && graph[table].contains(name)) return &graph[table][name];
    return nullptr;
  };
  if (auto s = lookup("sym_int_values")) {
    kind = ValueKind::Int;
    return ConstantValue{symIntValue(*s, "symbolic size '" + name + "'")};
  }
  if (auto s = lookup("sym_float_values")) {
    kind = ValueKind::Float;
    if (s->contains("as_float")) return ConstantValue{floatOf((*s)["as_float"])};
    if (s->contains("as_expr") && (*s)["as_expr"].contains("hint") && (*s)["as_expr"]["hint"].contains("as_float"))
      return ConstantValue{floatOf((*s)["as_expr"]["hint"]["as_float"])};
    return std::nullopt;
  }
  if (auto s = lookup("sym_bool_values")) {
    kind = ValueKind::Bool;
    if (s->contains("as_bool")) return ConstantValue{(*s)["as_bool"].get<bool>()};
    if (s->contains("as_expr") && (*s)["as_expr"].contains("hint") && (*s)["as_expr"]["hint"].contains("as_bool"))
      return ConstantValue{(*s)["as_expr"]["hint"]["as_bool"].get<bool>()};
    return std::nullopt;
  }
  kind = ValueKind::Int;
  return std::nullopt;
}

ValueId ProgramImporter::symRef(const json& s, const std::string& where) {
  if (s.contains("as_name")) return tensorRef(s["as_name"].get<std::string>(), where);
  if (s.contains("as_int")) return constant(ConstantValue{s["as_int"].get<int64_t>()}, ValueKind::Int, "int");
  if (s.contains("as_float")) return constant(ConstantValue{floatOf(s["as_float"])}, ValueKind::Float, "float");
  if (s.contains("as_bool")) return constant(ConstantValue{s["as_bool"].get<bool>()}, ValueKind::Bool, "bool");
  throw Error(where + ": a symbolic argument of unknown form");
}

ValueId ProgramImporter::listOf(const std::vector<ValueId>& items, ValueKind kind, const std::string& typeName) {
  auto node = addNode("prim::ListConstruct", {}, {}, nullptr);
  for (auto v : items) g_.addInput(node, v);
  auto out = g_.addOutput(node, {}, kind, typeName);
  // Lists of known ints (shapes, dims) are constants themselves, as the TorchScript importer has them.
  if (kind == ValueKind::IntList) {
    std::vector<int64_t> list;
    for (auto v : items)
      if (auto i = g_.constantInt(v)) list.push_back(*i);
    if (list.size() == items.size()) g_.value(out).constant = list;
  }
  return out;
}

ValueId ProgramImporter::argumentValue(const json& arg, const std::string& where) {
  if (!arg.is_object() || arg.size() != 1) throw Error(where + ": an argument is not a one-key union (a damaged program?)");
  const auto& [key, v] = *arg.items().begin();
  if (key == "as_none") return constant(ConstantValue{std::monostate{}}, ValueKind::None, "NoneType");
  if (key == "as_tensor") return tensorRef(v.at("name").get<std::string>(), where);
  if (key == "as_int") return constant(ConstantValue{v.get<int64_t>()}, ValueKind::Int, "int");
  if (key == "as_float") return constant(ConstantValue{floatOf(v)}, ValueKind::Float, "float");
  if (key == "as_bool") return constant(ConstantValue{v.get<bool>()}, ValueKind::Bool, "bool");
  if (key == "as_string") return constant(ConstantValue{v.get<std::string>()}, ValueKind::String, "str");
  if (key == "as_ints") return constant(ConstantValue{v.get<std::vector<int64_t>>()}, ValueKind::IntList, "int[]");
  if (key == "as_floats") {
    std::vector<double> list;
    for (const auto& f : v) list.push_back(floatOf(f));
    return constant(ConstantValue{list}, ValueKind::FloatList, "float[]");
  }
  if (key == "as_bools") {
    std::vector<ValueId> items;
    for (const auto& b : v) items.push_back(constant(ConstantValue{b.get<bool>()}, ValueKind::Bool, "bool"));
    return listOf(items, ValueKind::BoolList, "bool[]");
  }
  if (key == "as_sym_int" || key == "as_sym_float" || key == "as_sym_bool") return symRef(v, where);
  if (key == "as_sym_ints" || key == "as_sym_floats" || key == "as_sym_bools") {
    std::vector<ValueId> items;
    for (const auto& s : v) items.push_back(symRef(s, where));
    auto kind = key == "as_sym_ints" ? ValueKind::IntList : key == "as_sym_floats" ? ValueKind::FloatList : ValueKind::BoolList;
    return listOf(items, kind, kind == ValueKind::IntList ? "int[]" : kind == ValueKind::FloatList ? "float[]" : "bool[]");
  }
  if (key == "as_tensors") {
    std::vector<ValueId> items;
    for (const auto& t : v) items.push_back(tensorRef(t.at("name").get<std::string>(), where));
    return listOf(items, ValueKind::TensorList, "Tensor[]");
  }
  if (key == "as_optional_tensor") return argumentValue(v, where);
  if (key == "as_optional_tensors") {
    std::vector<ValueId> items;
    for (const auto& t : v) items.push_back(argumentValue(t, where));
    return listOf(items, ValueKind::Other, "Tensor?[]");
  }
  if (key == "as_scalar_type")
    return constant(ConstantValue{static_cast<int64_t>(scalarType(v.get<int64_t>(), where))}, ValueKind::ScalarType, "ScalarType");
  if (key == "as_layout") return constant(ConstantValue{layoutValue(v.get<int64_t>())}, ValueKind::Int, "Layout");
  if (key == "as_memory_format")
    return constant(ConstantValue{memoryFormatValue(v.get<int64_t>())}, ValueKind::Int, "MemoryFormat");
  if (key == "as_device") {
    auto device = v.at("type").get<std::string>();
    if (v.contains("index") && v["index"].is_number_integer()) device += ":" + std::to_string(v["index"].get<int64_t>());
    return constant(ConstantValue{device}, ValueKind::Device, "Device");
  }
  // complex numbers, graphs outside higher-order ops, custom objects, operators: no value we read
  auto node = addNode("prim::Constant", {}, {}, nullptr);
  return g_.addOutput(node, {}, ValueKind::Other, key);
}

ValueId ProgramImporter::defaultValue(const c10::Argument& a, const std::string& where) {
  if (a.default_value()) {
    if (auto c = constantOf(*a.default_value()))
      return constant(*c, a.default_value()->isNone() ? ValueKind::None : kindOfType(a.type()), a.type()->annotation_str());
  } else if (a.type()->kind() == c10::TypeKind::OptionalType) {
    return constant(ConstantValue{std::monostate{}}, ValueKind::None, "NoneType");
  }
  throw Error(where + ": the argument '" + a.name() + "' of its op is missing and has no default (a damaged program?)");
}

void ProgramImporter::addOutputs(NodeId id, const json& outputs, const std::string& nodeName, const json& graph,
                                 std::vector<ValueId>& produced) {
  auto named = [&](NodeId on, const std::string& name, ValueKind kind, const std::string& type) {
    auto v = g_.addOutput(on, name, kind, type);
    scope_[name] = v;
    produced.push_back(v);
    return v;
  };
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    const auto& out = outputs[i];
    if (!out.is_object() || out.size() != 1) throw Error("node '" + nodeName + "': an output is not a one-key union");
    const auto& [key, v] = *out.items().begin();
    if (key == "as_tensor") {
      auto name = v.at("name").get<std::string>();
      setTensorInfo(named(id, name, ValueKind::Tensor, "Tensor"), name, graph);
    } else if (key == "as_tensors") {
      // A Tensor[] result: one list value, unpacked into its elements (as TorchScript's ListUnpack).
      auto list = g_.addOutput(id, nodeName, ValueKind::TensorList, "Tensor[]");
      produced.push_back(list);
      auto unpack = addNode("prim::ListUnpack", {}, {}, nullptr);
      g_.addInput(unpack, list);
      for (const auto& t : v) {
        auto name = t.at("name").get<std::string>();
        setTensorInfo(named(unpack, name, ValueKind::Tensor, "Tensor"), name, graph);
      }
    } else if (key == "as_sym_int" || key == "as_sym_float" || key == "as_sym_bool") {
      auto name = v.at("as_name").get<std::string>();
      ValueKind kind;
      auto c = symbolic(name, graph, kind);
      auto val = named(id, name, kind, kind == ValueKind::Int ? "int" : kind == ValueKind::Float ? "float" : "bool");
      g_.value(val).constant = c;
    } else if (key == "as_none") {
      produced.push_back(g_.addOutput(id, nodeName + "_none_" + std::to_string(i), ValueKind::None, "NoneType"));
    } else if (key == "as_int" || key == "as_float" || key == "as_bool") {
      auto kind = key == "as_int" ? ValueKind::Int : key == "as_float" ? ValueKind::Float : ValueKind::Bool;
      auto val = g_.addOutput(id, nodeName + "_" + std::to_string(i), kind, key.substr(3));
      if (kind == ValueKind::Int) g_.value(val).constant = ConstantValue{v.get<int64_t>()};
      else if (kind == ValueKind::Float) g_.value(val).constant = ConstantValue{floatOf(v)};
      else g_.value(val).constant = ConstantValue{v.get<bool>()};
      produced.push_back(val);
    } else {
      produced.push_back(g_.addOutput(id, nodeName + "_" + std::to_string(i), ValueKind::Other, key));
    }
  }
}

}  // namespace foldnorm::export_detail
