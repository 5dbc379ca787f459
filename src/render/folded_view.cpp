#include "foldnorm/render/folded_view.h"

namespace foldnorm::render {

const std::vector<FoldedMarkKind>& foldedMarkKinds() {
  // kind, op, role, line, counts as folded, counts as an LN
  static const std::vector<FoldedMarkKind> kinds = {
      {"folded", "foldnorm::rms_norm", NodeRole::FoldableLayerNorm, "RMSNorm (folded)", true, true},
      {"fused", "foldnorm::add_rms_norm", NodeRole::FoldableLayerNorm, "add + RMSNorm (folded, fused)", true, true},
      {"portable", "aten::rms_norm", NodeRole::FoldableLayerNorm, "aten::rms_norm (folded)", true, true},
      {"kept", "aten::layer_norm", NodeRole::BlockedLayerNorm, "LayerNorm (kept)", false, true},
      {"scaled", nullptr, NodeRole::AbsorbedScale, "centered, scale absorbed", false, false},
      {"centered", nullptr, NodeRole::Leaf, "centered", false, false},
      {"untied", nullptr, NodeRole::Leaf, "centered copy (untied)", false, false},
      {"inserted", "aten::sub", NodeRole::InsertedCentering, "x - mean(x) (inserted centering)", false, false,
       kInsertedCenteringSource},
  };
  return kinds;
}

namespace {

bool isPrefixOf(const std::string& prefix, const std::string& path) {
  return prefix.empty() || path == prefix ||
         (path.size() > prefix.size() && path.compare(0, prefix.size(), prefix) == 0 && path[prefix.size()] == '.');
}

bool matches(const FoldedMarkKind& k, const Graph& g, NodeId id, const FoldedMarks& marks) {
  const Node& node = g.node(id);
  if (k.op) return node.kind == k.op && (!k.source || node.sourceLocation.rfind(k.source, 0) == 0);
  auto it = marks.parameters.find(k.kind);
  if (it == marks.parameters.end() || it->second.empty()) return false;
  for (ValueId v : node.inputs) {
    const Value& value = g.value(v);
    if (value.param != kNone && it->second.count(g.parameter(value.param).path)) return true;
  }
  return false;
}

}  // namespace

FoldedMarks foldedMarksFor(const Graph& original, const AnalysisResult& analysis, const Graph& folded) {
  FoldedMarks marks;
  auto& centered = marks.parameters["centered"];
  auto& untied = marks.parameters["untied"];
  auto& scaled = marks.parameters["scaled"];
  for (const ParameterPlan& p : analysis.plan) {
    if (p.param == kNone) continue;
    const Parameter& param = original.parameter(p.param);
    for (const CenterAction& a : p.actions)
      if (a.scale != kNone) scaled.insert(param.path);
    switch (p.untieMode) {
      case UntieMode::InPlace:
        for (const Parameter& other : original.parameters()) {
          if (other.id == param.id || (param.tiedGroup >= 0 && other.tiedGroup == param.tiedGroup)) {
            centered.insert(other.path);
          }
        }
        break;
      case UntieMode::OwnAttribute:
        centered.insert(param.path);
        break;
      case UntieMode::RedirectReads:
        break;  // the copy is a new attribute (below); this path keeps the original
    }
  }
  std::set<std::string> before;
  for (const Parameter& p : original.parameters()) before.insert(p.path);
  for (const Parameter& p : folded.parameters()) {
    if (!p.isConstant && !before.count(p.path)) untied.insert(p.path);
  }
  return marks;
}

std::map<std::string, int> markFoldedScene(Scene& scene, const Graph& g, const FoldedMarks& marks) {
  std::map<std::string, int> counts;
  for (const auto& k : foldedMarkKinds()) counts[k.kind] = 0;
  for (auto& c : scene.clusters) c.layerNorms = c.foldableLayerNorms = 0;
  for (auto& n : scene.nodes) {
    if (n.graphNode == kNone) continue;
    bool first = true;
    for (const auto& k : foldedMarkKinds()) {
      if (!matches(k, g, n.graphNode, marks)) continue;
      ++counts[k.kind];
      n.lines.push_back(k.line);
      if (first) n.role = k.role;
      first = false;
      if (!k.countsAsLayerNorm) continue;
      for (auto& c : scene.clusters) {
        if (!isPrefixOf(c.modulePath, n.modulePath) || c.modulePath == n.modulePath) continue;
        ++c.layerNorms;
        if (k.countsAsFolded) ++c.foldableLayerNorms;
      }
    }
  }
  for (auto& c : scene.clusters) {
    c.label = c.modulePath;
    if (c.layerNorms) {
      c.label += "  (" + std::to_string(c.foldableLayerNorms) + "/" + std::to_string(c.layerNorms) +
                 " norms folded)";
    }
  }
  scene.title = "folded: " + std::to_string(counts["folded"] + counts["fused"] + counts["portable"]) + " RMSNorm" +
                (counts["fused"] ? " (" + std::to_string(counts["fused"]) + " fused with their add)" : "") + ", " +
                std::to_string(counts["kept"]) + " LayerNorm kept, " + std::to_string(counts["centered"]) +
                " ops read centered parameters";
  return counts;
}

}  // namespace foldnorm::render
