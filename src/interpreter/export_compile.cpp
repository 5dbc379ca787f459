// The .pt2 interpreter's compiler (see include/foldnorm/interpreter/export_interpreter.h): the program's
// JSON into steps over numbered slots (export_compiled.h), so a run is a loop of boxed calls with
// no JSON or name look-ups; and the name and dtype tables of the serialized format.
#include <ATen/core/dispatch/Dispatcher.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <unordered_map>
#include <unordered_set>

#include "export_compiled.h"
#include "foldnorm/common/error.h"

namespace foldnorm {

using nlohmann::json;

namespace {

// schema.py's ScalarType codes, in c10 order.
const std::vector<std::pair<int64_t, at::ScalarType>>& scalarTypeCodes() {
  static const std::vector<std::pair<int64_t, at::ScalarType>> codes{
      {1, at::kByte}, {2, at::kChar}, {3, at::kShort}, {4, at::kInt}, {5, at::kLong}, {6, at::kHalf},
      {7, at::kFloat}, {8, at::kDouble}, {9, at::kComplexHalf}, {10, at::kComplexFloat},
      {11, at::kComplexDouble}, {12, at::kBool}, {13, at::kBFloat16}, {28, at::kUInt16},
      {29, at::kFloat8_e4m3fn}, {30, at::kFloat8_e5m2}, {31, at::kFloat8_e4m3fnuz},
      {32, at::kFloat8_e5m2fnuz}};
  return codes;
}

at::Layout layoutFromExport(int64_t code) {
  switch (code) {
    case 1: return at::kSparse;
    case 2: return at::kSparseCsr;
    case 3: return at::kSparseCsc;
    case 4: return at::kSparseBsr;
    case 5: return at::kSparseBsc;
    case 6: return at::kMkldnn;
    case 7: return at::kStrided;
    default: throw Error("unknown layout code " + std::to_string(code) + " in the program");
  }
}

at::MemoryFormat memoryFormatFromExport(int64_t code) {
  switch (code) {
    case 1: return at::MemoryFormat::Contiguous;
    case 2: return at::MemoryFormat::ChannelsLast;
    case 3: return at::MemoryFormat::ChannelsLast3d;
    case 4: return at::MemoryFormat::Preserve;
    default: throw Error("unknown memory format code " + std::to_string(code) + " in the program");
  }
}

}  // namespace

namespace export_interp {

// Non-finite floats are written as strings (the JSON is dumped with allow_nan=False).
double floatOf(const json& j) {
  if (j.is_string()) {
    const auto& s = j.get_ref<const std::string&>();
    if (s == "Infinity") return INFINITY;
    if (s == "-Infinity") return -INFINITY;
    if (s == "NaN") return NAN;
    throw Error("float argument '" + s + "' is not a number");
  }
  return j.get<double>();
}

namespace {

class GraphCompiler {
 public:
  GraphCompiler(const json& graph, const ExportRunOptions& options) : graph_(graph), options_(options) {}

  std::shared_ptr<Compiled> compile() {
    auto c = std::make_shared<Compiled>();
    for (const auto& in : graph_.at("inputs")) c->inputSlots.push_back(define(placeholderName(in)));
    const auto& nodes = graph_.at("nodes");
    for (std::size_t i = 0; i < nodes.size(); ++i) c->steps.push_back(compileNode(nodes[i], i, *c));
    for (const auto& out : graph_.at("outputs")) c->outputs.push_back(source(out, "the graph outputs"));
    c->slotCount = static_cast<int>(slots_.size());
    return c;
  }

 private:
  static std::string placeholderName(const json& in) {
    for (const char* key : {"as_tensor", "as_sym_int", "as_sym_float", "as_sym_bool", "as_custom_obj", "as_token"})
      if (in.contains(key)) {
        const auto& v = in.at(key);
        return v.is_object() && v.contains("name") ? v.at("name").get<std::string>()
                                                   : v.at("as_name").get<std::string>();
      }
    if (in.contains("as_none")) return "";  // a constant input: no placeholder value
    throw Error("graph input " + in.dump() + " is of a kind the interpreter does not know");
  }

  int define(const std::string& name) {
    if (name.empty()) return -1;
    auto [it, inserted] = slots_.emplace(name, static_cast<int>(slots_.size()));
    defined_.insert(name);
    return it->second;
  }

