// The last solver step (docs/method.md section 8, issue 14): one explicit centering where a stream
// starts at a value no parameter centering makes mean-zero (an LN's affine output, a GELU after a
// conv stem). Inserting x - x.mean(axes, keepdim=True) at that value changes it by a per-row
// constant, so it is exact exactly where a centered leaf would be: the shift walk from the value
// must end in absorbers. It pays when it frees at least two LNs (one inserted centering costs
// about one LN's mean subtraction).
//
// Candidates are the values where the inputs of kept LNs stop being mean-zero along the LN's
// axes, whatever the reason: where they break (followed back through the blame of their facts),
// and, for an LN kept because its input is mean-zero only along other axes (MLP-Mixer: the
// token-mixing MLP's output is mean-zero along tokens), the operand of the sums before it that
// brings those axes in, moved back through layout ops to the op that made it (there the eager
// model has a module output to check). Per candidate and axis set: the walk first (cheap; a
// refusal names the reader that would see the change), then, when at least two LNs meet it, the
// whole solver with the insertion added, accepted when it frees at least two more LNs. Greedy
// in graph order.
#include <algorithm>
#include <chrono>
#include <map>
#include <set>

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

/// Axes of `v` that map onto `axes` of the output of `n` (a layout op moving no data between
/// rows: transpose, permute, eval dropout, copies); nullopt for any other op.
std::optional<AxisSet> axesBeforeLayoutOp(const Graph& g, const Node& n, AxisSet axes) {
  if (n.inputs.empty() || n.outputs.size() != 1) return std::nullopt;
  auto rank = rankOf(g, n.inputs.at(0));
  if (rank < 0 || rank != rankOf(g, n.outputs.at(0))) return std::nullopt;
  if (n.kind == "aten::contiguous" || n.kind == "aten::clone" || n.kind == "aten::detach") return axes;
  if (n.kind == "aten::dropout" || n.kind == "aten::feature_dropout") {
    // Only at inference (train is the constant False): in training dropout is no copy.
    if (n.inputs.size() < 3 || g.constantBool(n.inputs.at(2)).value_or(true)) return std::nullopt;
    return axes;
  }
  std::vector<int64_t> from(rank);  // output axis i comes from input axis from[i]
  for (int64_t i = 0; i < rank; ++i) from[i] = i;
  if (n.kind == "aten::transpose" && n.inputs.size() == 3) {
    auto a = dimArg(g, n.inputs.at(1), rank), b = dimArg(g, n.inputs.at(2), rank);
    if (!a || !b) return std::nullopt;
    std::swap(from[*a], from[*b]);
  } else if (n.kind == "aten::permute" && n.inputs.size() == 2) {
    auto dims = g.constantIntList(n.inputs.at(1));
    if (!dims || int64_t(dims->size()) != rank) return std::nullopt;
    for (int64_t i = 0; i < rank; ++i) from[i] = (*dims)[i] < 0 ? (*dims)[i] + rank : (*dims)[i];
  } else {
    return std::nullopt;
  }
  AxisSet out;
  for (auto a : axes.axes()) out.insert(from.at(a));
  return out;
}

/// Where the input `v` of an LN kept with reason `axes` stops being mean-zero along `wanted`:
/// through the sums before the LN (add/sub of two tensors, the residual stream), every operand
/// mean-zero along axes outside `wanted`, each moved back through layout ops whose input is
/// read only there (the insertion then sits at the op that made the value: a token-mixing
/// MLP's fc2, before its transpose back). Appends (value, axes to center there).
void offAxisValues(const Graph& g, const std::vector<MeanZeroFact>& facts, ValueId v, AxisSet wanted,
                   std::vector<std::pair<ValueId, AxisSet>>& out, int depth = 0) {
  const auto& f = facts.at(v);
  if (depth > 64 || !f.isMeanZero() || f.axes.subsetOf(wanted) || g.value(v).producer == kNone) return;
  const auto& n = g.node(g.value(v).producer);
  static const std::set<std::string> sums{"aten::add", "aten::sub", "aten::add_", "aten::sub_"};
  if (sums.count(n.kind) && n.inputs.size() >= 2 && g.value(n.inputs[0]).kind == ValueKind::Tensor &&
      g.value(n.inputs[1]).kind == ValueKind::Tensor) {
    auto rank = rankOf(g, v);
    for (std::size_t s = 0; s < 2; ++s) {
      auto operandRank = rankOf(g, n.inputs[s]);
      if (operandRank < 0 || operandRank > rank) continue;
      AxisSet mapped;  // `wanted` in the operand's frame (right-aligned broadcasting)
      for (auto a : wanted.axes())
        if (a - (rank - operandRank) >= 0) mapped.insert(a - (rank - operandRank));
      if (!mapped.empty()) offAxisValues(g, facts, n.inputs[s], mapped, out, depth + 1);
    }
    return;
  }
  for (int guard = 0; guard < 16; ++guard) {
    const auto& p = g.node(g.value(v).producer);
    auto before = axesBeforeLayoutOp(g, p, wanted);
    if (!before || g.value(p.inputs.at(0)).uses.size() != 1 || g.value(p.inputs.at(0)).producer == kNone) break;
    v = p.inputs.at(0);
    wanted = *before;
  }
  if (std::find(out.begin(), out.end(), std::make_pair(v, wanted)) == out.end()) out.emplace_back(v, wanted);
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
    std::map<ValueId, std::vector<std::size_t>> blamed;  // candidate value -> kept LNs (indices)
    std::map<ValueId, std::vector<AxisSet>> knownAxes;   // off-axis candidates: the axes mapped there
    for (std::size_t i = 0; i < result.layerNorms.size(); ++i) {
      const auto& v = result.layerNorms[i];
      ValueId input = g.node(v.info.node).inputs.at(0);
      if (v.reason == VerdictReason::Breaker) {
        if (auto b = breakingValue(g, result.facts, input))
          if (g.value(*b).kind == ValueKind::Tensor) blamed[*b].push_back(i);
      } else if (v.reason == VerdictReason::Axes) {
        std::vector<std::pair<ValueId, AxisSet>> found;
        auto wanted = AxisSet::trailing(rankOf(g, input), int64_t(v.info.normalizedShape.size()));
        offAxisValues(g, result.facts, input, wanted, found);
        for (const auto& [value, axes] : found) {
          auto& lns = blamed[value];
          if (std::find(lns.begin(), lns.end(), i) == lns.end()) lns.push_back(i);
          auto& known = knownAxes[value];
          if (std::find(known.begin(), known.end(), axes) == known.end()) known.push_back(axes);
        }
      }
    }
    std::vector<std::pair<ValueId, AxisSet>> accepted;
    std::vector<InsertedCentering> considered;
    auto count = result.foldableCount();
    for (const auto& [value, lns] : blamed) {
      InsertedCentering ic;
      ic.value = value;
      ic.after = g.value(value).producer;
      for (auto i : lns) ic.blamedBy.push_back(result.layerNorms[i].info.node);
      auto choices = knownAxes[value];
      for (const auto& axes : axisChoices(g, value, result.layerNorms[lns.front()]))
        if (std::find(choices.begin(), choices.end(), axes) == choices.end()) choices.push_back(axes);
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
          ic.why = "only " + std::to_string(lns.size()) + " LayerNorm input stops being mean-zero there: "
                   "one inserted centering costs about one LN's mean subtraction";
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
