// Module-path inference (see include/foldnorm/graph/module_paths.h).
#include "foldnorm/graph/module_paths.h"

#include <map>
#include <optional>
#include <stdexcept>

namespace foldnorm {
namespace {

/// Per node: the module of the parameters it reads (constants excluded), "" when none.
std::vector<std::string> parameterModules(const Graph& g) {
  std::vector<std::string> out(g.nodeCount());
  for (const auto& n : g.nodes())
    for (auto in : n.inputs) {
      const auto& v = g.value(in);
      if (v.param == kNone || g.parameter(v.param).isConstant) continue;
      auto m = parentModule(g.parameter(v.param).path);
      out[n.id] = out[n.id].empty() ? m : commonModulePrefix(out[n.id], m);
    }
  return out;
}

/// Whether `prefix` is `path` or a whole-name prefix of it ("a.b" of "a.b.c", not of "a.bc").
bool isModulePrefix(const std::string& prefix, const std::string& path) {
  if (prefix.empty()) return true;
  return path.compare(0, prefix.size(), prefix) == 0 && (path.size() == prefix.size() || path[prefix.size()] == '.');
}

/// The attribute path of the module each call ran on, per call site. A call's GetAttr nodes read
/// from its module (the callee's `self`), which the caller made: the first GetAttr of a call
/// whose input comes from outside the call names that module. A call that reads no attribute
/// (a parameter-free activation or dropout module) takes the nearest learned call before it
/// whose call-stack names are a prefix of its own (its parent: the parent's GetAttr of the child
/// module comes just before the child's body), plus the rest of its names. A call from an
/// inlined function (no module of its own) has its caller's names and so takes its path.
std::map<std::size_t, std::string> callPaths(const Graph& g, const ModuleEvidence& ev) {
  std::map<std::size_t, std::string> paths;
  for (const auto& n : g.nodes()) {
    const auto site = ev.callSite[n.id];
    if (n.kind != "prim::GetAttr" || site == kNone || n.inputs.empty() || paths.count(site)) continue;
    const NodeId from = g.value(n.inputs[0]).producer;
    if (from == kNone) continue;
    if (ev.callSite[from] == site && g.node(from).kind == "prim::GetAttr") continue;  // a chain inside the call
    if (from == g.graphInputNode()) paths[site] = "";  // the call ran on the root module itself
    else if (g.node(from).kind == "prim::GetAttr" && !ev.attributePath[from].empty())
      paths[site] = ev.attributePath[from];
  }
  std::map<std::size_t, std::string> names;  // call-stack names per call site
  for (const auto& n : g.nodes())
    if (ev.callSite[n.id] != kNone) names.emplace(ev.callSite[n.id], ev.callStackPath[n.id]);
  // The scan for a call's parent starts at the call's first node that is not a constant: the
  // tracer's constant pooling hoists constants to the top of the graph, before every module's
  // GetAttr nodes (BERT's attention.output.dropout would find no parent there and keep the
  // call-stack names, which skip ModuleLists: "encoder.0..." for "encoder.layer.0..."). A call
  // made of constants only starts at its first constant (second pass).
  for (int pass = 0; pass < 2; ++pass) {
    for (const auto& n : g.nodes()) {
      const auto site = ev.callSite[n.id];
      if (site == kNone || paths.count(site) || (pass == 0 && n.kind == "prim::Constant")) continue;
      const auto& own = names[site];
      std::string path = own;  // no learned parent: the call-stack names as they are
      for (NodeId back = n.id; !own.empty() && back-- > 0;) {
        const auto other = ev.callSite[back];
        if (other == kNone || other == site || !paths.count(other)) continue;
        const auto& parent = names[other];
        if (!isModulePrefix(parent, own)) continue;  // equal names too: a function inlined into a call
        path = paths[other];
        const auto rest = own.size() == parent.size() ? std::string() : own.substr(parent.empty() ? 0 : parent.size() + 1);
        path = path.empty() ? rest : rest.empty() ? path : path + "." + rest;
        break;
      }
      paths[site] = path;
    }
  }
  return paths;
}

bool isDataNode(const Node& n) {
  return n.kind != "prim::GetAttr" && n.kind != "prim::Constant" && n.kind != "prim::Param" &&
         n.kind != "prim::Return";
}

bool isIntLike(const Value& v) { return v.kind == ValueKind::Int || v.kind == ValueKind::IntList; }

/// Where the trace kept no call stack (C++ traces): a node that reads no parameters takes the
/// deepest module shared by its nearest annotated neighbours (gelu between mlp.c_fc and
/// mlp.c_proj -> mlp).
void inferFromNeighbours(Graph& g, const std::vector<std::string>& paramModule) {
  const auto order = g.topologicalOrder();
  std::vector<std::optional<std::string>> below(g.nodeCount()), above(g.nodeCount());
  // The nearest annotated ancestor is taken through the most recent producer (the latest in
  // topological order), the nearest descendant through the first consumer: a residual add of
  // block 1 reads the stream (from block 0) and block 1's projection, and feeds block 1's LN, so
  // it belongs to block 1, not to the common parent of all three. Shape arithmetic (ints) is no
  // producer of data.
  std::vector<std::size_t> position(g.nodeCount(), 0);
  for (std::size_t i = 0; i < order.size(); ++i) position[order[i]] = i;
  auto carriesData = [&](NodeId from, NodeId to) {
    for (auto out : g.node(from).outputs)
      if (!isIntLike(g.value(out)))
        for (auto in : g.node(to).inputs)
          if (in == out) return true;
    return false;
  };
  // A consumer that only reads sizes (aten::size and the int arithmetic after it) says nothing
  // about where a tensor belongs.
  auto isDataConsumer = [&](NodeId s) {
    const auto& k = g.node(s).kind;
    if (k == "aten::size" || k == "aten::Int" || k == "prim::NumToTensor" || k == "aten::ScalarImplicit" ||
        k == "aten::dim" || k == "aten::numel")
      return false;
    for (auto out : g.node(s).outputs)
      if (!isIntLike(g.value(out))) return true;
    return k == "prim::Return";
  };
  for (auto id : order) {  // nearest annotated ancestor, through the latest producer
    if (!isDataNode(g.node(id))) continue;
    if (!paramModule[id].empty()) {
      above[id] = paramModule[id];
      continue;
    }
    std::optional<NodeId> latest;
    for (auto p : g.predecessors(id))
      if (above[p] && carriesData(p, id) && (!latest || position[p] > position[*latest])) latest = p;
    // A tensor made from shape arithmetic only (a mask built from sizes) has no producer of
    // data: it takes its module from its consumers alone.
    if (latest) above[id] = above[*latest];
  }
  for (auto it = order.rbegin(); it != order.rend(); ++it) {  // through the first consumer
    auto id = *it;
    if (!isDataNode(g.node(id))) continue;
    if (!paramModule[id].empty()) {
      below[id] = paramModule[id];
      continue;
    }
    std::optional<NodeId> first;
    for (auto s : g.successors(id))
      if (below[s] && isDataConsumer(s) && (!first || position[s] < position[*first])) first = s;
    if (first) below[id] = below[*first];
  }
  for (NodeId id = 0; id < g.nodeCount(); ++id) {
    auto& n = g.node(id);
    if (!isDataNode(n)) continue;
    if (!paramModule[n.id].empty()) {
      n.modulePath = paramModule[n.id];
    } else if (above[n.id] && below[n.id]) {
      // Between two blocks (block 0's last residual add feeds block 1's LN) the common prefix is
      // the block list; the op was computed by its producer's block: no higher than the
      // producer's grandparent (h.0.mlp.c_proj -> h.0).
      auto common = commonModulePrefix(*above[n.id], *below[n.id]);
      auto grandparent = parentModule(parentModule(*above[n.id]));
      n.modulePath = common.size() < grandparent.size() ? grandparent : common;
    } else if (above[n.id]) {
      n.modulePath = parentModule(*above[n.id]);
    } else if (below[n.id]) {
      n.modulePath = parentModule(*below[n.id]);
    }
  }
}

}  // namespace

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

std::string parentModule(const std::string& path) {
  auto dot = path.rfind('.');
  return dot == std::string::npos ? std::string{} : path.substr(0, dot);
}

void inferModulePaths(Graph& g, const ModuleEvidence& evidence) {
  const auto n = g.nodeCount();
  if (evidence.callStackPath.size() != n || evidence.callSite.size() != n || evidence.attributePath.size() != n)
    throw std::invalid_argument("inferModulePaths: evidence for " + std::to_string(evidence.callStackPath.size()) +
                                "/" + std::to_string(evidence.callSite.size()) + "/" +
                                std::to_string(evidence.attributePath.size()) + " nodes, graph has " +
                                std::to_string(n));
  const auto paramModule = parameterModules(g);
  const auto calls = callPaths(g, evidence);
  bool haveStacks = false;
  for (NodeId id = 0; id < n; ++id) {
    auto& node = g.node(id);
    const auto& attribute = evidence.attributePath[id];
    const auto site = evidence.callSite[id];
    if (node.kind == "prim::GetAttr" && !attribute.empty()) {
      bool readsParameter = node.outputs.size() == 1 && g.value(node.outputs[0]).param != kNone;
      node.modulePath = readsParameter ? parentModule(attribute) : attribute;
    } else if (!paramModule[id].empty()) {
      node.modulePath = paramModule[id];
    } else if (site != kNone) {
      node.modulePath = calls.at(site);
    } else {
      node.modulePath.clear();
    }
    haveStacks = haveStacks || (!evidence.callStackPath[id].empty() && node.kind != "prim::GetAttr");
  }
  if (!haveStacks) inferFromNeighbours(g, paramModule);
}

}  // namespace foldnorm