  // A value read by name: defined earlier, or a symbolic size with a recorded hint.
  ArgSource named(const std::string& name, const std::string& where, bool symbolic) {
    ArgSource s;
    if (defined_.count(name)) {
      s.kind = ArgSource::Slot;
      s.slot = slots_.at(name);
      return s;
    }
    if (symbolic) {
      const auto& syms = graph_.value("sym_int_values", json::object());
      if (syms.contains(name)) {
        const auto& v = syms.at(name);
        if (v.contains("as_int")) s.constant = v.at("as_int").get<int64_t>();
        else if (v.contains("as_expr") && v.at("as_expr").value("hint", json()).is_object())
          s.constant = v.at("as_expr").at("hint").at("as_int").get<int64_t>();
        else throw Error(where + ": symbolic size '" + name + "' has no recorded value");
        return s;
      }
    }
    throw Error(where + ": reads '" + name + "' before any node defines it");
  }

  at::ScalarType retargetedScalarType(int64_t code) const {
    auto type = scalarTypeFromExport(code);
    if (options_.dtype) {
      bool narrowFloat = type == at::kHalf || type == at::kBFloat16;
      if (type == at::kFloat || (narrowFloat && *options_.dtype == at::kDouble)) return *options_.dtype;
    }
    return type;
  }

  ArgSource source(const json& arg, const std::string& where) {
    if (!arg.is_object() || arg.size() != 1) throw Error(where + ": malformed argument " + arg.dump());
    const std::string key = arg.begin().key();
    const json& v = arg.begin().value();
    ArgSource s;
    auto listOf = [&](ArgSource::Kind kind, const char* constKey, const char* nameKey, bool symbolic) {
      s.kind = kind;
      for (const auto& e : v) {
        if (e.contains(nameKey)) {
          auto n = named(e.at(nameKey).get<std::string>(), where, symbolic);
          s.slots.push_back(n.kind == ArgSource::Slot ? n.slot : -1);
          s.elements.push_back(n.constant);
        } else {
          s.slots.push_back(-1);
          s.elements.push_back(kind == ArgSource::FloatList ? c10::IValue(floatOf(e.at(constKey)))
                               : kind == ArgSource::BoolList ? c10::IValue(e.at(constKey).get<bool>())
                                                             : c10::IValue(e.at(constKey).get<int64_t>()));
        }
      }
    };
    if (key == "as_none") return s;
    if (key == "as_tensor") return named(v.at("name"), where, false);
    if (key == "as_tensors") {
      s.kind = ArgSource::TensorList;
      for (const auto& e : v) s.slots.push_back(named(e.at("name"), where, false).slot);
      return s;
    }
    if (key == "as_optional_tensor") {
      if (v.contains("as_tensor")) return named(v.at("as_tensor").at("name"), where, false);
      return s;
    }
    if (key == "as_optional_tensors") {
      s.kind = ArgSource::OptionalTensorList;
      for (const auto& e : v)
        s.slots.push_back(e.contains("as_tensor") ? named(e.at("as_tensor").at("name"), where, false).slot : -1);
      return s;
    }
    if (key == "as_int") s.constant = v.get<int64_t>();
    else if (key == "as_ints") s.constant = v.get<std::vector<int64_t>>();
    else if (key == "as_float") s.constant = floatOf(v);
    else if (key == "as_floats") {
      std::vector<double> d;
      for (const auto& e : v) d.push_back(floatOf(e));
      s.constant = d;
    } else if (key == "as_bool") s.constant = v.get<bool>();
    else if (key == "as_bools") {
      c10::List<bool> l;
      for (const auto& e : v) l.push_back(e.get<bool>());
      s.constant = l;
    }
    else if (key == "as_string") s.constant = v.get<std::string>();
    else if (key == "as_strings") s.constant = c10::List<std::string>(v.get<std::vector<std::string>>());
    else if (key == "as_sym_int" || key == "as_sym_float" || key == "as_sym_bool") {
      if (v.contains("as_name")) return named(v.at("as_name"), where, true);
      if (v.contains("as_int")) s.constant = v.at("as_int").get<int64_t>();
      else if (v.contains("as_float")) s.constant = floatOf(v.at("as_float"));
      else s.constant = v.at("as_bool").get<bool>();
    } else if (key == "as_sym_ints") listOf(ArgSource::IntList, "as_int", "as_name", true);
    else if (key == "as_sym_floats") listOf(ArgSource::FloatList, "as_float", "as_name", true);
    else if (key == "as_sym_bools") listOf(ArgSource::BoolList, "as_bool", "as_name", true);
    else if (key == "as_scalar_type") s.constant = static_cast<int64_t>(retargetedScalarType(v.get<int64_t>()));
    else if (key == "as_memory_format") s.constant = static_cast<int64_t>(memoryFormatFromExport(v.get<int64_t>()));
    else if (key == "as_layout") s.constant = static_cast<int64_t>(layoutFromExport(v.get<int64_t>()));
    else if (key == "as_device") s.constant = options_.device;  // the run's device, as a retargeted trace
    else if (key == "as_complex") s.constant = c10::complex<double>(floatOf(v.at("real")), floatOf(v.at("imag")));
    else throw Error(where + ": arguments of kind '" + key + "' are not supported by the interpreter");
    // A symbolic int list whose entries are all known is one constant list.
    if (s.kind == ArgSource::IntList && std::all_of(s.slots.begin(), s.slots.end(), [](int x) { return x < 0; })) {
      std::vector<int64_t> l;
      for (const auto& e : s.elements) l.push_back(e.toInt());
      s = ArgSource{};
      s.constant = l;
    }
    return s;
  }

