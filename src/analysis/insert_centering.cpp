// The last solver step (method.md section 8, issue 14): one explicit centering where a stream
// starts at a value no parameter centering makes mean-zero (an LN's affine output, a GELU after a
// conv stem). Inserting x - x.mean(axes, keepdim=True) at that value changes it by a per-row
// constant, so it is exact exactly where a centered leaf would be: the shift walk from the value
// must end in absorbers. It pays when it frees at least two LNs (one inserted centering costs
// about one LN's mean subtraction).
//
// Candidates are the values where the inputs of kept LNs break (followed back through the blame
// of their facts). Per candidate and axis set: the walk first (cheap; a refusal names the
// reader that would see the change), then, when at least two LNs break there, the whole solver
// with the insertion added, accepted when it frees at least two more LNs. Greedy in graph order.
#include <algorithm>
#include <chrono>
#include <map>

#include "foldnorm/analysis/axes.h"
#include "solver.h"

namespace foldnorm {
namespace {

constexpr std::size_t kMinFreed = 2;

/// The value whose producer broke the fact of `v` (following the blame back), if any.
std::optional<ValueId> breakingValue(const Graph& g, const std::vector<MeanZeroFact>& facts, ValueId v) {
  for (std::size_t guard = 0; guard < g.valueCount() + 1; ++guard) {
    const auto& f = facts.at(v);
    if (f.state != MeanZeroFact::State::Broken || f.breaker == kNone) return std::nullopt;
    if (g.value(v).producer == f.breaker) return v;
    if (f.blamed == kNone) return std::nullopt;
    v = f.blamed;
  }
  return std::nullopt;
}

/// Axis sets worth centering at `value` for the LN `ln`: its normalized axes when the value has
/// the LN input's trailing shape, else any single axis as long as the normalized features
/// (a permute may sit between: Whisper's [B, C, T] stem before [B, T, C]).
std::vector<AxisSet> axisChoices(const Graph& g, ValueId value, const LayerNormVerdict& ln) {
  std::vector<AxisSet> out;
  const auto* shape = shapeOf(g, value);
  if (!shape || shape->empty()) return out;
  const auto& norm = ln.info.normalizedShape;
  auto r = int64_t(shape->size()), k = int64_t(norm.size());
  if (k <= r && std::equal(norm.begin(), norm.end(), shape->end() - k)) out.push_back(AxisSet::trailing(r, k));
  int64_t features = 1;
  for (auto d : norm) features *= d;
  for (int64_t a = r - 1; a >= 0; --a)
    if (shape->at(a) == features && features > 1 && std::find(out.begin(), out.end(), AxisSet::of({a})) == out.end())
      out.push_back(AxisSet::of({a}));
  return out;
}

std::string describeValue(const Graph& g, const InsertedCentering& ic) {
  const auto& n = g.node(ic.after);
  return n.kind + (n.modulePath.empty() ? "" : " @ " + n.modulePath) + " along " + toString(ic.axes);
}

}  // namespace

AnalysisResult analyzeFoldability(const Graph& g, const AnalysisOptions& options) {
  auto started = std::chrono::steady_clock::now();
  auto result = solveFoldability(g, options, {});
  if (options.insertCentering) {
    std::map<ValueId, std::vector<std::size_t>> blamed;  // breaking value -> kept LNs (indices)
    for (std::size_t i = 0; i < result.layerNorms.size(); ++i) {
      const auto& v = result.layerNorms[i];
      if (v.reason != VerdictReason::Breaker) continue;
      if (auto b = breakingValue(g, result.facts, g.node(v.info.node).inputs.at(0)))
        if (g.value(*b).kind == ValueKind::Tensor) blamed[*b].push_back(i);
    }
    std::vector<std::pair<ValueId, AxisSet>> accepted;
    std::vector<InsertedCentering> considered;
    auto count = result.foldableCount();
    for (const auto& [value, lns] : blamed) {
      InsertedCentering ic;
      ic.value = value;
      ic.after = g.value(value).producer;
      for (auto i : lns) ic.blamedBy.push_back(result.layerNorms[i].info.node);
      auto choices = axisChoices(g, value, result.layerNorms[lns.front()]);
      if (choices.empty()) continue;
      // A safe walk that could free only one LN is not worth a line (every post-LN LN's input
      // breaks at the LN before it); a refusal by the walk names the reader, and is kept.
      bool quiet = false;
      for (const auto& axes : choices) {
        ic.axes = axes;
        Leaf probe;
        probe.kind = LeafKind::InsertedCentering;
        probe.node = ic.after;
        probe.output = value;
        probe.axes = axes;
        auto walk = checkShift(g, probe);
        if (!walk.safe) {
          ic.why = "centering there changes what " + g.describeNode(walk.consumer) + " sees: " + walk.why;
          ic.consumer = walk.consumer;
          ic.path = walk.path;
          continue;
        }
        ic.consumer = kNone;
        ic.path.clear();
        if (lns.size() < kMinFreed) {
          ic.why = "only " + std::to_string(lns.size()) + " LayerNorm breaks there: one inserted centering "
                   "costs about one LN's mean subtraction";
          quiet = true;
          continue;
        }
        quiet = false;
        auto trial = accepted;
        trial.emplace_back(value, axes);
        auto tried = solveFoldability(g, options, trial);
        if (tried.foldableCount() >= count + kMinFreed) {
          accepted = std::move(trial);
          count = tried.foldableCount();
          ic.inserted = true;
          ic.why.clear();
          break;
        }
        ic.why = "it would free " + std::to_string(tried.foldableCount() - std::min(count, tried.foldableCount())) +
                 " LayerNorm(s), fewer than " + std::to_string(kMinFreed);
      }
      if (!quiet || ic.inserted) considered.push_back(std::move(ic));
    }
    if (!accepted.empty()) result = solveFoldability(g, options, accepted);
    for (auto& ic : considered) {
      if (!ic.inserted) continue;
      for (const auto& leaf : result.leaves)
        if (leaf.kind == LeafKind::InsertedCentering && leaf.output == ic.value) ic.leaf = leaf.id;
      for (const auto& v : result.layerNorms)
        if (v.foldable && std::count(v.leaves.begin(), v.leaves.end(), ic.leaf)) ic.frees.push_back(v.info.node);
    }
    result.insertions = std::move(considered);
  }
  result.milliseconds =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count();
  return result;
}

std::string describeInsertion(const Graph& g, const InsertedCentering& ic) {
  auto where = describeValue(g, ic);
  if (!ic.inserted) return "no centering inserted after " + where + ": " + ic.why;
  auto n = ic.frees.size();
  return "insert centering after " + where + ": frees " + std::to_string(n) + " LNs, saves " +
         std::to_string(n > 0 ? n - 1 : 0) + " mean subtractions";
}

}  // namespace foldnorm
