#include "highlight.h"

#include <algorithm>

namespace foldnorm::gui {

const char* toString(Role role) {
  switch (role) {
    case Role::None: return "none";
    case Role::MeanZero: return "mean-zero path";
    case Role::Leaf: return "its leaf";
    case Role::BreakPath: return "path to breaker";
    case Role::Breaker: return "breaker";
    case Role::ShiftPath: return "unsafe shift path";
    case Role::Consumer: return "sees the shift";
    case Role::SelectedLn: return "selected LayerNorm";
  }
  return "?";
}

namespace {

// A node keeps its strongest role: the explanation (breaker, consumer) over the path through it.
int rank(Role r) {
  switch (r) {
    case Role::None: return 0;
    case Role::MeanZero: return 1;
    case Role::BreakPath: return 2;
    case Role::ShiftPath: return 3;
    case Role::Leaf: return 4;
    case Role::Breaker: return 5;
    case Role::Consumer: return 6;
    case Role::SelectedLn: return 7;
  }
  return 0;
}

void mark(Highlight& h, NodeId n, Role r) {
  if (n >= h.roles.size()) return;
  if (h.roles[n] == Role::None) h.nodes.push_back(n);
  if (rank(r) > rank(h.roles[n])) h.roles[n] = r;
}

void markPath(Highlight& h, const std::vector<NodeId>& path, Role along, bool reversed) {
  for (std::size_t i = 0; i < path.size(); ++i) {
    mark(h, path[i], along);
    if (i + 1 < path.size()) {
      // Paths run against the dataflow (LN back to breaker) or with it (leaf on to consumer).
      if (reversed) h.edges.insert(Highlight::edgeKey(path[i + 1], path[i]));
      else h.edges.insert(Highlight::edgeKey(path[i], path[i + 1]));
    }
  }
}

}  // namespace

Highlight computeHighlight(const Graph& graph, const AnalysisResult& result, std::size_t lnIndex) {
  Highlight h;
  if (lnIndex >= result.layerNorms.size()) return h;
  const LayerNormVerdict& v = result.layerNorms[lnIndex];
  h.ln = v.info.node;
  h.roles.assign(graph.nodeCount(), Role::None);

  // Mean-zero graph: walk back from the LN's input through mean-zero values; stop at leaves.
  std::vector<char> leafOutput(graph.valueCount(), 0);
  for (const Leaf& leaf : result.leaves) {
    if (leaf.output < leafOutput.size()) leafOutput[leaf.output] = 1;
  }
  const Node& lnNode = graph.node(h.ln);
  if (!lnNode.inputs.empty()) {
    // (value, consumer): walk back from the LN's input through mean-zero tensors. Lists built by
    // hidden plumbing (ListConstruct -> cat) are walked through, as the dataflow view contracts
    // them, so the marked edges are the ones the canvas draws.
    std::vector<std::pair<ValueId, NodeId>> stack{{lnNode.inputs[0], h.ln}};
    std::vector<char> seen(graph.valueCount(), 0);
    while (!stack.empty()) {
      const auto [value, consumer] = stack.back();
      stack.pop_back();
      const NodeId producer = graph.value(value).producer;
      if (producer == kNone) continue;
      if (isPlumbing(graph.node(producer)) && !result.facts.at(value).isMeanZero()) {
        for (ValueId in : graph.node(producer).inputs) stack.push_back({in, consumer});
        continue;
      }
      if (!result.facts.at(value).isMeanZero()) continue;
      h.edges.insert(Highlight::edgeKey(producer, consumer));
      if (seen[value]) continue;
      seen[value] = 1;
      if (leafOutput[value]) {
        mark(h, producer, Role::Leaf);
        continue;
      }
      mark(h, producer, Role::MeanZero);
      for (ValueId in : graph.node(producer).inputs) stack.push_back({in, producer});
    }
  }
  for (LeafId id : v.leaves) {
    if (id < result.leaves.size()) mark(h, result.leaves[id].node, Role::Leaf);
  }
  switch (v.reason) {
    case VerdictReason::Breaker:
      markPath(h, v.path, Role::BreakPath, /*reversed=*/true);
      mark(h, v.breaker, Role::Breaker);
      break;
    case VerdictReason::UnsafeShift:
      markPath(h, v.path, Role::ShiftPath, /*reversed=*/false);
      mark(h, v.consumer, Role::Consumer);
      if (v.unsafeLeaf < result.leaves.size()) mark(h, result.leaves[v.unsafeLeaf].node, Role::Leaf);
      break;
    default:
      break;
  }
  mark(h, h.ln, Role::SelectedLn);
  return h;
}

std::string verdictLine(const LayerNormVerdict& v) {
  if (v.foldable) {
    // The analysis' explanation of a foldable LN says only "foldable"; the count says more.
    return "foldable: centering " + std::to_string(v.leaves.size()) +
           (v.leaves.size() == 1 ? " leaf makes" : " leaves makes") + " its input mean-zero";
  }
  return std::string("not foldable (") + toString(v.reason) + "): " + v.explanation;
}

std::string reasonText(const Graph& graph, const AnalysisResult& result, const LayerNormVerdict& v) {
  if (!v.foldable) return v.explanation;
  constexpr std::size_t kShown = 3;
  std::string text = "center:";
  std::size_t shown = 0;
  for (LeafId id : v.leaves) {
    if (id >= result.leaves.size()) continue;
    if (shown == kShown) {
      text += " +" + std::to_string(v.leaves.size() - kShown);
      break;
    }
    const std::string& module = graph.node(result.leaves[id].node).modulePath;
    text += (shown ? ", " : " ") + (module.empty() ? std::string("(top level)") : module);
    ++shown;
  }
  return text;
}

}  // namespace foldnorm::gui
