// The shift walk of the solver (solver.h): what centering a leaf changes downstream, and whether
// every change ends in an absorber (a LayerNorm, or an op whose output the change does not reach).
#include <algorithm>
#include <deque>
#include <optional>
#include <set>
#include <unordered_map>

#include "foldnorm/analysis/axes.h"
#include "foldnorm/analysis/rules.h"
#include "rows.h"
#include "solver.h"

namespace foldnorm {

/// Phase 3, one leaf: follow the shift forward. Constant axes meet over paths (ShiftFact::join).
ShiftCheck checkShift(const Graph& g, const Leaf& leaf) {
  ShiftCheck check;
  if (leaf.kind == LeafKind::MeanSubtraction) return check;  // nothing is changed
  ShiftFact shift;
  ShiftRows rows;  // where along one axis the change can be non-zero (rows.h)
  std::optional<std::set<ValueId>> reachable;  // every value the leaf's output flows into
  auto carries = [&](ValueId v) {
    if (!reachable) {
      reachable.emplace();
      std::deque<ValueId> frontier{leaf.output};
      while (!frontier.empty()) {
        auto u = frontier.front();
        frontier.pop_front();
        if (!reachable->insert(u).second) continue;
        for (const auto& use : g.value(u).uses)
          for (auto o : g.node(use.node).outputs) frontier.push_back(o);
      }
    }
    return reachable->count(v) > 0;
  };
  std::unordered_map<ValueId, std::pair<ValueId, NodeId>> parent;  // value <- (value, via node)
  std::deque<ValueId> queue;
  // Centered within groups (a grouped conv), each group's outputs change by their own amount:
  // the change is constant along no axis, so no LayerNorm downstream absorbs it (PiT's pooling).
  bool grouped = std::any_of(leaf.actions.begin(), leaf.actions.end(), [](const CenterAction& a) { return a.groups > 1; });
  shift.join(leaf.output, grouped ? AxisSet{} : leaf.axes);
  queue.push_back(leaf.output);
  std::set<NodeId> absorbers;
  auto pathTo = [&](ValueId v, NodeId consumer) {
    std::vector<NodeId> path{consumer};
    while (v != leaf.output) {
      auto it = parent.find(v);
      if (it == parent.end()) break;
      path.push_back(it->second.second);
      v = it->second.first;
    }
    path.push_back(leaf.node);
    std::reverse(path.begin(), path.end());
    return path;
  };
  while (!queue.empty()) {
    ValueId v = queue.front();
    queue.pop_front();
    ++check.visited;
    AxisSet axes = *shift.constantAxes(v);
    auto factor = shift.constantFactor(v);
    auto changedRows = rows.of(v);
    for (const auto& use : g.value(v).uses) {
      if (changedRows && takesNoneOf(g, use.node, use.slot, *changedRows)) continue;  // the change is not there
      const auto& rule = ruleFor(g, use.node);
      auto outcome = rule.shift(ShiftInput{g, use.node, use.slot, axes, factor});
      switch (outcome.kind) {
        case ShiftOutcome::Kind::Absorbed: absorbers.insert(use.node); break;
        case ShiftOutcome::Kind::Ignored: break;
        case ShiftOutcome::Kind::Unsafe:
          check.safe = false;
          check.consumer = use.node;
          check.why = outcome.why;
          if (use.node == g.returnNode()) {
            // Name the output as the caller indexes it: a tuple of outputs reaches the return
            // as one value, so follow the shift back through the bundles it went through.
            std::string index;
            ValueId cur = v;
            for (auto it = parent.find(cur); it != parent.end(); it = parent.find(cur)) {
              const auto& via = g.node(it->second.second);
              if (via.kind != "prim::TupleConstruct" && via.kind != "prim::ListConstruct") break;
              auto pos = std::find(via.inputs.begin(), via.inputs.end(), it->second.first) - via.inputs.begin();
              index = "." + std::to_string(pos) + index;
              cur = it->second.first;
            }
            check.why = "model output " + std::to_string(use.slot) + index +
                        ": the caller would see the changed value";
          }
          check.path = pathTo(v, use.node);
          check.absorbers.assign(absorbers.begin(), absorbers.end());
          return check;
        case ShiftOutcome::Kind::Passed:
          for (const auto& [out, outAxes] : outcome.outputs) {
            bool first = !shift.reaches(out);
            std::optional<AxisFactor> outFactor;
            for (const auto& [fv, f] : outcome.factors)
              if (fv == out) outFactor = f;
            auto outRows = shiftRowsThrough(g, use.node, use.slot, changedRows, out, carries);
            bool widened = shift.join(out, outAxes, outFactor);
            if (rows.join(out, first, outRows) || widened) {
              if (first) parent[out] = {v, use.node};
              queue.push_back(out);
            }
          }
          break;
      }
    }
  }
  check.absorbers.assign(absorbers.begin(), absorbers.end());
  return check;
}

}  // namespace foldnorm
