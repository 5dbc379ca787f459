// TorchScript (.pt) -> foldnorm::Graph.
//
// Steps: load (classifying failures into user errors), inline the forward, reject control flow,
// mirror every node and value into our Graph (constants folded into values, parameters resolved
// through GetAttr chains, tied storage grouped), then record concrete shapes by running a copy of
// the graph whose every tensor value is an extra output.
#include <ATen/CPUGeneratorImpl.h>
#include <torch/csrc/jit/api/function_impl.h>
#include <torch/csrc/jit/ir/irparser.h>
#include <torch/csrc/jit/passes/inliner.h>
#include <torch/csrc/jit/runtime/graph_executor.h>
#include <caffe2/serialize/inline_container.h>
#include <torch/csrc/jit/serialization/import.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <set>
#include <unordered_map>

#include "foldnorm/common/error.h"
#include "foldnorm/torch/torch_model.h"

namespace foldnorm {
namespace {

namespace jit = torch::jit;

std::string firstLine(const std::string& s) {
  auto nl = s.find('\n');
  return nl == std::string::npos ? s : s.substr(0, nl);
}

std::string sourceLocation(const jit::Node* node) {
  auto range = node->sourceRange();
  if (auto original = range.findSourceRangeThatGenerated()) range = *original;
  auto flc = range.file_line_col();
  if (!flc) return {};
  auto [file, line, col] = *flc;
  (void)col;
  if (file.empty()) return {};
  return std::filesystem::path(file).filename().string() + ":" + std::to_string(line);
}

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

/// Failures of torch::jit::load, said in the user's terms.
[[noreturn]] void throwLoadError(const std::string& path, const std::string& archive, const c10::Error& e) {
  std::string msg = e.what_without_backtrace();
  // A readable zip without TorchScript code: a torch.save file (state dict, pickled tensors or a
  // pickled nn.Module), which jit::load reports as a corrupted checkpoint.
  try {
    std::istringstream in(archive);
    caffe2::serialize::PyTorchStreamReader reader(&in);
    bool code = false, data = false;
    for (const auto& r : reader.getAllRecords()) {
      code = code || r.rfind("code/", 0) == 0;
      data = data || r == "data.pkl";
    }
    if (!code && data)
      throw Error("'" + path + "' is a torch.save file (pickled tensors, a state dict or a pickled "
                  "module), not a TorchScript module: save the model with "
                  "torch.jit.trace(model, example_inputs).save(path)");
  } catch (const c10::Error&) {
    // not even a readable zip: the messages below say so
  }
  // Any message below quotes only the first line of LibTorch's.
  if (msg.find("central directory") != std::string::npos ||
      msg.find("failed reading zip archive") != std::string::npos ||
      msg.find("file in archive is not in a subdirectory") != std::string::npos)
    throw Error("'" + path + "' is not a TorchScript archive (no readable zip directory: not a "
                "torch.jit.save file, or truncated)");
  if (msg.find("istream reader failed") != std::string::npos)
    throw Error("'" + path + "' is a truncated or damaged TorchScript archive (" +
                std::to_string(archive.size()) + " bytes; the zip ends early): " + firstLine(msg));
  if (msg.find("PytorchStreamReader") != std::string::npos || msg.find("crc") != std::string::npos)
    throw Error("'" + path + "' is a damaged or truncated TorchScript archive: " + firstLine(msg));
  if (msg.find("constants.pkl") != std::string::npos || msg.find("code/") != std::string::npos ||
      msg.find("not found") != std::string::npos)
    throw Error("'" + path + "' is a PyTorch archive but not a TorchScript module (was it saved "
                "with torch.save instead of torch.jit.save?): " + firstLine(msg));
  throw Error("cannot load '" + path + "' as TorchScript: " + firstLine(msg));
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

std::string commonModulePrefix(const std::string& a, const std::string& b) {
  if (a == b) return a;
  std::size_t i = 0, lastDot = 0;
  while (i < a.size() && i < b.size() && a[i] == b[i]) {
    if (a[i] == '.') lastDot = i;
    ++i;
  }
  bool aEnds = i == a.size() && (i == b.size() || b[i] == '.');
  bool bEnds = i == b.size() && (i == a.size() || a[i] == '.');
  if (aEnds) return a;
  if (bEnds) return b;
  return a.substr(0, lastDot);
}

std::string parentModule(const std::string& paramPath) {
  auto dot = paramPath.rfind('.');
  return dot == std::string::npos ? std::string{} : paramPath.substr(0, dot);
}

void rejectUnsupported(const jit::Graph& graph) {
  for (auto* node : graph.nodes()) {
    auto kind = node->kind();
    bool controlFlow = !node->blocks().empty() || kind == c10::prim::If || kind == c10::prim::Loop;
    bool call = kind == c10::prim::CallFunction || kind == c10::prim::CallMethod;
    bool python = kind == c10::prim::PythonOp;
    if (!controlFlow && !call && !python) continue;
    auto where = sourceLocation(node);
    std::string what = controlFlow ? "control flow (" + std::string(kind.toQualString()) +
                                         ", from scripted code)"
                       : call      ? "a call that could not be inlined (" +
                                    std::string(kind.toQualString()) + ")"
                                   : "a Python op (prim::PythonOp)";
    throw Error("unsupported model: " + what + (where.empty() ? "" : " at " + where) +
                "; foldnorm reads traced modules without control flow: trace the model with "
                "torch.jit.trace");
  }
}

at::ScalarType scalarTypeOf(const std::string& dtype) {
  if (dtype == "float32") return at::kFloat;
  if (dtype == "float64") return at::kDouble;
  if (dtype == "float16") return at::kHalf;
  if (dtype == "bfloat16") return at::kBFloat16;
  if (dtype == "int64") return at::kLong;
  if (dtype == "int32") return at::kInt;
  if (dtype == "bool") return at::kBool;
  throw Error("unknown dtype " + dtype);
}

void flattenTensors(const c10::IValue& iv, std::vector<at::Tensor>& out) {
  if (iv.isTensor()) out.push_back(iv.toTensor());
  else if (iv.isTuple())
    for (const auto& e : iv.toTupleRef().elements()) flattenTensors(e, out);
  else if (iv.isList())
    for (const auto& e : iv.toListRef()) flattenTensors(e, out);
  else if (iv.isGenericDict())
    for (const auto& kv : iv.toGenericDict()) flattenTensors(kv.value(), out);
}

struct TensorAttribute {
  at::Tensor tensor;
  bool isParameter = false;
  bool isBuffer = false;
};

void collectTensorAttributes(const jit::Module& module, const std::string& prefix,
                             std::map<std::string, TensorAttribute>& out) {
  auto type = module.type();
  for (std::size_t i = 0; i < type->numAttributes(); ++i) {
    const auto& name = type->getAttributeName(i);
    auto value = module._ivalue()->getSlot(i);
    std::string path = prefix.empty() ? name : prefix + "." + name;
    if (value.isTensor()) {
      out[path] = {value.toTensor(), type->is_parameter(i), type->is_buffer(i)};
    } else if (value.isObject() && type->getAttribute(i)->kind() == c10::TypeKind::ClassType) {
      auto obj = value.toObject();
      if (obj->type()->is_module()) collectTensorAttributes(jit::Module(obj), path, out);
    }
  }
}

}  // namespace

std::string dtypeName(at::ScalarType type) {
  switch (type) {
    case at::kFloat: return "float32";
    case at::kDouble: return "float64";
    case at::kHalf: return "float16";
    case at::kBFloat16: return "bfloat16";
    case at::kLong: return "int64";
    case at::kInt: return "int32";
    case at::kShort: return "int16";
    case at::kChar: return "int8";
    case at::kByte: return "uint8";
    case at::kBool: return "bool";
    default: return c10::toString(type);
  }
}

std::vector<at::Tensor> makeInputs(const std::vector<InputSpec>& specs, uint64_t seed) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed + 0x5eed);
  std::vector<at::Tensor> out;
  for (const auto& spec : specs) {
    auto type = scalarTypeOf(spec.dtype);
    auto opts = at::TensorOptions().dtype(type);
    at::Tensor t;
    if (spec.isFloating()) {
      if (spec.low && spec.high)
        t = at::empty(spec.shape, opts.dtype(at::kDouble)).uniform_(*spec.low, *spec.high, gen).to(type);
      else
        t = at::randn(spec.shape, gen, opts.dtype(at::kDouble)).to(type);
    } else {
      int64_t lo = spec.low ? static_cast<int64_t>(*spec.low) : 0;
      int64_t hi = spec.high ? static_cast<int64_t>(*spec.high) : 2;
      t = at::randint(lo, hi, spec.shape, gen, opts.dtype(at::kLong)).to(type);
    }
    out.push_back(t);
  }
  return out;
}

