// One LayerNorm's explanation: the nodes that show why it folds or not, each in a role, the
// data edges between them, and the verdict in one sentence. The `ln:` render view draws it and
// the GUI highlights it on its canvas; both ask this one query, so picture and window agree.
//
// The criteria, decided once (the render and the GUI used to walk the graph each in its own way):
//  - The explanation holds the values the LN input's fact was derived from. Walking back from
//    the LN's input, a value is followed when its fact is of the input's kind and fed it:
//    mean-zero with its leaves among the input's leaves, or broken by the same breaker. The GUI
//    used to follow every mean-zero value and, for a broken LN, only the one blamed path; the
//    render's criterion is kept because it is what the analysis itself combined: a broken LN
//    shows every route its break travels (removing the breaker on one route leaves the others
//    in view), and a mean-zero value the LN's fact never used is not part of its reason.
//  - The walk stops at this LN's leaves (the leaf ops and the transposes between a weight and
//    its op belong to the explanation), at the breaker and at the model inputs.
//  - Bundles hidden by the dataflow view (ListConstruct -> cat, split -> ListUnpack, tuples)
//    are walked through, so every edge joins two nodes the dataflow view shows, as it draws them.
//  - The verdict's path (LN back to the breaker, or unsafe leaf on to the node that sees its
//    shift) is marked with its own role; its end gets the strongest role (breaker, consumer).
// Torch-free, like the rest of the analysis.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "foldnorm/analysis/analysis.h"

namespace foldnorm {

/// What a node does in an LN's explanation. A node keeps its strongest role, in this order from
/// weakest to strongest: the explanation's ends (breaker, consumer) over the paths through them.
enum class ExplanationRole : uint8_t {
  None,
  MeanZero,   // on a route from the LN's input back to a leaf; the value stays mean-zero
  BreakPath,  // between the LN and the node that breaks mean-zero (or on a route of the break)
  ShiftPath,  // from an unsafe leaf on to the node that sees its shift
  Leaf,       // a leaf of this LN (to center when it folds)
  Breaker,
  Consumer,   // sees the centering shift of an unsafe leaf
  SelectedLn,
};
const char* toString(ExplanationRole role);
std::ostream& operator<<(std::ostream& os, ExplanationRole role);

struct LnExplanation {
  std::size_t lnIndex = 0;        // into AnalysisResult::layerNorms
  NodeId ln = kNone;
  std::vector<ExplanationRole> roles;             // by NodeId
  std::vector<NodeId> nodes;                      // every marked node, in the order found
  std::set<std::pair<NodeId, NodeId>> edges;      // (producer, consumer), both shown by the dataflow view
  std::vector<NodeId> path;                       // the verdict's path, as LayerNormVerdict::path
  std::vector<ValueId> modelInputs;               // model inputs the walk reached
  std::string why;                                // the verdict in one sentence

  ExplanationRole role(NodeId n) const { return n < roles.size() ? roles[n] : ExplanationRole::None; }
  bool marked(NodeId n) const { return role(n) != ExplanationRole::None; }
};

/// The explanation of LN verdict `lnIndex`. Throws std::out_of_range for an index past the LNs.
LnExplanation explainLayerNorm(const Graph& graph, const AnalysisResult& result, std::size_t lnIndex);

/// "foldable: centering 3 leaves makes its input mean-zero", or
/// "not foldable (breaker): aten::gelu @ h.0.mlp breaks mean-zero ...".
std::string verdictSentence(const LayerNormVerdict& verdict);

}  // namespace foldnorm
