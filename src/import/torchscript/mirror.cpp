// Mirroring a TorchScript module into our Graph: parameters (and tied storage), then every node
// and value, constants folded into values and parameter reads resolved through GetAttr chains.
#include <unordered_map>

#include "foldnorm/torch/ivalue_constant.h"
#include "steps.h"

namespace foldnorm::torchscript {
namespace {

namespace jit = torch::jit;

ValueKind kindOf(const c10::TypePtr& type) {
  using K = c10::TypeKind;
  switch (type->kind()) {
    case K::TensorType: return ValueKind::Tensor;
    case K::IntType: return ValueKind::Int;
    case K::FloatType: return ValueKind::Float;
    case K::BoolType: return ValueKind::Bool;
    case K::StringType: return ValueKind::String;
    case K::DeviceObjType: return ValueKind::Device;
    case K::ScalarTypeType: return ValueKind::ScalarType;
    case K::NoneType: return ValueKind::None;
    case K::TupleType: return ValueKind::Tuple;
    case K::ClassType: return ValueKind::Module;
    case K::ListType: {
      auto elem = type->containedTypes().at(0)->kind();
      if (elem == K::IntType) return ValueKind::IntList;
      if (elem == K::FloatType) return ValueKind::FloatList;
      if (elem == K::BoolType) return ValueKind::BoolList;
      if (elem == K::TensorType) return ValueKind::TensorList;
      return ValueKind::Other;
    }
    default: return ValueKind::Other;
  }
}

/// Module path of the module an inlined node came from, from its call stack (Python traces keep
/// one per submodule call). Empty when the trace kept none.
std::string callstackModulePath(const jit::Node* node) {
  auto cs = node->callstack();
  if (!cs) return {};
  std::string path;
  for (auto& entry : (*cs)->vec()) {
    const auto& info = std::get<2>(entry);
    if (!info) continue;
    auto name = info->instance_name();
    if (name.empty()) continue;
    path += (path.empty() ? "" : ".") + name;
  }
  return path;
}

struct TensorAttribute {
  at::Tensor tensor;
  bool isParameter = false;
};

void collectTensorAttributes(const jit::Module& module, const std::string& prefix,
                             std::map<std::string, TensorAttribute>& out) {
  auto type = module.type();
  for (std::size_t i = 0; i < type->numAttributes(); ++i) {
    const auto& name = type->getAttributeName(i);
    auto value = module._ivalue()->getSlot(i);
    std::string path = prefix.empty() ? name : prefix + "." + name;
    if (value.isTensor()) {
      out[path] = {value.toTensor(), type->is_parameter(i)};
    } else if (value.isObject() && type->getAttribute(i)->kind() == c10::TypeKind::ClassType) {
      auto obj = value.toObject();
      if (obj->type()->is_module()) collectTensorAttributes(jit::Module(obj), path, out);
    }
  }
}


/// Lists of constants (shapes, dims) become constants themselves.
void foldConstantList(Graph& g, Node& n) {
  bool allInts = true, allNumbers = true;
  for (auto in : n.inputs) {
    const auto& c = g.value(in).constant;
    allInts &= c && std::holds_alternative<int64_t>(*c);
    allNumbers &= c && (std::holds_alternative<int64_t>(*c) || std::holds_alternative<double>(*c));
  }
  auto& val = g.value(n.outputs[0]);
  if (allInts && !n.inputs.empty()) {
    std::vector<int64_t> list;
    for (auto in : n.inputs) list.push_back(std::get<int64_t>(*g.value(in).constant));
    val.constant = list;
  } else if (allNumbers && !n.inputs.empty() && val.kind == ValueKind::FloatList) {
    std::vector<double> list;
    for (auto in : n.inputs) list.push_back(*g.constantDouble(in));
    val.constant = list;
  } else if (n.inputs.empty() && val.kind == ValueKind::IntList) {
    val.constant = std::vector<int64_t>{};
  }
}

}  // namespace

std::map<std::string, ParamId> mirrorParameters(const jit::Module& module, Graph& g, TorchModel& tm) {
  std::map<std::string, TensorAttribute> attributes;
  collectTensorAttributes(module, "", attributes);
  std::map<std::string, ParamId> paramByPath;
  for (auto& [path, attr] : attributes) {
    auto param = describeTensor(path, attr.tensor);
    param.isBuffer = !attr.isParameter;
    paramByPath[path] = g.addParameter(std::move(param));
    tm.parameterTensors.push_back(attr.tensor);
  }
  // Tied parameters are one storage under several names (some exporters clone instead: names
  // alone would not tell).
  std::map<const void*, std::vector<ParamId>> byStorage;
  for (ParamId id = 0; id < g.parameters().size(); ++id) {
    const auto& t = tm.parameterTensors[id];
    if (!t.defined() || !t.has_storage() || t.numel() == 0) continue;
    byStorage[t.storage().unsafeGetStorageImpl()].push_back(id);
  }
  std::vector<std::vector<ParamId>> groups;
  for (auto& [storage, ids] : byStorage)
    if (ids.size() > 1) groups.push_back(ids);
  g.setTiedGroups(std::move(groups));
  return paramByPath;
}

ModuleEvidence mirrorNodes(const std::map<std::string, ParamId>& paramByPath, Graph& g, TorchModel& tm) {
  auto& jg = *tm.graph;
  ModuleEvidence evidence;
  // One call (a run of one module instance's forward) per outermost call-stack entry: inlining
  // makes one such entry per call and per callee entry, so the nodes of one call share it and no
  // two calls do (their instance names may be alike: "0" for block[0][0] and block[1][0]).
  std::unordered_map<const void*, std::size_t> callSites;
  auto callSiteOf = [&](const jit::Node* node) -> std::size_t {
    auto cs = node->callstack();
    if (!cs) return kNone;
    return callSites.emplace(cs->get(), callSites.size()).first->second;
  };
  std::unordered_map<const jit::Value*, ValueId> valueIds;
  std::unordered_map<const jit::Value*, std::string> attrPath;  // GetAttr chains from self
  auto addNode = [&](const std::string& kind, const jit::Node* node, std::string callStack,
                     std::string location) {
    auto id = g.addNode(kind, {}, std::move(location));
    g.node(id).origin = tm.nodes.size();
    tm.nodes.push_back(const_cast<jit::Node*>(node));
    evidence.callStackPath.push_back(std::move(callStack));
    evidence.callSite.push_back(callSiteOf(node));
    evidence.attributePath.emplace_back();
    return id;
  };
  auto addValue = [&](NodeId node, const jit::Value* v) {
    auto id = g.addOutput(node, v->debugName(), kindOf(v->type()), v->type()->annotation_str());
    valueIds[v] = id;
    tm.values.push_back(const_cast<jit::Value*>(v));
    return id;
  };

  auto inputNode = addNode("prim::Param", jg.param_node(), {}, {});
  g.setGraphInputNode(inputNode);
  for (std::size_t i = 0; i < jg.inputs().size(); ++i) {
    addValue(inputNode, jg.inputs()[i]);
    if (i == 0) attrPath[jg.inputs()[i]] = "";
  }

  std::size_t constantCount = 0;
  for (auto* node : jg.nodes()) {
    NodeId id = addNode(node->kind().toQualString(), node, callstackModulePath(node), sourceLocation(node));
    for (auto* in : node->inputs()) g.addInput(id, valueIds.at(in));
    for (auto* out : node->outputs()) addValue(id, out);
    auto& n = g.node(id);

    if (node->kind() == c10::prim::Constant && node->outputs().size() == 1) {
      auto* out = node->output();
      auto& val = g.value(n.outputs[0]);
      if (out->type()->kind() == c10::TypeKind::TensorType) {
        auto t = jit::toIValue(out)->toTensor();
        auto param = describeTensor("<constant " + std::to_string(constantCount++) + " " + out->debugName() + ">", t);
        param.isConstant = true;
        param.reads.push_back(val.id);
        val.param = g.addParameter(std::move(param));
        tm.parameterTensors.push_back(t);
      } else if (auto iv = jit::toIValue(out)) {
        val.constant = constantOf(*iv);
      }
    } else if (node->kind() == c10::prim::ListConstruct) {
      foldConstantList(g, n);
    } else if (node->kind() == c10::prim::GetAttr) {
      auto parent = attrPath.find(node->input());
      if (parent == attrPath.end()) continue;
      auto name = node->s(c10::attr::name);
      auto p = parent->second.empty() ? name : parent->second + "." + name;
      attrPath[node->output()] = p;
      auto found = paramByPath.find(p);
      if (found != paramByPath.end()) {
        auto& val = g.value(n.outputs[0]);
        val.param = found->second;
        g.parameter(found->second).reads.push_back(val.id);
        evidence.attributePath[id] = p;
      } else if (node->output()->type()->kind() == c10::TypeKind::ClassType) {
        evidence.attributePath[id] = p;
      }
    }
  }
  auto ret = addNode("prim::Return", jg.return_node(), {}, {});
  g.setReturnNode(ret);
  for (auto* out : jg.outputs()) g.addInput(ret, valueIds.at(out));
  return evidence;
}

}  // namespace foldnorm::torchscript
