#include "foldnorm/analysis/explain.h"

#include <algorithm>
#include <ostream>

#include "foldnorm/graph/dataflow_view.h"

namespace foldnorm {

const char* toString(ExplanationRole role) {
  switch (role) {
    case ExplanationRole::None: return "none";
    case ExplanationRole::MeanZero: return "mean-zero path";
    case ExplanationRole::BreakPath: return "path to breaker";
    case ExplanationRole::ShiftPath: return "unsafe shift path";
    case ExplanationRole::Leaf: return "its leaf";
    case ExplanationRole::Breaker: return "breaker";
    case ExplanationRole::Consumer: return "sees the shift";
    case ExplanationRole::SelectedLn: return "selected LayerNorm";
  }
  return "?";
}

std::ostream& operator<<(std::ostream& os, ExplanationRole role) { return os << toString(role); }

namespace {

class Explainer {
 public:
  Explainer(const Graph& g, const AnalysisResult& a, std::size_t lnIndex)
      : g_(g), a_(a), v_(a.layerNorms.at(lnIndex)) {
    e_.lnIndex = lnIndex;
    e_.ln = v_.info.node;
    e_.roles.assign(g.nodeCount(), ExplanationRole::None);
    e_.path = v_.path;
    e_.why = verdictSentence(v_);
  }

  LnExplanation run() {
    mark(e_.ln, ExplanationRole::SelectedLn);
    walkBack();
    for (LeafId id : v_.leaves) markLeaf(id);
    switch (v_.reason) {
      case VerdictReason::Breaker:
        markPath(ExplanationRole::BreakPath, /*againstDataflow=*/true);
        if (v_.breaker != kNone) mark(v_.breaker, ExplanationRole::Breaker);
        break;
      case VerdictReason::UnsafeShift:
        markPath(ExplanationRole::ShiftPath, /*againstDataflow=*/false);
        if (v_.consumer != kNone) mark(v_.consumer, ExplanationRole::Consumer);
        if (v_.unsafeLeaf != kNone) markLeaf(v_.unsafeLeaf);
        break;
      default: break;
    }
    return std::move(e_);
  }

 private:
  static int rank(ExplanationRole r) { return static_cast<int>(r); }  // declared weakest first

  void mark(NodeId n, ExplanationRole r) {
    if (n >= e_.roles.size()) return;
    if (e_.roles[n] == ExplanationRole::None) e_.nodes.push_back(n);
    if (rank(r) > rank(e_.roles[n])) e_.roles[n] = r;
  }

  void markLeaf(LeafId id) {
    const Leaf& leaf = a_.leaves.at(id);
    mark(leaf.node, ExplanationRole::Leaf);
    for (NodeId c : leaf.chain) mark(c, ExplanationRole::Leaf);
    if (leaf.scaleNode != kNone) mark(leaf.scaleNode, ExplanationRole::Leaf);  // its absorbed scale
  }

  /// Whether value `v` fed the LN input's fact (the criterion in explain.h).
  bool contributed(ValueId v, const MeanZeroFact& target) const {
    const auto& f = a_.facts.at(v);
    if (target.isMeanZero())
      return f.isMeanZero() && !f.leaves.empty() &&
             std::includes(target.leaves.begin(), target.leaves.end(), f.leaves.begin(), f.leaves.end());
    if (target.state == MeanZeroFact::State::Broken)
      return f.state == MeanZeroFact::State::Broken && f.breaker == target.breaker;
    return false;
  }

  /// A value made by a bundle the dataflow view hides (its edges are drawn through it).
  bool bundled(ValueId v) const {
    NodeId p = g_.value(v).producer;
    return p != kNone && !isVisibleInDataflow(g_, p) && p != g_.graphInputNode() &&
           (g_.value(v).kind == ValueKind::TensorList || g_.value(v).kind == ValueKind::Tuple ||
            g_.node(p).kind == "prim::ListUnpack" || g_.node(p).kind == "prim::TupleUnpack");
  }

  void walkBack() {
    const Node& lnNode = g_.node(e_.ln);
    if (lnNode.inputs.empty()) return;
    const ValueId start = lnNode.inputs[0];
    const MeanZeroFact& target = a_.facts.at(start);
    const ExplanationRole along =
        target.isMeanZero() ? ExplanationRole::MeanZero : ExplanationRole::BreakPath;
    std::set<ValueId> leafOutputs;
    for (LeafId l : v_.leaves) leafOutputs.insert(a_.leaves.at(l).output);

    // (value, the nearest consumer the dataflow view shows): an edge runs from the value's
    // producer to that consumer, through any hidden bundle in between.
    std::vector<std::pair<ValueId, NodeId>> stack{{start, e_.ln}};
    std::set<std::pair<ValueId, NodeId>> visited;
    std::set<ValueId> expanded;
    while (!stack.empty()) {
      const auto [value, consumer] = stack.back();
      stack.pop_back();
      if (!visited.insert({value, consumer}).second) continue;
      const NodeId p = g_.value(value).producer;
      if (p == kNone) continue;
      if (p == g_.graphInputNode()) {
        if (std::find(e_.modelInputs.begin(), e_.modelInputs.end(), value) == e_.modelInputs.end())
          e_.modelInputs.push_back(value);
        continue;
      }
      const bool bundle = bundled(value);
      const bool visible = isVisibleInDataflow(g_, p);
      if (visible) e_.edges.insert({p, consumer});
      if (!bundle && !expanded.insert(value).second) continue;
      if (!bundle) mark(p, leafOutputs.count(value) ? ExplanationRole::Leaf : along);
      if (leafOutputs.count(value) || p == target.breaker) continue;
      const NodeId next = visible ? p : consumer;
      for (ValueId w : g_.node(p).inputs)
        if (contributed(w, target) || bundled(w)) stack.push_back({w, next});
    }
  }

  /// The verdict's path; its edges between the nodes the dataflow view shows, in dataflow order.
  void markPath(ExplanationRole along, bool againstDataflow) {
    NodeId previous = kNone;
    for (NodeId n : v_.path) {
      mark(n, along);
      if (!isVisibleInDataflow(g_, n)) continue;
      if (previous != kNone) {
        if (againstDataflow) e_.edges.insert({n, previous});
        else e_.edges.insert({previous, n});
      }
      previous = n;
    }
  }

  const Graph& g_;
  const AnalysisResult& a_;
  const LayerNormVerdict& v_;
  LnExplanation e_;
};

}  // namespace

LnExplanation explainLayerNorm(const Graph& graph, const AnalysisResult& result, std::size_t lnIndex) {
  return Explainer(graph, result, lnIndex).run();
}

std::string verdictSentence(const LayerNormVerdict& v) {
  if (v.foldable) {
    // The analysis' explanation of a foldable LN says only "foldable"; the count says more.
    return "foldable: centering " + std::to_string(v.leaves.size()) +
           (v.leaves.size() == 1 ? " leaf makes" : " leaves makes") + " its input mean-zero";
  }
  return std::string("not foldable (") + toString(v.reason) + "): " + v.explanation;
}

}  // namespace foldnorm
