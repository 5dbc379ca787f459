// What the canvas marks when an LN is selected: the LN's explanation (foldnorm/analysis/explain.h:
// its mean-zero graph back to the leaves it needs centered, or why it does not fold: the routes
// to the breaking node, or the path along which a centered leaf's shift reaches a consumer that
// sees it). The ln: render view draws the same explanation.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_set>
#include <vector>

#include "foldnorm/analysis/analysis.h"
#include "foldnorm/analysis/explain.h"

namespace foldnorm::gui {

/// The roles of explainLayerNorm (toString(Role) comes with them).
using Role = ExplanationRole;

struct Highlight {
  NodeId ln = kNone;
  std::vector<Role> roles;                 // by NodeId; empty when nothing is selected
  std::unordered_set<uint64_t> edges;      // edgeKey(from, to) of marked dataflow edges
  std::vector<NodeId> nodes;               // every marked node (for fit-to-selection)
  std::string why;                         // the verdict in one sentence (LnExplanation::why)

  Role role(NodeId n) const { return n < roles.size() ? roles[n] : Role::None; }
  bool hasEdge(NodeId from, NodeId to) const { return edges.count(edgeKey(from, to)) != 0; }
  static uint64_t edgeKey(NodeId from, NodeId to) {
    return (static_cast<uint64_t>(from) << 32) ^ static_cast<uint64_t>(to);
  }
};

/// The highlight of LN verdict `lnIndex` (index into result.layerNorms): its explanation;
/// empty for an index past the LNs.
Highlight computeHighlight(const Graph& graph, const AnalysisResult& result, std::size_t lnIndex);

/// What the table's reason column says: the explanation of a blocked LN, or for a foldable one
/// the modules of the leaves to center ("center: transformer.wte, transformer.wpe, +3").
std::string reasonText(const Graph& graph, const AnalysisResult& result, const LayerNormVerdict& verdict);

}  // namespace foldnorm::gui
