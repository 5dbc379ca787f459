// Text and JSON reports of an analysis. The JSON schema is documented in docs/json-schema.md.
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "foldnorm/analysis/analysis.h"
#include "foldnorm/analysis/rules.h"
#include "foldnorm/common/measure.h"

namespace foldnorm {
namespace {

std::string actionText(const Graph& g, const CenterAction& a) {
  std::string s = g.parameter(a.param).path + " along dim " + std::to_string(a.axis);
  if (a.groups > 1) s += " within " + std::to_string(a.groups) + " groups";
  if (a.scale != kNone) s += " scaled by " + g.parameter(a.scale).path;
  return s;
}

nlohmann::json nodeJson(const Graph& g, NodeId id) {
  const auto& n = g.node(id);
  nlohmann::json j{{"id", id}, {"op", n.kind}, {"module", n.modulePath}};
  if (!n.sourceLocation.empty()) j["source"] = n.sourceLocation;
  if (!n.outputs.empty() && g.value(n.outputs[0]).tensor) j["output"] = g.describeTensor(n.outputs[0]);
  return j;
}

nlohmann::json actionJson(const Graph& g, const CenterAction& a) {
  nlohmann::json j{{"axis", a.axis}, {"groups", a.groups}};
  if (a.scale != kNone) j["scale"] = g.parameter(a.scale).path;  // scaled centering
  return j;
}

const char* kScaledRationale =
    "gamma * (W' h + b') with W'[c] = W[c] - mean_k(gamma_k W[k]) / gamma_c (b likewise) equals "
    "y - mean(y): mean-zero, changed by a per-row constant the shift walk follows";

nlohmann::json leafJson(const Graph& g, const Leaf& leaf) {
  nlohmann::json actions = nlohmann::json::array();
  for (const auto& a : leaf.actions) {
    auto aj = actionJson(g, a);
    aj["parameter"] = g.parameter(a.param).path;
    actions.push_back(aj);
  }
  nlohmann::json j{{"id", leaf.id},
                   {"kind", toString(leaf.kind)},
                   {"node", nodeJson(g, leaf.node)},
                   {"axes", leaf.axes.axes()},
                   {"center", actions},
                   {"rule", leaf.rule}};
  if (leaf.scale != kNone) {
    j["scale"] = g.parameter(leaf.scale).path;
    j["scale_node"] = nodeJson(g, leaf.scaleNode);
  }
  return j;
}

nlohmann::json insertionJson(const Graph& g, const InsertedCentering& ic) {
  const auto* shape = g.value(ic.value).tensor ? &g.value(ic.value).tensor->shape : nullptr;
  nlohmann::json j{{"after", nodeJson(g, ic.after)},
                   {"value", ic.value},
                   {"axes", ic.axes.axes()},
                   {"rank", shape ? int64_t(shape->size()) : -1},
                   {"inserted", ic.inserted},
                   {"description", describeInsertion(g, ic)}};
  auto ids = [](const std::vector<NodeId>& nodes) {
    auto a = nlohmann::json::array();
    for (auto n : nodes) a.push_back(n);
    return a;
  };
  j["blamed_by"] = ids(ic.blamedBy);
  if (ic.inserted) {
    j["leaf"] = ic.leaf;
    j["frees"] = ids(ic.frees);
    j["saves_mean_subtractions"] = ic.frees.empty() ? 0 : ic.frees.size() - 1;
  } else {
    j["why"] = ic.why;
    if (ic.consumer != kNone) j["consumer"] = nodeJson(g, ic.consumer);
    auto path = nlohmann::json::array();
    for (auto n : ic.path) path.push_back(nodeJson(g, n));
    j["path"] = path;
  }
  return j;
}

}  // namespace

std::string describeLeaf(const Graph& g, const Leaf& leaf) {
  const auto& n = g.node(leaf.node);
  std::string s = std::string(toString(leaf.kind));
  if (leaf.kind == LeafKind::Parameter && !leaf.actions.empty())
    return s + " " + g.parameter(leaf.actions[0].param).path;
  if (leaf.kind == LeafKind::InsertedCentering) s = "inserted centering after " + n.kind;
  if (!n.modulePath.empty()) s += " @ " + n.modulePath;
  else if (leaf.kind != LeafKind::InsertedCentering) s += " (" + n.kind + ")";
  if (leaf.scale != kNone) s += " scaled by " + g.parameter(leaf.scale).path;
  return s;
}

nlohmann::json toJson(const Graph& g, const AnalysisResult& r, const std::string& modelPath) {
  nlohmann::json j;
  j["schema"] = "foldnorm-analysis/1";
  j["model"] = modelPath;
  j["summary"] = {{"layer_norms", r.layerNorms.size()},
                  {"foldable", r.foldableCount()},
                  {"not_foldable", r.layerNorms.size() - r.foldableCount()},
                  {"parameters_changed", r.plan.size()},
                  {"scales_absorbed", std::count_if(r.centeredLeaves.begin(), r.centeredLeaves.end(),
                                                    [&](LeafId l) { return r.leaves[l].scale != kNone; })},
                  {"centerings_inserted", std::count_if(r.insertions.begin(), r.insertions.end(),
                                                        [](const auto& i) { return i.inserted; })},
                  {"untie_bytes", r.untieBytes()},
                  {"iterations", r.iterations},
                  {"milliseconds", r.milliseconds}};
  auto lns = nlohmann::json::array();
  for (const auto& v : r.layerNorms) {
    nlohmann::json l{{"module", v.info.modulePath},
                     {"node", nodeJson(g, v.info.node)},
                     {"normalized_shape", v.info.normalizedShape},
                     {"eps", v.info.eps},
                     {"has_weight", v.info.hasWeight},
                     {"has_bias", v.info.hasBias},
                     {"foldable", v.foldable},
                     {"reason", toString(v.reason)},
                     {"explanation", v.explanation}};
    auto leaves = nlohmann::json::array();
    for (auto id : v.leaves) leaves.push_back(id);
    l["leaves"] = leaves;
    if (v.breaker != kNone) l["breaker"] = nodeJson(g, v.breaker);
    if (v.consumer != kNone) l["consumer"] = nodeJson(g, v.consumer);
    if (v.unsafeLeaf != kNone) l["unsafe_leaf"] = v.unsafeLeaf;
    if (v.sharedParameter != kNone) l["shared_parameter"] = g.parameter(v.sharedParameter).path;
    auto path = nlohmann::json::array();
    for (auto n : v.path) path.push_back(nodeJson(g, n));
    l["path"] = path;
    lns.push_back(l);
  }
  j["layer_norms"] = lns;
  std::set<LeafId> mentioned;
  for (const auto& v : r.layerNorms) mentioned.insert(v.leaves.begin(), v.leaves.end());
  auto leaves = nlohmann::json::array();
  for (auto id : mentioned) {
    auto lj = leafJson(g, r.leaves[id]);
    lj["centered"] = r.centeredLeaves.count(id) > 0;
    if (auto c = r.shiftChecks.find(id); c != r.shiftChecks.end()) {
      lj["shift_safe"] = c->second.safe;
      auto abs = nlohmann::json::array();
      for (auto a : c->second.absorbers) abs.push_back(a);
      lj["absorbers"] = abs;
    }
    leaves.push_back(lj);
  }
  j["leaves"] = leaves;
  auto plan = nlohmann::json::array();
  for (const auto& p : r.plan) {
    nlohmann::json pj{{"parameter", g.parameter(p.param).path},
                      {"shape", g.parameter(p.param).shape},
                      {"untie", p.untie},
                      {"untie_bytes", p.untieBytes}};
    auto actions = nlohmann::json::array();
    for (const auto& a : p.actions) actions.push_back(actionJson(g, a));
    pj["center"] = actions;
    pj["leaves"] = p.leaves;
    pj["untie_mode"] = toString(p.untieMode);
    auto covered = nlohmann::json::array();
    for (const auto& [read, node] : p.coveredReads) covered.push_back({{"value", read}, {"node", node}});
    pj["covered_reads"] = covered;
    plan.push_back(pj);
  }
  j["plan"] = plan;
  // The plan's two steps beyond the paper (docs/method.md sections 7 and 8), one entry each.
  auto scales = nlohmann::json::array();
  for (auto l : r.centeredLeaves) {
    const auto& leaf = r.leaves[l];
    if (leaf.scale == kNone) continue;
    auto params = nlohmann::json::array();
    for (const auto& a : leaf.actions) params.push_back(g.parameter(a.param).path);
    const auto& into = g.node(leaf.node);
    scales.push_back({{"leaf", l},
                      {"scale", g.parameter(leaf.scale).path},
                      {"into", into.modulePath.empty() ? into.kind : into.modulePath},
                      {"parameters", params},
                      {"action", "scaled centering"},
                      {"rule", leaf.rule},
                      {"description", "absorb " + g.parameter(leaf.scale).path + " into " +
                                          (into.modulePath.empty() ? into.kind : into.modulePath)},
                      {"rationale", kScaledRationale}});
  }
  j["scale_absorptions"] = scales;
  auto inserted = nlohmann::json::array();
  for (const auto& ic : r.insertions) inserted.push_back(insertionJson(g, ic));
  j["insertions"] = inserted;
  return j;
}

std::string toText(const Graph& g, const AnalysisResult& r, bool verbose) {
  std::string out;
  for (const auto& v : r.layerNorms) {
    std::string name = v.info.modulePath.empty() ? "<top>" : v.info.modulePath;
    if (v.foldable) {
      out += fmt::format("FOLD  {:<36} center:", name);
      std::vector<std::string> parts;
      for (auto l : v.leaves) {
        const auto& leaf = r.leaves[l];
        if (leaf.kind == LeafKind::MeanSubtraction) { parts.push_back("(mean subtraction, nothing)"); continue; }
        if (leaf.kind == LeafKind::InsertedCentering) { parts.push_back("(" + describeLeaf(g, leaf) + ")"); continue; }
        for (const auto& a : leaf.actions) parts.push_back(actionText(g, a));
      }
      std::sort(parts.begin(), parts.end());
      parts.erase(std::unique(parts.begin(), parts.end()), parts.end());
      if (!verbose && parts.size() > 4) {
        out += fmt::format(" {}, {}, ... ({} parameters; the verbose report lists all)\n", parts[0], parts[1], parts.size());
      } else {
        for (std::size_t i = 0; i < parts.size(); ++i) out += (i ? ", " : " ") + parts[i];
        out += "\n";
      }
    } else {
      out += fmt::format("KEEP  {:<36} [{}] {}\n", name, toString(v.reason), v.explanation);
      if (!v.path.empty()) {
        const char* arrow = v.reason == VerdictReason::Breaker ? "<-" : "->";
        out += fmt::format("      path: {}\n", describePath(g, v.path, arrow));
      }
    }
  }
  for (auto l : r.centeredLeaves)
    if (const auto& leaf = r.leaves[l]; leaf.scale != kNone) {
      const auto& into = g.node(leaf.node);
      out += fmt::format("absorb {} into {} (scaled centering, rule {})\n", g.parameter(leaf.scale).path,
                         into.modulePath.empty() ? into.kind : into.modulePath, leaf.rule);
    }
  for (const auto& ic : r.insertions) {
    out += describeInsertion(g, ic) + "\n";
    if (!ic.inserted && !ic.path.empty()) out += fmt::format("      path: {}\n", describePath(g, ic.path, "->"));
  }
  int64_t untied = 0;
  for (const auto& p : r.plan)
    if (p.untie) {
      ++untied;
      out += fmt::format("untie {} ({}): {} other read(s) keep the original\n",
                         g.parameter(p.param).path, humanBytes(p.untieBytes), p.otherReads.size());
    }
  out += fmt::format("\nlayer norms: {}, foldable: {}, not foldable: {}; parameters to change: {}; "
                     "untie: {} ({}); analysis {:.2f} ms\n",
                     r.layerNorms.size(), r.foldableCount(), r.layerNorms.size() - r.foldableCount(),
                     r.plan.size(), untied, humanBytes(r.untieBytes()), r.milliseconds);
  return out;
}

}  // namespace foldnorm