  OutBinding binding(const json& out) {
    OutBinding b;
    if (!out.is_object() || out.size() != 1) throw Error("malformed node output " + out.dump());
    const std::string key = out.begin().key();
    const json& v = out.begin().value();
    if (key == "as_tensor") b.slot = define(v.at("name"));
    else if (key == "as_tensors") {
      b.isList = true;
      for (const auto& e : v) b.listSlots.push_back(define(e.at("name")));
    } else if (key == "as_sym_int" || key == "as_sym_float" || key == "as_sym_bool") {
      if (v.contains("as_name")) b.slot = define(v.at("as_name"));
    } else if (key == "as_optional_tensors") {
      b.isList = true;
      for (const auto& e : v)
        b.listSlots.push_back(e.contains("as_tensor") ? define(e.at("as_tensor").at("name")) : -1);
    } else if (key != "as_none") {
      throw Error("node output of kind '" + key + "' is not supported by the interpreter");
    }
    return b;
  }

  Step compileNode(const json& node, std::size_t index, Compiled& compiled) {
    Step step;
    const auto target = node.at("target").get<std::string>();
    step.description = "node " + std::to_string(index) + " '" + node.value("name", std::string("?")) + "' (" + target + ")";
    if (node.contains("metadata") && node["metadata"].contains("stack_trace"))
      step.sourceLine = pythonSourceLine(node["metadata"]["stack_trace"].get<std::string>());
    const auto& inputs = node.at("inputs");
    auto positional = [&](std::size_t from) {
      for (std::size_t i = from; i < inputs.size(); ++i) step.args.push_back(source(inputs[i].at("arg"), step.description));
    };
    auto bindAll = [&] { for (const auto& o : node.at("outputs")) step.outputs.push_back(binding(o)); };
    const bool getItem = target == "_operator.getitem";
    if (getItem || target.rfind("_operator.", 0) == 0 || target.rfind("torch.sym_", 0) == 0 || target == "math.trunc") {
      step.kind = getItem ? Step::GetItem : Step::ScalarOp;
      step.scalarOp = target;
      positional(0);
      bindAll();
      return step;
    }
    if (target == "torch.ops.higher_order.wrap_with_set_grad_enabled") {
      // inputs: enabled, the subgraph, then its operands. Verification runs without grad either way.
      step.kind = Step::SetGradSubgraph;
      if (inputs.size() < 2 || !inputs[1].at("arg").contains("as_graph"))
        throw Error(step.description + ": expected (enabled, subgraph, operands...)");
      step.gradEnabled = inputs[0].at("arg").at("as_bool").get<bool>();
      step.subgraph = GraphCompiler(inputs[1].at("arg").at("as_graph").at("graph"), options_).compile();
      positional(2);
      bindAll();
      return step;
    }
    if (target == "torch.ops.higher_order.wrap_with_autocast") {
      // (device_type, dtype, enabled, cache_enabled, subgraph, operands...): a disabled region
      // computes as its subgraph says (the importer refuses enabled ones), like a grad region.
      step.kind = Step::SetGradSubgraph;
      if (inputs.size() < 5 || !inputs[4].at("arg").contains("as_graph") || inputs[2].at("arg").value("as_bool", true))
        throw Error(step.description + ": only a disabled autocast region (enabled=False) runs here");
      step.subgraph = GraphCompiler(inputs[4].at("arg").at("as_graph").at("graph"), options_).compile();
      positional(5);
      bindAll();
      return step;
    }
    auto name = dispatcherName(target);
    if (!name) throw Error(step.description + ": the interpreter cannot run this target");
    auto handle = c10::Dispatcher::singleton().findSchema({name->first, name->second});
    if (!handle)
      throw Error(step.description + ": no operator " + name->first + (name->second.empty() ? "" : "." + name->second) +
                  " is registered (for foldnorm ops, load libfoldnorm_ops)");
    step.op = *handle;
    const auto& schema = handle->schema();
    std::unordered_map<std::string, const json*> byName;
    for (const auto& in : inputs) byName[in.at("name").get<std::string>()] = &in.at("arg");
    std::size_t used = 0;
    for (const auto& a : schema.arguments()) {
      auto it = byName.find(a.name());
      if (it != byName.end()) {
        step.args.push_back(source(*it->second, step.description));
        auto& c = step.args.back().constant;
        if (a.type()->kind() == c10::TypeKind::TensorType && (c.isInt() || c.isDouble() || c.isBool())) {
          // A Python number where the schema has a Tensor (x + 1.0): a wrapped number, as eager.
          auto t = c.isInt() ? at::scalar_tensor(c.toInt(), at::kLong) : c.isDouble() ? at::scalar_tensor(c.toDouble(), at::kDouble)
                                                                                 : at::scalar_tensor(c.toBool(), at::kBool);
          t.unsafeGetTensorImpl()->set_wrapped_number(true);
          c = t;
        }
        ++used;
        if (a.alias_info() && a.alias_info()->isWrite() && step.args.back().kind == ArgSource::Slot)
          compiled.writtenInputs.insert(step.args.back().slot);
      } else if (a.default_value()) {
        ArgSource s;
        s.constant = *a.default_value();
        step.args.push_back(s);
      } else {
        throw Error(step.description + ": argument '" + a.name() + "' is missing and has no default");
      }
    }
    if (used != byName.size()) throw Error(step.description + ": arguments not in the op's schema " + toString(schema));
    const auto& outs = node.at("outputs");
    if (schema.returns().size() == 1 && outs.size() > 1 &&
        schema.returns()[0].type()->kind() == c10::TypeKind::ListType) {
      OutBinding b;
      b.isList = true;
      for (const auto& o : outs) b.listSlots.push_back(binding(o).slot);
      step.outputs.push_back(b);
    } else if (outs.size() == schema.returns().size()) {
      bindAll();
    } else {
      throw Error(step.description + ": " + std::to_string(outs.size()) + " outputs for an op with " +
                  std::to_string(schema.returns().size()) + " results");
    }
    return step;
  }