std::vector<at::Tensor> runGraph(const torch::jit::Module& module,
                                 const std::shared_ptr<torch::jit::Graph>& graph,
                                 const std::vector<at::Tensor>& inputs) {
  jit::GraphOptimizerEnabledGuard noOptimize(false);
  jit::GraphFunction fn("foldnorm_run", graph->copy(), nullptr);
  jit::Stack stack;
  stack.emplace_back(module._ivalue());
  for (const auto& t : inputs) stack.emplace_back(t);
  fn.run(stack);
  std::vector<at::Tensor> out;
  for (const auto& iv : stack) flattenTensors(iv, out);
  return out;
}

std::shared_ptr<torch::jit::Graph> inlinedForward(const torch::jit::Module& module) {
  auto method = module.find_method("forward");
  if (!method) throw Error("the module has no forward method");
  auto graph = jit::toGraphFunction(method->function()).graph()->copy();
  jit::Inline(*graph);
  return graph;
}

torch::jit::Module freshCopy(const TorchModel& model) {
  if (model.makeCopy) return model.makeCopy();
  std::istringstream in(*model.archive);
  return jit::load(in, c10::Device(c10::kCPU));
}

ImportedModel importModule(torch::jit::Module module, std::shared_ptr<const std::string> archive,
                           std::string path, std::vector<InputSpec> specs, bool specFromModel,
                           const ImportOptions& options) {
  auto progress = [&](const std::string& msg) {
    if (options.progress) options.progress(msg);
  };
  module.eval();
  auto tm = std::make_shared<TorchModel>();
  tm->module = module;
  tm->archive = std::move(archive);
  tm->graph = inlinedForward(module);
  rejectUnsupported(*tm->graph);
  auto& jg = *tm->graph;

  ImportedModel result;
  result.path = std::move(path);
  result.specFromModel = specFromModel;
  Graph& g = result.graph;

  // ---- parameters and tied groups ----
  std::map<std::string, TensorAttribute> attributes;
  collectTensorAttributes(module, "", attributes);
  std::map<std::string, ParamId> paramByPath;
  for (auto& [p, attr] : attributes) {
    Parameter param;
    param.path = p;
    param.isBuffer = !attr.isParameter;
    param.shape = attr.tensor.sizes().vec();
    param.dtype = dtypeName(attr.tensor.scalar_type());
    param.bytes = static_cast<int64_t>(attr.tensor.numel() * attr.tensor.element_size());
    paramByPath[p] = g.addParameter(std::move(param));
    tm->parameterTensors.push_back(attr.tensor);
  }
  {
    std::map<const void*, std::vector<ParamId>> byStorage;
    for (ParamId id = 0; id < g.parameters().size(); ++id) {
      const auto& t = tm->parameterTensors[id];
      if (!t.defined() || !t.has_storage() || t.numel() == 0) continue;
      byStorage[t.storage().unsafeGetStorageImpl()].push_back(id);
    }
    std::vector<std::vector<ParamId>> groups;
    for (auto& [storage, ids] : byStorage)
      if (ids.size() > 1) groups.push_back(ids);
    g.setTiedGroups(std::move(groups));
  }

  // ---- nodes and values ----
  std::unordered_map<const jit::Value*, ValueId> valueIds;
  std::unordered_map<const jit::Value*, std::string> attrPath;  // GetAttr chains from self
  auto addValue = [&](NodeId node, const jit::Value* v) {
    auto id = g.addOutput(node, v->debugName(), kindOf(v->type()), v->type()->annotation_str());
    valueIds[v] = id;
    tm->values.push_back(const_cast<jit::Value*>(v));
    return id;
  };
  auto inputNode = g.addNode("prim::Param");
  g.setGraphInputNode(inputNode);
  tm->nodes.push_back(jg.param_node());
  g.node(inputNode).origin = 0;
  for (std::size_t i = 0; i < jg.inputs().size(); ++i) {
    auto* v = jg.inputs()[i];
    addValue(inputNode, v);
    if (i == 0) attrPath[v] = "";
  }

  std::size_t constantCount = 0;
  for (auto* node : jg.nodes()) {
    NodeId id = g.addNode(node->kind().toQualString(), callstackModulePath(node), sourceLocation(node));
    g.node(id).origin = tm->nodes.size();
    tm->nodes.push_back(node);
    for (auto* in : node->inputs()) g.addInput(id, valueIds.at(in));
    for (auto* out : node->outputs()) addValue(id, out);
    auto& n = g.node(id);

    if (node->kind() == c10::prim::Constant && node->outputs().size() == 1) {
      auto* out = node->output();
      auto& val = g.value(n.outputs[0]);
      if (out->type()->kind() == c10::TypeKind::TensorType) {
        auto t = jit::toIValue(out)->toTensor();
        Parameter param;
        param.path = "<constant " + std::to_string(constantCount++) + " " + out->debugName() + ">";
        param.isConstant = true;
        param.shape = t.sizes().vec();
        param.dtype = dtypeName(t.scalar_type());
        param.bytes = static_cast<int64_t>(t.numel() * t.element_size());
        param.reads.push_back(val.id);
        val.param = g.addParameter(std::move(param));
        tm->parameterTensors.push_back(t);
      } else if (auto iv = jit::toIValue(out)) {
        val.constant = constantOf(*iv);
      }
    } else if (node->kind() == c10::prim::ListConstruct) {
      // Lists of constants (shapes, dims) become constants themselves.
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
    } else if (node->kind() == c10::prim::GetAttr) {
      auto parent = attrPath.find(node->input());
      if (parent != attrPath.end()) {
        auto name = node->s(c10::attr::name);
        auto p = parent->second.empty() ? name : parent->second + "." + name;
        attrPath[node->output()] = p;
        auto found = paramByPath.find(p);
        if (found != paramByPath.end()) {
          auto& val = g.value(n.outputs[0]);
          val.param = found->second;
          g.parameter(found->second).reads.push_back(val.id);
          if (n.modulePath.empty()) n.modulePath = parentModule(p);
        } else if (n.modulePath.empty() && node->output()->type()->kind() == c10::TypeKind::ClassType) {
          n.modulePath = p;
        }
      }
    }
  }
  auto ret = g.addNode("prim::Return");
  g.setReturnNode(ret);
  g.node(ret).origin = tm->nodes.size();
  tm->nodes.push_back(jg.return_node());
  for (auto* out : jg.outputs()) g.addInput(ret, valueIds.at(out));

  // ---- module paths where the trace kept no call stack (C++ traces) ----
  // A node that reads parameters belongs to their module; other nodes to the deepest module
  // shared by their nearest annotated neighbours (gelu between mlp.c_fc and mlp.c_proj -> mlp).
  {
    auto order = g.topologicalOrder();
    std::vector<bool> fromStack(g.nodeCount());
    for (auto& n : g.nodes()) fromStack[n.id] = !n.modulePath.empty() && n.kind != "prim::GetAttr";
    std::vector<std::string> paramModule(g.nodeCount());
    bool haveStacks = false;
    for (auto& n : g.nodes()) {
      if (fromStack[n.id]) haveStacks = true;
      for (auto in : n.inputs) {
        const auto& v = g.value(in);
        if (v.param == kNone || g.parameter(v.param).isConstant) continue;
        auto m = parentModule(g.parameter(v.param).path);
        paramModule[n.id] = paramModule[n.id].empty() ? m : commonModulePrefix(paramModule[n.id], m);
      }
    }
    if (haveStacks) {
      // Call stacks name module instances but skip containers without a forward (ModuleList,
      // Sequential used by index): "transformer.0.ln_1" for transformer.h.0.ln_1. A node that reads
      // parameters knows the true path; learn the renaming from those, parents included.
      std::map<std::string, std::string> canonical;
      auto split = [](const std::string& p) {
        std::vector<std::string> parts;
        std::size_t start = 0;
        while (true) {
          auto dot = p.find('.', start);
          parts.push_back(p.substr(start, dot == std::string::npos ? std::string::npos : dot - start));
          if (dot == std::string::npos) return parts;
          start = dot + 1;
        }
      };
      for (auto& n : g.nodes()) {
        if (!fromStack[n.id] || paramModule[n.id].empty()) continue;
        // The call-stack names are a subsequence of the parameter path's: match them from the left,
        // each call-stack prefix maps to the parameter-path prefix ending at its match.
        auto cs = split(n.modulePath), ps = split(paramModule[n.id]);
        std::size_t j = 0;
        std::string cp, pm;
        for (std::size_t i = 0; i < cs.size(); ++i) {
          while (j < ps.size() && ps[j] != cs[i]) pm += (pm.empty() ? "" : ".") + ps[j++];
          if (j == ps.size()) break;
          pm += (pm.empty() ? "" : ".") + ps[j++];
          cp += (cp.empty() ? "" : ".") + cs[i];
          canonical.emplace(cp, pm);
        }
      }
      for (NodeId id = 0; id < g.nodeCount(); ++id) {
        auto& n = g.node(id);
        if (!fromStack[id]) continue;
        std::string prefix = n.modulePath, rest;
        while (!prefix.empty()) {
          auto it = canonical.find(prefix);
          if (it != canonical.end()) { n.modulePath = it->second + rest; break; }
          auto dot = prefix.rfind('.');
          if (dot == std::string::npos) break;
          rest = prefix.substr(dot) + rest;
          prefix = prefix.substr(0, dot);
        }
      }
    }
    if (!haveStacks) {
      std::vector<std::optional<std::string>> below(g.nodeCount()), above(g.nodeCount());
      auto isData = [&](const Node& n) {
        return n.kind != "prim::GetAttr" && n.kind != "prim::Constant" && n.kind != "prim::Param" &&
               n.kind != "prim::Return";
      };
      // The nearest annotated ancestor is taken through the most recent producer (the latest in
      // topological order), the nearest descendant through the first consumer: a residual add
      // of block 1 reads the stream (from block 0) and block 1's projection, and feeds block
      // 1's LN, so it belongs to block 1, not to the common parent of all three. Shape
      // arithmetic (ints) is no producer of data.
      std::vector<std::size_t> position(g.nodeCount(), 0);
      for (std::size_t i = 0; i < order.size(); ++i) position[order[i]] = i;
      auto carriesData = [&](NodeId from, NodeId to) {
        for (auto out : g.node(from).outputs)
          if (g.value(out).kind != ValueKind::Int && g.value(out).kind != ValueKind::IntList)
            for (auto in : g.node(to).inputs)
              if (in == out) return true;
        return false;
      };
      // A consumer that only reads sizes (aten::size and the int arithmetic after it) says
      // nothing about where a tensor belongs.
      auto isDataConsumer = [&](NodeId s) {
        const auto& k = g.node(s).kind;
        if (k == "aten::size" || k == "aten::Int" || k == "prim::NumToTensor" || k == "aten::ScalarImplicit" ||
            k == "aten::dim" || k == "aten::numel")
          return false;
        for (auto out : g.node(s).outputs)
          if (g.value(out).kind != ValueKind::Int && g.value(out).kind != ValueKind::IntList) return true;
        return g.node(s).kind == "prim::Return";
      };
      for (auto id : order) {  // nearest annotated ancestor, through the latest producer
        if (!isData(g.node(id))) continue;
        if (!paramModule[id].empty()) { above[id] = paramModule[id]; continue; }
        std::optional<NodeId> latest;
        for (auto p : g.predecessors(id))
          if (above[p] && carriesData(p, id) && (!latest || position[p] > position[*latest])) latest = p;
        // A tensor made from shape arithmetic only (a mask built from sizes) has no producer of
        // data: it takes its module from its consumers alone.
        if (latest) above[id] = above[*latest];
      }
      for (auto it = order.rbegin(); it != order.rend(); ++it) {  // through the first consumer
        auto id = *it;
        if (!isData(g.node(id))) continue;
        if (!paramModule[id].empty()) { below[id] = paramModule[id]; continue; }
        std::optional<NodeId> first;
        for (auto s : g.successors(id))
          if (below[s] && isDataConsumer(s) && (!first || position[s] < position[*first])) first = s;
        if (first) below[id] = below[*first];
      }
      for (NodeId id = 0; id < g.nodeCount(); ++id) {
        auto& n = g.node(id);
        if (!isData(n)) continue;
        if (!paramModule[n.id].empty()) n.modulePath = paramModule[n.id];
        else if (above[n.id] && below[n.id]) {
          // Between two blocks (block 0's last residual add feeds block 1's LN) the common prefix
          // is the block list; the op was computed by its producer's block: no higher than the
          // producer's grandparent (h.0.mlp.c_proj -> h.0).
          auto common = commonModulePrefix(*above[n.id], *below[n.id]);
          auto grandparent = parentModule(parentModule(*above[n.id]));
          n.modulePath = common.size() < grandparent.size() ? grandparent : common;
        }
        else if (above[n.id]) n.modulePath = parentModule(*above[n.id]);
        else if (below[n.id]) n.modulePath = parentModule(*below[n.id]);
      }
    }
  }

  // ---- example inputs ----
  auto modelInputs = g.modelInputs();
  for (std::size_t i = 0; i < modelInputs.size(); ++i) {
    const auto& v = g.value(modelInputs[i]);
    if (v.kind != ValueKind::Tensor)
      throw Error("model input " + std::to_string(i + 1) + " ('" + v.name + "') is of type " +
                  v.typeName + "; foldnorm feeds tensors only");
  }
  if (specs.empty() && !modelInputs.empty())
    throw Error("no input spec: the model carries none (extra file " +
                std::string(kInputSpecExtraFile) + "); give one --input per model input (" +
                std::to_string(modelInputs.size()) + "), e.g. --input 2x16:int64[0,1000)");
  if (specs.size() != modelInputs.size()) {
    std::string names;
    for (auto v : modelInputs) names += (names.empty() ? "" : ", ") + g.value(v).name;
    throw Error("the model takes " + std::to_string(modelInputs.size()) + " input(s) (" + names +
                ") but " + std::to_string(specs.size()) + " input spec(s) were given");
  }
  result.inputSpecs = specs;
  tm->exampleInputs = makeInputs(specs, options.seed);

  // ---- shape recording: every tensor value of a copy becomes an output ----
  progress("recording shapes (one run on the example inputs)");
  {
    auto copy = jg.copy();
    std::vector<jit::Value*> copied;  // ValueId -> value of copy
    copied.reserve(g.valueCount());
    for (auto* v : copy->inputs()) copied.push_back(v);
    for (auto* node : copy->nodes())
      for (auto* v : node->outputs()) copied.push_back(v);
    if (copied.size() != g.valueCount()) throw std::logic_error("graph copy changed its values");
    std::vector<ValueId> recorded;
    std::vector<jit::Value*> outs;
    for (ValueId id = 0; id < g.valueCount(); ++id)
      if (g.value(id).kind == ValueKind::Tensor) {
        recorded.push_back(id);
        outs.push_back(copied[id]);
      }
    auto* tuple = copy->insertNode(copy->createTuple(outs));
    while (!copy->outputs().empty()) copy->eraseOutput(0);
    copy->registerOutput(tuple->output());
    std::vector<at::Tensor> values;
    try {
      values = runGraph(module, copy, tm->exampleInputs);
    } catch (const std::exception& e) {  // c10::Error, and JITException (a runtime_error)
      std::string spec;
      for (auto& s : specs) spec += (spec.empty() ? "" : " ") + s.toString();
      const auto* c10Error = dynamic_cast<const c10::Error*>(&e);
      std::string what = c10Error ? c10Error->what_without_backtrace() : e.what();
      auto pos = what.find("RuntimeError: ");
      if (pos != std::string::npos) what = what.substr(pos + 14);
      throw Error("running the model on the example inputs failed; does the input spec (" + spec +
                  ") match the model? " + firstLine(what));
    }
    if (values.size() != recorded.size()) throw std::logic_error("shape recording lost values");
    for (std::size_t i = 0; i < recorded.size(); ++i) {
      const auto& t = values[i];
      if (!t.defined()) continue;
      g.value(recorded[i]).tensor = TensorInfo{t.sizes().vec(), dtypeName(t.scalar_type())};
    }
    for (auto out : g.modelOutputs()) {
      // Outputs are tensors or tuples/lists built in the graph; flatten like runGraph does.
      std::function<void(ValueId)> collect = [&](ValueId v) {
        const auto& val = g.value(v);
        if (val.kind == ValueKind::Tensor) {
          auto pos = std::find(recorded.begin(), recorded.end(), v) - recorded.begin();
          tm->exampleOutputs.push_back(values.at(pos));
        } else if (val.producer != kNone) {
          const auto& p = g.node(val.producer);
          if (p.kind == "prim::TupleConstruct" || p.kind == "prim::ListConstruct")
            for (auto in : p.inputs) collect(in);
        }
      };
      collect(out);
    }
  }
  result.torch = tm;
  return result;
}

