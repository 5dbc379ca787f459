// Module-path inference (see include/foldnorm/graph/module_paths.h).
#include "foldnorm/graph/module_paths.h"

#include <map>
#include <optional>
#include <stdexcept>

namespace foldnorm {
namespace {

std::vector<std::string> splitPath(const std::string& p) {
  std::vector<std::string> parts;
  std::size_t start = 0;
  while (true) {
    auto dot = p.find('.', start);
    parts.push_back(p.substr(start, dot == std::string::npos ? std::string::npos : dot - start));
    if (dot == std::string::npos) return parts;
    start = dot + 1;
  }
}

std::string joined(const std::string& a, const std::string& b) { return a.empty() ? b : a + "." + b; }

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

/// Call stacks name module instances but skip containers without a forward (ModuleList,
/// Sequential used by index): "transformer.0.ln_1" for transformer.h.0.ln_1. A node that reads
/// parameters knows the true path; learn the renaming from those, parents included, and apply
/// it to every node with a call stack.
void renameCallStackPaths(Graph& g, const std::vector<bool>& fromStack,
                          const std::vector<std::string>& paramModule) {
  std::map<std::string, std::string> canonical;
  for (const auto& n : g.nodes()) {
    if (!fromStack[n.id] || paramModule[n.id].empty()) continue;
    // The call-stack names are a subsequence of the parameter path's: match them from the left,
    // each call-stack prefix maps to the parameter-path prefix ending at its match.
    auto cs = splitPath(n.modulePath), ps = splitPath(paramModule[n.id]);
    std::size_t j = 0;
    std::string cp, pm;
    for (const auto& name : cs) {
      while (j < ps.size() && ps[j] != name) pm = joined(pm, ps[j++]);
      if (j == ps.size()) break;
      pm = joined(pm, ps[j++]);
      cp = joined(cp, name);
      canonical.emplace(cp, pm);
    }
  }
  for (NodeId id = 0; id < g.nodeCount(); ++id) {
    auto& n = g.node(id);
    if (!fromStack[n.id]) continue;
    std::string prefix = n.modulePath, rest;
    while (!prefix.empty()) {
      auto it = canonical.find(prefix);
      if (it != canonical.end()) {
        n.modulePath = it->second + rest;
        break;
      }
      auto dot = prefix.rfind('.');
      if (dot == std::string::npos) break;
      rest = prefix.substr(dot) + rest;
      prefix = prefix.substr(0, dot);
    }
  }
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
  if (evidence.callStackPath.size() != g.nodeCount() || evidence.attributePath.size() != g.nodeCount())
    throw std::invalid_argument("inferModulePaths: evidence for " + std::to_string(evidence.callStackPath.size()) +
                                " nodes, graph has " + std::to_string(g.nodeCount()));
  std::vector<bool> fromStack(g.nodeCount());
  bool haveStacks = false;
  for (NodeId id = 0; id < g.nodeCount(); ++id) {
    auto& n = g.node(id);
    n.modulePath = evidence.callStackPath[n.id];
    fromStack[n.id] = !n.modulePath.empty() && n.kind != "prim::GetAttr";
    haveStacks = haveStacks || fromStack[n.id];
    // A GetAttr without a call stack reads from the root: a parameter read belongs to the
    // parameter's module, a submodule read to the submodule.
    const auto& attribute = evidence.attributePath[n.id];
    if (n.modulePath.empty() && !attribute.empty()) {
      bool readsParameter = n.outputs.size() == 1 && g.value(n.outputs[0]).param != kNone;
      n.modulePath = readsParameter ? parentModule(attribute) : attribute;
    }
  }
  const auto paramModule = parameterModules(g);
  if (haveStacks) renameCallStackPaths(g, fromStack, paramModule);
  else inferFromNeighbours(g, paramModule);
}

}  // namespace foldnorm
