#include "foldnorm/analysis/analysis.h"
#include "foldnorm/common/error.h"

#include <algorithm>
#include <chrono>
#include <deque>
#include <unordered_map>

#include "foldnorm/analysis/axes.h"
#include "foldnorm/analysis/rules.h"

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

namespace {

/// Phase 3, one leaf: follow the shift forward. Constant axes meet (intersect) over paths.
ShiftCheck checkShift(const Graph& g, const Leaf& leaf) {
  ShiftCheck check;
  if (leaf.kind == LeafKind::MeanSubtraction) return check;  // nothing is changed
  std::unordered_map<ValueId, AxisSet> constantAxes;
  std::unordered_map<ValueId, std::pair<ValueId, NodeId>> parent;  // value <- (value, via node)
  std::deque<ValueId> queue;
  constantAxes[leaf.output] = leaf.axes;
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
    AxisSet axes = constantAxes[v];
    for (const auto& use : g.value(v).uses) {
      const auto& rule = ruleFor(g, use.node);
      auto outcome = rule.shift(ShiftInput{g, use.node, use.slot, axes});
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
            auto it = constantAxes.find(out);
            if (it == constantAxes.end()) {
              constantAxes[out] = outAxes;
              parent[out] = {v, use.node};
              queue.push_back(out);
            } else {
              auto met = it->second & outAxes;
              if (met != it->second) {
                it->second = met;
                queue.push_back(out);
              }
            }
          }
          break;
      }
    }
  }
  check.absorbers.assign(absorbers.begin(), absorbers.end());
  return check;
}

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
  auto key = [](const CenterAction& x) { return std::make_tuple(x.param, x.axis, x.groups); };
  auto less = [&](const CenterAction& x, const CenterAction& y) { return key(x) < key(y); };
  std::sort(a.begin(), a.end(), less);
  std::sort(b.begin(), b.end(), less);
  a.erase(std::unique(a.begin(), a.end()), a.end());
  b.erase(std::unique(b.begin(), b.end()), b.end());
  return a == b;
}

}  // namespace