  const json& graph_;
  const ExportRunOptions& options_;
  std::unordered_map<std::string, int> slots_;
  std::unordered_set<std::string> defined_;
};

}  // namespace

std::shared_ptr<Compiled> compileGraph(const json& graph, const ExportRunOptions& options) {
  return GraphCompiler(graph, options).compile();
}

}  // namespace export_interp

std::optional<std::pair<std::string, std::string>> dispatcherName(const std::string& target) {
  const std::string prefix = "torch.ops.";
  if (target.rfind(prefix, 0) != 0) return std::nullopt;
  auto rest = target.substr(prefix.size());
  auto first = rest.find('.'), last = rest.rfind('.');
  if (first == std::string::npos || first == last) return std::nullopt;
  auto ns = rest.substr(0, first);
  if (ns == "higher_order") return std::nullopt;
  auto overload = rest.substr(last + 1);
  return std::make_pair(ns + "::" + rest.substr(first + 1, last - first - 1), overload == "default" ? "" : overload);
}

at::ScalarType scalarTypeFromExport(int64_t code) {
  for (const auto& [c, t] : scalarTypeCodes())
    if (c == code) return t;
  throw Error("unknown dtype code " + std::to_string(code) + " in the program");
}

int64_t exportScalarTypeCode(at::ScalarType type) {
  for (const auto& [c, t] : scalarTypeCodes())
    if (t == type) return c;
  throw Error(std::string("dtype ") + c10::toString(type) + " has no torch.export code");
}

}  // namespace foldnorm