ImportedModel importTorchScript(const std::string& path, const ImportOptions& options) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::exists(path, ec)) throw Error("no such file: '" + path + "'");
  if (fs::is_directory(path, ec)) throw Error("'" + path + "' is a directory, not a .pt file");
  {
    std::ifstream probe(path, std::ios::binary);
    if (!probe) throw Error("cannot read '" + path + "' (permission?)");
  }
  if (options.progress) options.progress("loading " + path);
  jit::ExtraFilesMap extra{{kInputSpecExtraFile, ""}};
  jit::Module module;
  auto archive = std::make_shared<std::string>();
  {
    std::ifstream file(path, std::ios::binary);
    archive->assign(std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>());
  }
  // torch.jit.save writes a zip archive: anything else is said plainly, before LibTorch's
  // stream reader reports it as "getting the current position".
  if (archive->size() < 22 || archive->compare(0, 4, "PK\x03\x04") != 0)
    throw Error("'" + path + "' is not a TorchScript archive (" + std::to_string(archive->size()) +
                " bytes, not a zip file; torch.jit.save writes a zip archive)");
  try {
    std::istringstream in(*archive);
    module = jit::load(in, c10::Device(c10::kCPU), extra);
  } catch (const c10::Error& e) {
    throwLoadError(path, *archive, e);
  }
  std::vector<InputSpec> specs = options.inputs;
  bool fromModel = false;
  if (specs.empty() && !extra[kInputSpecExtraFile].empty()) {
    specs = inputSpecsFromJson(extra[kInputSpecExtraFile]);
    fromModel = true;
  }
  if (options.progress) options.progress("importing the forward graph");
  return importModule(std::move(module), std::move(archive), path, std::move(specs), fromModel, options);
}

