#include "foldnorm/analysis/analysis.h"

#include <algorithm>
#include <chrono>
#include <deque>
#include <optional>
#include <unordered_map>

#include "foldnorm/analysis/axes.h"
#include "foldnorm/analysis/rules.h"
#include "rows.h"
#include "solver.h"

namespace foldnorm {

const char* toString(VerdictReason reason) {
  switch (reason) {
    case VerdictReason::None: return "none";
    case VerdictReason::Breaker: return "breaker";
    case VerdictReason::Axes: return "axes";
    case VerdictReason::UnsafeShift: return "unsafe-shift";
    case VerdictReason::SharedParameter: return "shared-parameter";
    case VerdictReason::ParameterConflict: return "parameter-conflict";
    case VerdictReason::NotSelected: return "not-selected";
    case VerdictReason::NoAxes: return "no-axes";
    case VerdictReason::TurnedOff: return "turned-off";
  }
  return "?";
}

const char* toString(UntieMode mode) {
  switch (mode) {
    case UntieMode::InPlace: return "in-place";
    case UntieMode::OwnAttribute: return "own-attribute";
    case UntieMode::RedirectReads: return "redirect-reads";
  }
  return "?";
}

std::size_t AnalysisResult::foldableCount() const {
  return std::count_if(layerNorms.begin(), layerNorms.end(), [](const auto& v) { return v.foldable; });
}

int64_t AnalysisResult::untieBytes() const {
  int64_t b = 0;
  for (const auto& p : plan) b += p.untieBytes;
  return b;
}

const LayerNormVerdict* AnalysisResult::verdictFor(NodeId lnNode) const {
  for (const auto& v : layerNorms)
    if (v.info.node == lnNode) return &v;
  return nullptr;
}

std::string describePath(const Graph& graph, const std::vector<NodeId>& path, const char* arrow) {
  std::string s;
  for (std::size_t i = 0; i < path.size(); ++i) {
    const auto& n = graph.node(path[i]);
    s += (i ? std::string(" ") + arrow + " " : "") + n.kind;
    if (!n.modulePath.empty()) s += " @ " + n.modulePath;
  }
  return s;
}

std::vector<std::pair<ValueId, NodeId>> leafParameterUses(const Graph& g, const Leaf& leaf) {
  std::vector<std::pair<ValueId, NodeId>> uses;
  if (leaf.kind == LeafKind::Parameter) {
    for (const auto& u : g.value(leaf.output).uses) uses.emplace_back(leaf.output, u.node);
    return uses;
  }
  std::vector<NodeId> nodes = leaf.chain;
  nodes.push_back(leaf.node);
  for (auto n : nodes)
    for (auto in : g.node(n).inputs)
      if (g.value(in).param != kNone) uses.emplace_back(in, n);
  return uses;
}

// Phase 3, one leaf (checkShift, following the shift forward): shift_check.cpp.

namespace {

/// LN ... breaker, following the blame of broken facts back to where they broke.
std::vector<NodeId> blamePath(const Graph& g, const std::vector<MeanZeroFact>& facts, NodeId ln,
                              ValueId start) {
  std::vector<NodeId> path{ln};
  ValueId v = start;
  for (std::size_t guard = 0; guard < g.valueCount() + 1; ++guard) {
    const auto& f = facts.at(v);
    auto producer = g.value(v).producer;
    if (producer == kNone) break;
    path.push_back(producer);
    if (f.blamed == kNone || producer == f.breaker) break;
    v = f.blamed;
  }
  if (path.back() != facts.at(start).breaker && facts.at(start).breaker != kNone)
    path.push_back(facts.at(start).breaker);
  return path;
}

bool sameActions(std::vector<CenterAction> a, std::vector<CenterAction> b) {
  auto key = [](const CenterAction& x) { return std::make_tuple(x.param, x.axis, x.groups, x.scale); };
  auto less = [&](const CenterAction& x, const CenterAction& y) { return key(x) < key(y); };
  std::sort(a.begin(), a.end(), less);
  std::sort(b.begin(), b.end(), less);
  a.erase(std::unique(a.begin(), a.end()), a.end());
  b.erase(std::unique(b.begin(), b.end()), b.end());
  return a == b;
}

/// Why a centered leaf cannot be centered after all, and the parameter it is about.
struct LeafProblem {
  VerdictReason reason = VerdictReason::None;
  std::string why;
  ParamId param = kNone;  // SharedParameter / ParameterConflict
};
using LeafProblems = std::map<LeafId, LeafProblem>;

/// Phase 1: mean-zero facts of every value, one forward pass in topological order. An inserted
/// centering replaces its value's fact by a leaf of its own (nothing to center; the value
/// changes by its row mean, which the shift walk follows like a centered leaf's change).
void computeFacts(const Graph& g, AnalysisResult& result,
                  const std::vector<std::pair<ValueId, AxisSet>>& inserted) {
  result.facts.assign(g.valueCount(), MeanZeroFact{});
  RowTracker rows(g);  // facts of row ranges: a slice of one part's rows gets that part's fact
  for (auto id : g.topologicalOrder()) {
    const auto& rule = ruleFor(g, id);
    MeanZeroContext ctx(g, id, result.facts, result.leaves, rule.name);
    rule.meanZero(ctx);
    rows.update(id, rule.name, result.facts);
    for (const auto& [value, axes] : inserted) {
      if (g.value(value).producer != id) continue;
      Leaf leaf;
      leaf.id = result.leaves.size();
      leaf.kind = LeafKind::InsertedCentering;
      leaf.node = id;
      leaf.output = value;
      leaf.axes = axes;
      leaf.rule = "inserted-centering";
      result.leaves.push_back(leaf);
      result.facts.at(value) = MeanZeroFact::meanZero(axes, {leaf.id}, leaf.rule);
    }
  }
}

/// Phase 2: a verdict per LayerNorm; an LN whose input is mean-zero within its normalized axes
/// (and selected) is a candidate, the others get their reason now.
std::vector<bool> findCandidates(const Graph& g, const AnalysisOptions& options, AnalysisResult& result) {
  auto infos = findLayerNorms(g);
  for (const auto& path : options.only)
    if (std::none_of(infos.begin(), infos.end(), [&](const auto& ln) { return ln.modulePath == path; }))
      throw UnknownLayerNormPath(path);
  std::vector<bool> candidate(infos.size(), false);
  for (std::size_t i = 0; i < infos.size(); ++i) {
    LayerNormVerdict v;
    v.info = infos[i];
    const auto& node = g.node(v.info.node);
    ValueId input = node.inputs.at(0);
    const auto& f = result.facts.at(input);
    auto rank = rankOf(g, input);
    auto normalized = AxisSet::trailing(rank, int64_t(v.info.normalizedShape.size()));
    bool selected = options.only.empty() ||
                    std::find(options.only.begin(), options.only.end(), v.info.modulePath) != options.only.end();
    if (rank < 0) {
      v.reason = VerdictReason::NoAxes;
      v.explanation = "the input shape was not recorded";
    } else if (f.isMeanZero() && !f.axes.empty() && f.axes.subsetOf(normalized)) {
      v.leaves = f.leaves;
      if (!selected) {
        v.reason = VerdictReason::NotSelected;
        v.explanation = "foldable, but not among the selected LayerNorms";
      } else {
        candidate[i] = true;
      }
    } else if (f.isMeanZero()) {
      v.reason = VerdictReason::Axes;
      v.leaves = f.leaves;
      v.explanation = "its input can be made mean-zero only along axes " + toString(f.axes) +
                      " of " + g.describeTensor(input) + ", not within the normalized axes " +
                      toString(normalized);
    } else {
      v.reason = VerdictReason::Breaker;
      v.breaker = f.breaker;
      v.path = blamePath(g, result.facts, v.info.node, input);
      v.explanation = f.breaker == kNone ? f.reason
                                         : g.describeNode(f.breaker) + ": " + f.reason;
    }
    result.layerNorms.push_back(std::move(v));
  }
  return candidate;
}

/// The leaves the remaining candidates need.
std::set<LeafId> planLeaves(const AnalysisResult& result, const std::vector<bool>& candidate) {
  std::set<LeafId> centered;
  for (std::size_t i = 0; i < candidate.size(); ++i)
    if (candidate[i]) centered.insert(result.layerNorms[i].leaves.begin(), result.layerNorms[i].leaves.end());
  return centered;
}

/// Every centered leaf's shift must end in absorbers (checked once per leaf, kept in the result).
/// A scaled leaf needs scale absorption turned on.
void checkShiftSafety(const Graph& g, const AnalysisOptions& options, const std::set<LeafId>& centered,
                      AnalysisResult& result, LeafProblems& problems) {
  for (auto l : centered) {
    if (const auto& leaf = result.leaves[l]; leaf.scale != kNone && !options.scaleAbsorb) {
      problems[l] = {VerdictReason::TurnedOff,
                     "absorbing the scale " + g.parameter(leaf.scale).path + " into " +
                         g.describeNode(leaf.node) + " is turned off (setting scaleAbsorb)",
                     leaf.scale};
      continue;
    }
    auto it = result.shiftChecks.find(l);
    if (it == result.shiftChecks.end())
      it = result.shiftChecks.emplace(l, checkShift(g, result.leaves[l])).first;
    if (!it->second.safe) problems[l] = {VerdictReason::UnsafeShift, it->second.why, kNone};
  }
}

/// How the leaves of one parameter get their centered copy, given the reads they cover.
UntieMode untieModeFor(const Graph& g, const Parameter& param, bool untie,
                       const std::set<std::pair<ValueId, NodeId>>& covered) {
  if (!untie) return UntieMode::InPlace;
  for (auto read : param.reads)
    for (const auto& use : g.value(read).uses)
      if (!covered.count({read, use.node})) return UntieMode::RedirectReads;
  return UntieMode::OwnAttribute;
}

/// Parameters: the centered leaves must agree on each parameter's actions; a parameter whose
/// storage is also read elsewhere is untied (or, when that is not allowed, its leaves fail).
std::vector<ParameterPlan> resolveTies(const Graph& g, const AnalysisOptions& options,
                                       const AnalysisResult& result, const std::set<LeafId>& centered,
                                       LeafProblems& problems) {
  auto storageGroup = [&](ParamId p) {
    std::vector<ParamId> group{p};
    if (auto t = g.parameter(p).tiedGroup; t >= 0) group = g.tiedGroups().at(t);
    return group;
  };
  auto actionsOn = [&](LeafId l, ParamId param) {
    std::vector<CenterAction> mine;
    for (const auto& a : result.leaves[l].actions)
      if (a.param == param) mine.push_back(a);
    return mine;
  };
  auto fail = [&](const std::vector<LeafId>& leafIds, VerdictReason reason, const std::string& why, ParamId param) {
    for (auto l : leafIds) problems.emplace(l, LeafProblem{reason, why, param});
  };

  std::map<ParamId, std::vector<LeafId>> leavesByParam;
  for (auto l : centered)
    for (const auto& a : result.leaves[l].actions) leavesByParam[a.param].push_back(l);
  // A scaled leaf reads its scale as it is: no leaf may center that scale too.
  for (auto l : centered)
    if (auto s = result.leaves[l].scale; s != kNone && leavesByParam.count(s))
      fail({l}, VerdictReason::ParameterConflict,
           "the scale " + g.parameter(s).path + " absorbed into " + g.describeNode(result.leaves[l].node) +
               " is itself centered by another leaf", s);
  std::vector<ParameterPlan> plan;
  for (auto& [param, leafIds] : leavesByParam) {
    std::sort(leafIds.begin(), leafIds.end());
    leafIds.erase(std::unique(leafIds.begin(), leafIds.end()), leafIds.end());
    auto actions = actionsOn(leafIds.front(), param);
    if (std::any_of(leafIds.begin(), leafIds.end(), [&](LeafId l) { return !sameActions(actionsOn(l, param), actions); })) {
      fail(leafIds, VerdictReason::ParameterConflict,
           "parameter " + g.parameter(param).path +
               " would need centering along different axes by different leaves", param);
      continue;
    }
    // Only the reads of this parameter's storage: a leaf also reads other parameters (an
    // embedding's index buffer, a linear's bias, a scaled leaf's gamma), and the fold redirects
    // every covered read to this parameter's centered copy (UntieMode::RedirectReads).
    const auto group = storageGroup(param);
    std::set<std::pair<ValueId, NodeId>> covered;
    for (auto l : leafIds)
      for (const auto& u : leafParameterUses(g, result.leaves[l]))
        if (std::find(group.begin(), group.end(), g.value(u.first).param) != group.end()) covered.insert(u);
    ParameterPlan pp;
    pp.param = param;
    pp.actions = actions;
    pp.leaves = leafIds;
    pp.coveredReads.assign(covered.begin(), covered.end());
    auto uncovered = [&](ValueId read) -> std::optional<NodeId> {
      for (const auto& use : g.value(read).uses)
        if (!covered.count({read, use.node})) return use.node;
      return std::nullopt;
    };
    std::set<ValueId> other;
    for (auto member : group)
      for (auto read : g.parameter(member).reads)
        if (uncovered(read)) other.insert(read);
    if (!other.empty()) {
      pp.untie = true;
      pp.otherReads.assign(other.begin(), other.end());
      pp.untieBytes = g.parameter(param).bytes;
      if (!options.allowUntie)
        fail(leafIds, VerdictReason::SharedParameter,
             "parameter " + g.parameter(param).path + " is also read by " +
                 g.describeNode(*uncovered(*other.begin())) + " (tied or shared); untying it is not allowed",
             param);
    }
    pp.untieMode = untieModeFor(g, g.parameter(param), pp.untie, covered);
    plan.push_back(std::move(pp));
  }
  return plan;
}

/// Candidates needing a leaf with a problem are not foldable, with that problem as the reason.
/// True when any candidate was rejected (the leaves to center then change: iterate).
bool rejectUnsafe(const Graph& g, const LeafProblems& problems, AnalysisResult& result,
                  std::vector<bool>& candidate) {
  bool changed = false;
  for (std::size_t i = 0; i < candidate.size(); ++i) {
    if (!candidate[i]) continue;
    auto& v = result.layerNorms[i];
    for (auto l : v.leaves) {
      auto bad = problems.find(l);
      if (bad == problems.end()) continue;
      candidate[i] = false;
      changed = true;
      v.reason = bad->second.reason;
      v.unsafeLeaf = l;
      if (v.reason == VerdictReason::UnsafeShift) {
        const auto& check = result.shiftChecks.at(l);
        v.consumer = check.consumer;
        v.path = check.path;
        v.explanation = "centering " + describeLeaf(g, result.leaves[l]) + " changes what " +
                        g.describeNode(check.consumer) + " sees: " + check.why;
      } else {
        if (v.reason != VerdictReason::TurnedOff) v.sharedParameter = bad->second.param;
        v.explanation = bad->second.why;
      }
      break;
    }
  }
  return changed;
}

}  // namespace

AnalysisResult solveFoldability(const Graph& g, const AnalysisOptions& options,
                                const std::vector<std::pair<ValueId, AxisSet>>& inserted) {
  auto started = std::chrono::steady_clock::now();
  AnalysisResult result;
  computeFacts(g, result, inserted);
  auto candidate = findCandidates(g, options, result);
  // Phase 3 to a fixed point: removing a candidate only removes leaves, so this ends.
  for (bool changed = true; changed;) {
    ++result.iterations;
    auto centered = planLeaves(result, candidate);
    LeafProblems problems;
    checkShiftSafety(g, options, centered, result, problems);
    auto plan = resolveTies(g, options, result, centered, problems);
    changed = rejectUnsafe(g, problems, result, candidate);
    if (!changed) {
      result.plan = std::move(plan);
      result.centeredLeaves = std::move(centered);
    }
  }
  for (std::size_t i = 0; i < candidate.size(); ++i)
    if (candidate[i]) {
      result.layerNorms[i].foldable = true;
      result.layerNorms[i].reason = VerdictReason::None;
      result.layerNorms[i].explanation = "foldable";
    }
  result.milliseconds =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count();
  return result;
}

}  // namespace foldnorm
