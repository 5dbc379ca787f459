// The dataflow view: the graph as a person (or a renderer) wants to see it.
//
// A traced graph is half plumbing: constants, GetAttr chains, list/tuple construct and unpack,
// size/NumToTensor/Int shape arithmetic (graph.h's isPlumbing()). The view hides that:
//  - visible: every non-plumbing node that produces a tensor, one node per model input and one
//    per model output (tuple outputs are flattened, one node per element);
//  - edges are contracted through the hidden nodes that only bundle tensors
//    (ListConstruct -> cat, split -> ListUnpack -> users, TupleConstruct -> return); each edge
//    names the tensor it carries and its recorded shape. Hidden shape arithmetic (size -> view)
//    makes no edge: it carries no data;
//  - parameters are not nodes: a node that reads one carries a ParameterNote
//    ("weight: transformer.h.0.attn.c_attn.weight [768, 2304]").
// With hidePlumbing = false the view is the full graph (every node, every use, no notes), so
// renderers handle both with one code path.
//
// The view is a derived, read-only snapshot; it refers back to graph node and value ids.
// Its storage (a Boost adjacency list) stays in the .cpp.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "foldnorm/graph/graph.h"

namespace foldnorm {

/// Index of a node or an edge in a DataflowView (not a graph NodeId).
using ViewIndex = std::size_t;

struct DataflowViewOptions {
  bool hidePlumbing = true;  // false: the full graph
};

/// A parameter read by a visible node, shown as a note on it rather than as a node.
struct ParameterNote {
  ParamId param = kNone;
  std::string role;             // the last component of the path: "weight", "bias", "wpe", ...
  std::string path;             // "transformer.h.0.attn.c_attn.weight"
  std::vector<int64_t> shape;
  std::string text() const;     // "weight: transformer.h.0.attn.c_attn.weight [768, 2304]"
};

struct ViewNode {
  enum class Kind { Op, ModelInput, ModelOutput };
  Kind kind = Kind::Op;
  NodeId node = kNone;     // Op: the graph node. ModelInput/ModelOutput: kNone
  ValueId value = kNone;   // Op: its first tensor output (kNone if none); Input/Output: the value
  std::string opKind;      // Op: "aten::linear"; "input" / "output"
  std::string name;        // Input: the value's debug name; Output: "output 0", "output 1.2", ...
  std::string modulePath;  // Op: the node's module path; Input/Output: ""
  std::string shape;       // formatted shape of `value` ("[2, 16, 768]"), "" when unknown
  std::vector<ParameterNote> parameters;  // dataflow view only
};

struct ViewEdge {
  ViewIndex from = kNone;
  ViewIndex to = kNone;
  ValueId value = kNone;        // the tensor as the consumer reads it (or the part, for lists)
  std::string shape;            // its formatted shape, "" when unknown
  std::vector<NodeId> through;  // hidden nodes the edge was contracted through, source side last
};

class DataflowView {
 public:
  DataflowView();
  ~DataflowView();
  DataflowView(DataflowView&&) noexcept;
  DataflowView& operator=(DataflowView&&) noexcept;
  DataflowView(const DataflowView&) = delete;
  DataflowView& operator=(const DataflowView&) = delete;

  const std::vector<ViewNode>& nodes() const { return nodes_; }
  const std::vector<ViewEdge>& edges() const { return edges_; }
  const ViewNode& node(ViewIndex i) const { return nodes_.at(i); }
  const ViewEdge& edge(ViewIndex i) const { return edges_.at(i); }

  /// The view node showing graph node `node`, or kNone when it is hidden.
  ViewIndex indexOf(NodeId node) const;
  /// Edge indices into / out of a view node, in insertion order.
  std::vector<ViewIndex> inEdges(ViewIndex node) const;
  std::vector<ViewIndex> outEdges(ViewIndex node) const;
  /// View nodes, producers before consumers.
  std::vector<ViewIndex> topologicalOrder() const;

  /// The subview on the nodes with keep[i] (edges between kept nodes only, indices renumbered).
  DataflowView induced(const std::vector<bool>& keep) const;

  // ---- building (buildDataflowView) ----
  ViewNode& node(ViewIndex i) { return nodes_.at(i); }
  ViewIndex addNode(ViewNode node);
  ViewIndex addEdge(ViewEdge edge);

 private:
  struct Storage;
  std::vector<ViewNode> nodes_;
  std::vector<ViewEdge> edges_;
  std::vector<ViewIndex> byGraphNode_;  // graph NodeId -> view index (kNone when hidden)
  std::unique_ptr<Storage> storage_;
};

DataflowView buildDataflowView(const Graph& graph, const DataflowViewOptions& options = {});

/// Whether a graph node is shown in the dataflow view (not plumbing, produces a tensor).
bool isVisibleInDataflow(const Graph& graph, NodeId node);

}  // namespace foldnorm
