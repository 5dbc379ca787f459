// What the canvas marks when an LN is selected: its mean-zero graph (the paths from its input
// back to the leaves it needs centered), or why it does not fold (the path to the breaking node,
// or the path along which a centered leaf's shift reaches a consumer that sees it).
#pragma once

#include <cstdint>
#include <string>
#include <unordered_set>
#include <vector>

#include "foldnorm/analysis/analysis.h"

namespace foldnorm::gui {

enum class Role : uint8_t {
  None,
  MeanZero,  // on a path from the LN's input back to a leaf; the value stays mean-zero
  Leaf,      // a leaf to center
  BreakPath, // between the LN and the node that breaks mean-zero
  Breaker,
  ShiftPath, // from an unsafe leaf to the node that sees its shift
  Consumer,  // the node that sees the shift
  SelectedLn,
};
const char* toString(Role role);

struct Highlight {
  NodeId ln = kNone;
  std::vector<Role> roles;                 // by NodeId; empty when nothing is selected
  std::unordered_set<uint64_t> edges;      // edgeKey(from, to) of marked dataflow edges
  std::vector<NodeId> nodes;               // every marked node (for fit-to-selection)

  Role role(NodeId n) const { return n < roles.size() ? roles[n] : Role::None; }
  bool hasEdge(NodeId from, NodeId to) const { return edges.count(edgeKey(from, to)) != 0; }
  static uint64_t edgeKey(NodeId from, NodeId to) {
    return (static_cast<uint64_t>(from) << 32) ^ static_cast<uint64_t>(to);
  }
};

/// The highlight of LN verdict `lnIndex` (index into result.layerNorms).
Highlight computeHighlight(const Graph& graph, const AnalysisResult& result, std::size_t lnIndex);

/// The verdict in the words the table and inspector show: "foldable: centers 3 leaves" or
/// "not foldable (breaker): aten::gelu @ h.0.mlp breaks mean-zero ...".
std::string verdictLine(const LayerNormVerdict& verdict);

/// What the table's reason column says: the explanation of a blocked LN, or for a foldable one
/// the modules of the leaves to center ("center: transformer.wte, transformer.wpe, +3").
std::string reasonText(const Graph& graph, const AnalysisResult& result, const LayerNormVerdict& verdict);

}  // namespace foldnorm::gui