AnalysisResult analyzeFoldability(const Graph& g, const AnalysisOptions& options) {
  auto started = std::chrono::steady_clock::now();
  AnalysisResult result;
  result.facts.assign(g.valueCount(), MeanZeroFact{});

  // ---- phase 1: mean-zero facts, one forward pass ----
  for (auto id : g.topologicalOrder()) {
    const auto& rule = ruleFor(g, id);
    MeanZeroContext ctx(g, id, result.facts, result.leaves, rule.name);
    rule.meanZero(ctx);
  }

  // ---- phase 2: candidates ----
  auto infos = findLayerNorms(g);
  for (const auto& path : options.only)
    if (std::none_of(infos.begin(), infos.end(), [&](const auto& ln) { return ln.modulePath == path; }))
      throw Error("--only " + path + ": no LayerNorm with that module path (foldnorm analyze lists them)");
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
        v.explanation = "foldable, but not selected (--only)";
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

  // ---- phase 3: safety to a fixed point ----
  // Every read of every parameter (by storage group) and which leaf, if any, it belongs to.
  auto storageGroup = [&](ParamId p) {
    std::vector<ParamId> group{p};
    if (auto t = g.parameter(p).tiedGroup; t >= 0) group = g.tiedGroups().at(t);
    return group;
  };
  auto readsOfLeaf = [&](const Leaf& leaf) { return leafParameterUses(g, leaf); };

  bool changed = true;
  while (changed) {
    changed = false;
    ++result.iterations;
    std::set<LeafId> centered;
    for (std::size_t i = 0; i < infos.size(); ++i)
      if (candidate[i]) centered.insert(result.layerNorms[i].leaves.begin(), result.layerNorms[i].leaves.end());

    std::map<LeafId, std::pair<VerdictReason, std::string>> badLeaf;
    std::map<LeafId, ParamId> badLeafParam;
    for (auto l : centered) {
      auto it = result.shiftChecks.find(l);
      if (it == result.shiftChecks.end())
        it = result.shiftChecks.emplace(l, checkShift(g, result.leaves[l])).first;
      if (!it->second.safe) badLeaf[l] = {VerdictReason::UnsafeShift, it->second.why};
    }

    // Parameters: actions must agree across the centered leaves; other reads need an untie.
    std::map<ParamId, std::vector<LeafId>> leavesByParam;
    for (auto l : centered)
      for (const auto& a : result.leaves[l].actions) leavesByParam[a.param].push_back(l);
    std::vector<ParameterPlan> plan;
    for (auto& [param, leafIds] : leavesByParam) {
      std::sort(leafIds.begin(), leafIds.end());
      leafIds.erase(std::unique(leafIds.begin(), leafIds.end()), leafIds.end());
      std::vector<CenterAction> actions;
      for (const auto& a : result.leaves[leafIds.front()].actions)
        if (a.param == param) actions.push_back(a);
      bool conflict = false;
      for (auto l : leafIds) {
        std::vector<CenterAction> mine;
        for (const auto& a : result.leaves[l].actions)
          if (a.param == param) mine.push_back(a);
        if (!sameActions(mine, actions)) conflict = true;
      }
      if (conflict) {
        for (auto l : leafIds) {
          badLeaf.emplace(l, std::make_pair(VerdictReason::ParameterConflict,
                                            "parameter " + g.parameter(param).path +
                                                " would need centering along different axes by different leaves"));
          badLeafParam.emplace(l, param);
        }
        continue;
      }
      std::set<std::pair<ValueId, NodeId>> covered;
      for (auto l : leafIds)
        for (const auto& u : readsOfLeaf(result.leaves[l])) covered.insert(u);
      ParameterPlan pp;
      pp.param = param;
      pp.actions = actions;
      pp.leaves = leafIds;
      std::set<ValueId> other;
      for (auto member : storageGroup(param))
        for (auto read : g.parameter(member).reads)
          for (const auto& use : g.value(read).uses)
            if (!covered.count({read, use.node})) other.insert(read);
      if (!other.empty()) {
        pp.untie = true;
        pp.otherReads.assign(other.begin(), other.end());
        pp.untieBytes = g.parameter(param).bytes;
        if (!options.allowUntie) {
          std::string who;
          for (auto r : other) {
            for (const auto& use : g.value(r).uses)
              if (!covered.count({r, use.node})) { who = g.describeNode(use.node); break; }
            if (!who.empty()) break;
          }
          for (auto l : leafIds) {
            badLeaf.emplace(l, std::make_pair(VerdictReason::SharedParameter,
                                              "parameter " + g.parameter(param).path +
                                                  " is also read by " + who +
                                                  " (tied or shared); untying it is forbidden (--no-untie)"));
            badLeafParam.emplace(l, param);
          }
        }
      }
      plan.push_back(std::move(pp));
    }

    for (std::size_t i = 0; i < infos.size(); ++i) {
      if (!candidate[i]) continue;
      auto& v = result.layerNorms[i];
      for (auto l : v.leaves) {
        auto bad = badLeaf.find(l);
        if (bad == badLeaf.end()) continue;
        candidate[i] = false;
        changed = true;
        v.reason = bad->second.first;
        v.unsafeLeaf = l;
        if (v.reason == VerdictReason::UnsafeShift) {
          const auto& check = result.shiftChecks.at(l);
          v.consumer = check.consumer;
          v.path = check.path;
          v.explanation = "centering " + describeLeaf(g, result.leaves[l]) + " changes what " +
                          g.describeNode(check.consumer) + " sees: " + check.why;
        } else {
          v.sharedParameter = badLeafParam.at(l);
          v.explanation = bad->second.second;
        }
        break;
      }
    }
    if (!changed) {
      result.plan = std::move(plan);
      result.centeredLeaves = centered;
    }
  }
  for (std::size_t i = 0; i < infos.size(); ++i)
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
