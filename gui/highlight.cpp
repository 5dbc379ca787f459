#include "highlight.h"

namespace foldnorm::gui {

Highlight computeHighlight(const Graph& graph, const AnalysisResult& result, std::size_t lnIndex) {
  Highlight h;
  if (lnIndex >= result.layerNorms.size()) return h;
  LnExplanation e = explainLayerNorm(graph, result, lnIndex);
  h.ln = e.ln;
  h.roles = std::move(e.roles);
  h.nodes = std::move(e.nodes);
  h.why = std::move(e.why);
  for (const auto& [from, to] : e.edges) h.edges.insert(Highlight::edgeKey(from, to));
  return h;
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