namespace {
jit::Module buildIrModule(const IrModel& model, uint64_t seed) {
  auto graph = std::make_shared<jit::Graph>();
  try {
    jit::parseIR(model.ir, graph.get());
  } catch (const std::exception& e) {
    throw Error(std::string("cannot parse IR: ") + firstLine(e.what()));
  }
  // A module whose parameters are the named graph inputs; `self` is prepended.
  jit::Module module("__torch__.foldnorm.IrModel");
  std::map<std::string, jit::Module> submodules;
  std::function<jit::Module(const std::string&)> moduleAt = [&](const std::string& path) -> jit::Module {
    if (path.empty()) return module;
    auto it = submodules.find(path);
    if (it != submodules.end()) return it->second;
    auto parent = moduleAt(parentModule(path));
    auto name = path.substr(path.rfind('.') == std::string::npos ? 0 : path.rfind('.') + 1);
    jit::Module sub("__torch__.foldnorm.IrModel_" + std::to_string(submodules.size()));
    parent.register_module(name, sub);
    submodules.emplace(path, sub);
    return sub;
  };
  auto* self = graph->insertInput(0, "self");
  self->setType(module.type());
  std::vector<std::size_t> paramInputs;
  for (std::size_t i = 1; i < graph->inputs().size(); ++i) {
    auto* in = graph->inputs()[i];
    auto spec = std::find_if(model.parameters.begin(), model.parameters.end(),
                             [&](const auto& p) { return p.first == in->debugName(); });
    if (spec == model.parameters.end()) continue;
    std::string path = spec->first;
    for (std::size_t pos; (pos = path.find("__")) != std::string::npos;) path.replace(pos, 2, ".");
    auto owner = moduleAt(parentModule(path));
    auto leaf = path.substr(path.rfind('.') == std::string::npos ? 0 : path.rfind('.') + 1);
    auto t = makeInputs({spec->second}, seed + i).at(0);
    owner.register_parameter(leaf, t, false);
    // Replace the input by a GetAttr chain from self.
    graph->setInsertPoint(graph->block()->nodes().front());
    jit::Value* cur = self;
    std::string prefix;
    std::size_t start = 0;
    while (true) {
      auto dot = path.find('.', start);
      auto name = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
      prefix = prefix.empty() ? name : prefix + "." + name;
      auto* getattr = graph->insertNode(graph->createGetAttr(cur, name));
      if (dot == std::string::npos) getattr->output()->setType(c10::TensorType::get());
      else getattr->output()->setType(moduleAt(prefix).type());
      cur = getattr->output();
      if (dot == std::string::npos) break;
      start = dot + 1;
    }
    in->replaceAllUsesWith(cur);
    paramInputs.push_back(i);
  }
  for (auto it = paramInputs.rbegin(); it != paramInputs.rend(); ++it) graph->eraseInput(*it);
  auto fn = module.type()->compilation_unit()->create_function(
      c10::QualifiedName(*module.type()->name(), "forward"), graph);
  module.type()->addMethod(fn);
  return module;
}
}  // namespace

ImportedModel importIrModel(const IrModel& model, uint64_t seed) {
  ImportOptions options;
  options.seed = seed;
  auto module = buildIrModule(model, seed);
  // Fresh copies are built again from the IR (same seed, same graph, node for node); a save/load
  // round trip would re-print IR int arithmetic as tensor ops.
  auto result = importModule(module, nullptr, "<ir>", model.inputs, false, options);
  result.torch->makeCopy = [model, seed] { return buildIrModule(model, seed); };
  return result;
}

}  // namespace foldnorm
