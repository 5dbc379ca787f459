// The walk over the program: placeholders (user inputs, lifted parameters, buffers, constants),
// each node by its kind (op overload, higher-order op, symbolic scalar arithmetic), the return.
#include <ATen/core/dispatch/Dispatcher.h>

#include <set>
#include <sstream>

#include "export_steps.h"
#include "foldnorm/common/error.h"
#include "foldnorm/import/export.h"
#include "foldnorm/import/export_archive.h"
#include "foldnorm/torch/ivalue_constant.h"
#include "program.h"

namespace foldnorm::export_detail {
namespace {

using nlohmann::json;

const json& field(const json& j, const char* key, const std::string& where) {
  if (!j.is_object() || !j.contains(key)) throw Error(where + " has no \"" + key + "\" (a damaged program?)");
  return j[key];
}

/// Asserts on metadata and ranges: no outputs, no effect on any value.
bool isAssertion(const OpTarget& t) {
  return t.ns == "aten" && (t.name.rfind("_assert", 0) == 0 || t.name == "sym_constrain_range" ||
                            t.name == "sym_constrain_range_for_size" || t.name == "_functional_assert_async" ||
                            t.name == "_functional_sym_constrain_range");
}

/// Every value name an argument (or output) refers to: tensors ("name") and symbols ("as_name"),
/// in lists and optionals too; not into a higher-order op's subgraph ("as_graph"), whose names
/// are its own.
void namesIn(const json& j, std::set<std::string>& out) {
  if (j.is_object()) {
    for (const auto& [key, v] : j.items()) {
      if (key == "as_graph") continue;
      if ((key == "name" || key == "as_name") && v.is_string()) out.insert(v.get<std::string>());
      else namesIn(v, out);
    }
  } else if (j.is_array()) {
    for (const auto& v : j) namesIn(v, out);
  }
}

/// An op node that must run whatever reads its results: one that writes into an argument
/// (in-place, out=, a write through a view: the written tensor is read later under another
/// name), one without results, or one whose schema this LibTorch does not know.
bool hasEffect(const json& n) {
  const auto t = parseTarget(n.value("target", std::string{}));
  if (!t.isOp()) return false;  // Python scalar arithmetic on sizes
  if (!n.contains("outputs") || n["outputs"].empty()) return true;
  const auto handle = c10::Dispatcher::singleton().findSchema(
      c10::OperatorName(t.kind(), t.overload == "default" ? "" : t.overload));
  if (!handle) return true;
  for (const auto& a : handle->schema().arguments())
    if (a.alias_info() && a.alias_info()->isWrite()) return true;
  return false;
}

/// Which nodes of `graph` (one level: a subgraph is its own graph) are imported: an effect, a
/// higher-order op (its subgraph gets its own pass), a LayerNorm, or a node whose results an
/// imported node or the graph's outputs read. An exported program keeps every op the forward
/// ran, read or not, where a trace mostly has none (the tracer eliminates dead code): a dead
/// reader of a stream (a linear whose result nothing reads) made a centering look unsafe in the
/// .pt2 that its trace folds. LayerNorms stay, read or not: each is a call the eager forward
/// makes and gets a verdict (DPT's final LayerNorm, which nothing reads: its trace drops it).
std::vector<bool> liveNodes(const json& graph) {
  const auto& list = field(graph, "nodes", "a graph");
  std::set<std::string> needed;
  namesIn(field(graph, "outputs", "a graph"), needed);
  std::vector<bool> live(list.size(), false);
  for (std::size_t i = list.size(); i-- > 0;) {
    const auto& n = list[i];
    const auto t = parseTarget(n.value("target", std::string{}));
    bool keep = t.ns == "higher_order" || hasEffect(n) ||
                (t.ns == "aten" && (t.name == "layer_norm" || t.name == "native_layer_norm"));
    if (!keep) {
      std::set<std::string> produced;
      namesIn(n.contains("outputs") ? n["outputs"] : json::array(), produced);
      for (const auto& name : produced) keep = keep || needed.count(name);
    }
    if (!keep) continue;
    live[i] = true;
    if (n.contains("inputs"))
      for (const auto& in : n["inputs"]) namesIn(in.contains("arg") ? in["arg"] : in, needed);
  }
  return live;
}

}  // namespace

void ProgramImporter::placeholders(const json& gm) {
  const auto& graph = field(gm, "graph", "graph_module");
  const auto& specs = field(field(gm, "signature", "graph_module"), "input_specs", "graph_module.signature");
  const auto& inputs = field(graph, "inputs", "graph_module.graph");
  if (specs.size() != inputs.size())
    throw Error("the program has " + std::to_string(inputs.size()) + " inputs but " + std::to_string(specs.size()) +
                " input specs (a damaged program?)");
  // How each archive tensor is used decides buffer/constant; ParamId i is archive_.tensors[i].
  std::map<std::string, std::string> usedAs;
  for (const auto& s : specs)
    if (s.is_object() && s.size() == 1) {
      const auto& [kind, v] = *s.items().begin();
      if (kind == "parameter") usedAs[v.value("parameter_name", "")] = kind;
      if (kind == "buffer") usedAs[v.value("buffer_name", "")] = kind;
      if (kind == "tensor_constant") usedAs[v.value("tensor_constant_name", "")] = kind;
    }
  std::map<std::string, ParamId> byName;
  for (const auto& t : archive_.tensors) {
    Parameter p = describeTensor(t.name, t.tensor);
    const auto use = usedAs.count(t.name) ? usedAs[t.name] : std::string(t.isParameter ? "parameter" : "buffer");
    p.isConstant = use == "tensor_constant";
    p.isBuffer = use == "buffer";
    byName[t.name] = g_.addParameter(std::move(p));
  }
  model_.placeholders.assign(archive_.tensors.size(), {});
  std::vector<std::vector<ParamId>> tied;
  for (const auto& group : archive_.sharedStorage()) {
    std::vector<ParamId> ids;
    for (auto i : group)
      if (archive_.tensors[i].tensor.numel() > 0) ids.push_back(i);
    if (ids.size() > 1) tied.push_back(ids);
  }
  g_.setTiedGroups(std::move(tied));

  auto param = addNode("prim::Param", {}, {}, nullptr);
  g_.setGraphInputNode(param);
  for (std::size_t i = 0; i < specs.size(); ++i) {
    const auto& s = specs[i];
    const auto where = "input spec " + std::to_string(i);
    if (!s.is_object() || s.size() != 1) throw Error(where + " is not a one-key union (a damaged program?)");
    const auto& [kind, v] = *s.items().begin();
    if (kind == "parameter" || kind == "buffer" || kind == "tensor_constant") {
      const auto name = field(field(v, "arg", where), "name", where).get<std::string>();
      const auto fqn = v.value(kind == "parameter" ? "parameter_name" : kind == "buffer" ? "buffer_name"
                                                                                          : "tensor_constant_name",
                               std::string{});
      auto found = byName.find(fqn);
      if (found == byName.end())
        throw Error("the program's " + kind + " '" + fqn + "' (placeholder " + name +
                    ") is in neither the weights nor the constants config (a damaged archive?)");
      auto node = addNode(kind == "tensor_constant" ? "prim::Constant" : "prim::GetAttr", {}, name, nullptr);
      evidence_.attributePath[node] = fqn;
      auto val = g_.addOutput(node, name, ValueKind::Tensor, "Tensor");
      g_.value(val).param = found->second;
      g_.parameter(found->second).reads.push_back(val);
      model_.placeholders[found->second].push_back(name);
      setTensorInfo(val, name, graph);
      scope_[name] = val;
    } else if (kind == "user_input") {
      const auto& arg = field(v, "arg", where);
      if (arg.contains("as_tensor")) {
        const auto name = arg["as_tensor"].at("name").get<std::string>();
        auto val = g_.addOutput(param, name, ValueKind::Tensor, "Tensor");
        setTensorInfo(val, name, graph);
        scope_[name] = val;
      } else if (arg.contains("as_sym_int")) {
        const auto name = arg["as_sym_int"].at("as_name").get<std::string>();
        ValueKind k;
        auto val = g_.addOutput(param, name, ValueKind::Int, "int");
        g_.value(val).constant = symbolic(name, graph, k);
        scope_[name] = val;
      } else {
        throw Error("unsupported program: user input " + std::to_string(i) + " is a " + arg.dump().substr(0, 40) +
                    "; foldnorm reads programs whose inputs are tensors");
      }
    } else if (kind == "constant_input") {
      const auto name = v.value("name", std::string{});
      scope_[name] = argumentValue(field(v, "value", where), where);
    } else {
      throw Error("unsupported program: input spec " + std::to_string(i) + " is a " + kind +
                  " (TorchBind objects and effect tokens are not supported)");
    }
  }
}

void ProgramImporter::nodes(const json& graph, const std::vector<std::size_t>& prefix) {
  const auto& list = field(graph, "nodes", "a graph");
  // Dead nodes (but LayerNorms) are not imported: the analysis would judge their reads as if
  // they mattered. They stay in the program, which the fold edits and the interpreter runs whole.
  const auto live = liveNodes(graph);
  for (std::size_t i = 0; i < list.size(); ++i) {
    if (!live[i]) continue;
    auto location = prefix;
    location.push_back(i);
    node(list[i], graph, location);
  }
}

void ProgramImporter::node(const json& n, const json& graph, const std::vector<std::size_t>& location) {
  const auto target = field(n, "target", "a node").get<std::string>();
  const auto t = parseTarget(target);
  if (t.ns == "higher_order") return higherOrder(n, t.name, location);
  if (!t.isOp()) return scalarNode(n, graph, location);
  if (isAssertion(t) && field(n, "outputs", "node").empty()) return;
  const auto handle = c10::Dispatcher::singleton().findSchema(
      c10::OperatorName(t.kind(), t.overload == "default" ? "" : t.overload));
  opNode(n, graph, location, t.kind(), handle ? &*handle : nullptr);
}

void ProgramImporter::opNode(const json& n, const json& graph, const std::vector<std::size_t>& location,
                             const std::string& kind, const c10::OperatorHandle* op) {
  const c10::FunctionSchema* schema = op ? &op->schema() : nullptr;
  const auto& outputs = field(n, "outputs", "a node");
  std::string name = n.value("name", std::string{});
  if (name.empty() && !outputs.empty() && outputs[0].contains("as_tensor"))
    name = outputs[0]["as_tensor"].value("name", std::string{});  // before schema 8.16 nodes had no name
  const auto where = "node '" + name + "' (" + n["target"].get<std::string>() + ")";
  const auto& inputs = field(n, "inputs", where);
  auto id = addNode(kind, location, name, n.contains("metadata") ? &n["metadata"] : nullptr);
  std::map<std::string, const json*> byName;
  for (const auto& a : inputs) byName[a.value("name", std::string{})] = &field(a, "arg", where);
  bool inPlace = false;
  if (schema) {
    for (const auto& [argName, arg] : byName) {
      bool known = false;
      for (const auto& a : schema->arguments()) known = known || a.name() == argName;
      if (!known) {
        std::ostringstream os;
        os << *schema;
        throw Error(where + " passes an argument '" + argName + "' that its op's schema in this LibTorch lacks (" +
                    os.str() + "): the program was written by another torch version");
      }
    }
    for (const auto& a : schema->arguments()) {
      auto found = byName.find(a.name());
      g_.addInput(id, found != byName.end() ? argumentValue(*found->second, where) : defaultValue(a, where));
    }
    const auto& args = schema->arguments();
    inPlace = !args.empty() && args[0].alias_info() && args[0].alias_info()->isWrite() && !args[0].is_out();
  } else {
    for (const auto& a : inputs) g_.addInput(id, argumentValue(field(a, "arg", where), where));
  }
  std::vector<ValueId> produced;
  addOutputs(id, outputs, name, graph, produced);
  if (!schema) return;
  const auto self = g_.node(id).inputs.empty() ? kNone : g_.node(id).inputs[0];
  if (inPlace && !produced.empty() && g_.value(produced[0]).kind == ValueKind::Tensor) {
    // The Graph is functional: the op is its out-of-place form (add_ -> add, copy_ -> copy),
    // as torch's functionalization writes it, where the dispatcher has one.
    auto functional = kind.substr(0, kind.size() - 1);
    if (kind.back() == '_' && c10::Dispatcher::singleton().findSchema(c10::OperatorName(functional, schema->overload_name())))
      g_.node(id).kind = functional;
    inPlaceWrite(id, self, produced[0], op->hasTag(at::Tag::inplace_view), where);
    return;
  }
  // Views (a result aliasing an argument without writing it) join their argument's storage.
  const auto& returns = schema->returns();
  for (std::size_t r = 0; r < returns.size() && r < produced.size(); ++r) {
    const auto* alias = returns[r].alias_info();
    if (!alias || alias->isWrite()) continue;
    for (std::size_t a = 0; a < schema->arguments().size(); ++a) {
      const auto* argAlias = schema->arguments()[a].alias_info();
      if (!argAlias || argAlias->beforeSets() != alias->beforeSets()) continue;
      const auto base = g_.node(id).inputs[a];
      if (g_.value(produced[r]).kind == ValueKind::Tensor) {
        viewCreated(id, produced[r], base, n, graph, schema->arguments()[a].name(), where);
      } else if (g_.value(produced[r]).kind == ValueKind::TensorList) {
        // split/unbind/chunk: every element a view, neither replayed nor written back.
        auto& b = aliasOf(base);
        Alias element{b.storage, b.chain, b.version, base};
        element.chain.push_back(ViewStep{id, kind, false, "an element of " + kind + "'s results"});
        for (std::size_t e = r + 1; e < produced.size(); ++e) alias_[produced[e]] = element;
      }
      break;
    }
  }
}

void ProgramImporter::higherOrder(const json& n, const std::string& op, const std::vector<std::size_t>& location) {
  const auto name = n.value("name", std::string{});
  const auto where = "node '" + name + "' (torch.ops.higher_order." + op + ")";
  const auto& inputs = field(n, "inputs", where);
  std::size_t graphArg = inputs.size();
  for (std::size_t i = 0; i < inputs.size(); ++i)
    if (field(inputs[i], "arg", where).contains("as_graph")) graphArg = i;
  bool inlinable = op == "wrap_with_set_grad_enabled";
  if (op == "wrap_with_autocast") {
    // (device_type, dtype, enabled, cache_enabled, graph, *args): a disabled region computes as
    // its subgraph says; an enabled one changes dtypes the program does not record.
    bool enabled = inputs.size() > 2 && inputs[2]["arg"].value("as_bool", true);
    if (enabled)
      throw Error("unsupported program: " + where + " runs part of the model under torch.autocast, whose dtype "
                  "changes the program does not record; export the model without autocast");
    inlinable = true;
  }
  if (!inlinable || graphArg == inputs.size())
    throw Error("unsupported program: " + where + " is a higher-order op (control flow or a wrapped region) "
                "foldnorm does not inline; it reads programs of plain ops, wrap_with_set_grad_enabled and "
                "disabled wrap_with_autocast");
  const auto& sub = field(field(inputs[graphArg]["arg"], "as_graph", where), "graph", where);
  std::vector<ValueId> operands;
  for (std::size_t i = graphArg + 1; i < inputs.size(); ++i) operands.push_back(argumentValue(inputs[i]["arg"], where));
  const auto& subInputs = field(sub, "inputs", where);
  if (subInputs.size() != operands.size())
    throw Error(where + ": its subgraph takes " + std::to_string(subInputs.size()) + " inputs but gets " +
                std::to_string(operands.size()));
  // The subgraph has its own names: walk it in a scope of its own, bound to the operands.
  auto outer = std::move(scope_);
  scope_.clear();
  for (std::size_t i = 0; i < operands.size(); ++i) {
    const auto& in = subInputs[i];
    if (!in.contains("as_tensor")) throw Error(where + ": a subgraph input that is not a tensor");
    scope_[in["as_tensor"].at("name").get<std::string>()] = operands[i];
  }
  nodes(sub, location);
  std::vector<ValueId> results;
  for (const auto& out : field(sub, "outputs", where)) results.push_back(argumentValue(out, where));
  scope_ = std::move(outer);
  const auto& outputs = field(n, "outputs", where);
  if (outputs.size() != results.size())
    throw Error(where + ": " + std::to_string(outputs.size()) + " outputs for a subgraph of " +
                std::to_string(results.size()));
  for (std::size_t i = 0; i < outputs.size(); ++i)
    if (outputs[i].contains("as_tensor")) scope_[outputs[i]["as_tensor"].at("name").get<std::string>()] = results[i];
}

void ProgramImporter::scalarNode(const json& n, const json& graph, const std::vector<std::size_t>& location) {
  // Python builtins (_operator.mul, math.ceil) and torch.sym_* compute sizes; every size has its
  // example value here, so the node is a constant of that value (no inputs: nothing flows into it).
  const auto target = n["target"].get<std::string>();
  const auto name = n.value("name", std::string{});
  const auto& outputs = field(n, "outputs", "node '" + name + "'");
  for (const auto& out : outputs)
    if (out.contains("as_tensor") || out.contains("as_tensors"))
      throw Error("unsupported program: node '" + name + "' (" + target + ") is a Python function on tensors, not an op");
  auto id = addNode("prim::Constant", location, name, n.contains("metadata") ? &n["metadata"] : nullptr);
  std::vector<ValueId> produced;
  addOutputs(id, outputs, name, graph, produced);
}

void ProgramImporter::normalizeLayerNorms() {
  // The decomposed IR (after run_decompositions) writes LayerNorm as native_layer_norm -> (out,
  // mean, rstd). Where mean and rstd are unused it is aten::layer_norm(x, shape, w, b, eps,
  // cudnn_enable=False) for the analysis (a fold candidate, as in the training IR); where they are
  // used it stays native_layer_norm (an absorber only).
  for (NodeId id = 0; id < g_.nodeCount(); ++id) {
    auto& n = g_.node(id);
    if (n.kind != "aten::native_layer_norm" || n.outputs.size() != 3 || n.inputs.size() != 5) continue;
    if (!g_.value(n.outputs[1]).uses.empty() || !g_.value(n.outputs[2]).uses.empty()) continue;
    n.kind = "aten::layer_norm";
    g_.addInput(id, constant(ConstantValue{false}, ValueKind::Bool, "bool"));
  }
}

void ProgramImporter::run() {
  try {
    const auto& gm = field(archive_.program, "graph_module", "the program");
    const auto& graph = field(gm, "graph", "graph_module");
    placeholders(gm);
    nodes(graph, {});
    auto ret = addNode("prim::Return", {}, {}, nullptr);
    g_.setReturnNode(ret);
    for (const auto& out : field(graph, "outputs", "graph_module.graph")) g_.addInput(ret, argumentValue(out, "the program's outputs"));
    normalizeLayerNorms();
  } catch (const nlohmann::json::exception& e) {
    throw Error("'" + archive_.path + "': models/model.json is malformed (a damaged archive?): " + e.what());
  }
  inferModulePaths(g_, evidence_);
  // nn_module_stack names the module each call ran in exactly; the graph pass would name a node
  // by the parameters it reads, which for a tie is the canonical placeholder's module (the
  // embedding reading lm_head's weight).
  for (NodeId id = 0; id < g_.nodeCount(); ++id) {
    auto& n = g_.node(id);
    if (evidence_.callSite[id] != kNone && n.kind != "prim::GetAttr" && n.kind != "prim::Constant")
      n.modulePath = evidence_.callStackPath[id];
  }
}

}  // namespace foldnorm::export_detail
