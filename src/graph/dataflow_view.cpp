#include "foldnorm/graph/dataflow_view.h"

#include <algorithm>
#include <boost/graph/adjacency_list.hpp>
#include <boost/graph/topological_sort.hpp>
#include <iterator>
#include <map>
#include <optional>
#include <set>
#include <tuple>

namespace foldnorm {

// The view's own connectivity, for in/out edge queries and its topological order.
struct DataflowView::Storage {
  using Adjacency = boost::adjacency_list<boost::vecS, boost::vecS, boost::bidirectionalS,
                                          boost::no_property, ViewIndex>;
  Adjacency graph;
};

std::string ParameterNote::text() const { return role + ": " + path + " " + formatShape(shape); }

DataflowView::DataflowView() : storage_(std::make_unique<Storage>()) {}
DataflowView::~DataflowView() = default;
DataflowView::DataflowView(DataflowView&&) noexcept = default;
DataflowView& DataflowView::operator=(DataflowView&&) noexcept = default;

ViewIndex DataflowView::indexOf(NodeId node) const {
  return node < byGraphNode_.size() ? byGraphNode_[node] : kNone;
}

ViewIndex DataflowView::addNode(ViewNode node) {
  ViewIndex i = nodes_.size();
  if (node.kind == ViewNode::Kind::Op && node.node != kNone) {
    if (byGraphNode_.size() <= node.node) byGraphNode_.resize(node.node + 1, kNone);
    byGraphNode_[node.node] = i;
  }
  nodes_.push_back(std::move(node));
  boost::add_vertex(storage_->graph);
  return i;
}

ViewIndex DataflowView::addEdge(ViewEdge edge) {
  ViewIndex i = edges_.size();
  boost::add_edge(edge.from, edge.to, i, storage_->graph);
  edges_.push_back(std::move(edge));
  return i;
}

std::vector<ViewIndex> DataflowView::inEdges(ViewIndex node) const {
  std::vector<ViewIndex> out;
  for (auto [e, end] = boost::in_edges(node, storage_->graph); e != end; ++e)
    out.push_back(storage_->graph[*e]);
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<ViewIndex> DataflowView::outEdges(ViewIndex node) const {
  std::vector<ViewIndex> out;
  for (auto [e, end] = boost::out_edges(node, storage_->graph); e != end; ++e)
    out.push_back(storage_->graph[*e]);
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<ViewIndex> DataflowView::topologicalOrder() const {
  std::vector<Storage::Adjacency::vertex_descriptor> reversed;
  reversed.reserve(nodes_.size());
  boost::topological_sort(storage_->graph, std::back_inserter(reversed));
  return std::vector<ViewIndex>(reversed.rbegin(), reversed.rend());
}

DataflowView DataflowView::induced(const std::vector<bool>& keep) const {
  DataflowView sub;
  std::vector<ViewIndex> renumber(nodes_.size(), kNone);
  for (ViewIndex i = 0; i < nodes_.size(); ++i)
    if (i < keep.size() && keep[i]) renumber[i] = sub.addNode(nodes_[i]);
  for (const auto& e : edges_) {
    if (renumber[e.from] == kNone || renumber[e.to] == kNone) continue;
    ViewEdge copy = e;
    copy.from = renumber[e.from];
    copy.to = renumber[e.to];
    sub.addEdge(std::move(copy));
  }
  return sub;
}

namespace {

bool producesData(const Graph& g, const Node& n) {
  for (auto v : n.outputs) {
    switch (g.value(v).kind) {
      case ValueKind::Tensor:
      case ValueKind::TensorList:
      case ValueKind::Tuple:
      case ValueKind::Other: return true;
      default: break;
    }
  }
  return false;
}

bool isBundle(const Node& n) { return n.kind == "prim::ListConstruct" || n.kind == "prim::TupleConstruct"; }

bool isUnbundle(const Node& n) {
  return n.kind == "prim::ListUnpack" || n.kind == "prim::TupleUnpack" || n.kind == "prim::TupleIndex" ||
         n.kind == "aten::__getitem__" || n.kind == "aten::select.t" || n.kind == "prim::ListIndex";
}

std::string shapeText(const Graph& g, ValueId v) {
  if (v == kNone) return {};
  const auto& t = g.value(v).tensor;
  return t ? formatShape(t->shape) : std::string{};
}

std::string lastComponent(const std::string& path) {
  auto dot = path.rfind('.');
  return dot == std::string::npos ? path : path.substr(dot + 1);
}

/// One place data comes from, found by walking back through hidden bundling nodes.
struct Source {
  ViewIndex from;
  ValueId value;  // the tensor the edge is labelled with
  std::vector<NodeId> through;
};

class Builder {
 public:
  Builder(const Graph& g, DataflowView& view) : g_(g), view_(view) {}

  void build() {
    for (auto v : g_.modelInputs()) {
      ViewNode n;
      n.kind = ViewNode::Kind::ModelInput;
      n.value = v;
      n.opKind = "input";
      n.name = g_.value(v).name;
      n.shape = shapeText(g_, v);
      inputIndex_[v] = view_.addNode(std::move(n));
    }
    for (auto id : g_.topologicalOrder()) {
      if (!isVisibleInDataflow(g_, id)) continue;
      const auto& gn = g_.node(id);
      ViewNode n;
      n.node = id;
      n.opKind = gn.kind;
      n.modulePath = gn.modulePath;
      for (auto out : gn.outputs)
        if (g_.value(out).kind == ValueKind::Tensor) { n.value = out; break; }
      n.shape = shapeText(g_, n.value);
      view_.addNode(std::move(n));
    }
    for (ViewIndex i = 0; i < view_.nodes().size(); ++i) {
      const auto& vn = view_.node(i);
      if (vn.kind != ViewNode::Kind::Op) continue;
      std::vector<ParameterNote> notes;
      for (auto in : g_.node(vn.node).inputs) connect(in, i, notes);
      view_.node(i).parameters = std::move(notes);
    }
    if (g_.returnNode() != kNone) {
      const auto& outs = g_.node(g_.returnNode()).inputs;
      for (std::size_t k = 0; k < outs.size(); ++k) addOutput(outs[k], "output " + std::to_string(k));
    }
  }

 private:
  void addOutput(ValueId v, const std::string& name) {
    const auto& producer = g_.value(v).producer;
    if (producer != kNone && isBundle(g_.node(producer)) && !isVisibleInDataflow(g_, producer)) {
      const auto& parts = g_.node(producer).inputs;
      for (std::size_t k = 0; k < parts.size(); ++k) addOutput(parts[k], name + "." + std::to_string(k));
      return;
    }
    auto kind = g_.value(v).kind;
    if (kind != ValueKind::Tensor && kind != ValueKind::TensorList && kind != ValueKind::Other) return;
    ViewNode n;
    n.kind = ViewNode::Kind::ModelOutput;
    n.value = v;
    n.opKind = "output";
    n.name = name;
    n.shape = shapeText(g_, v);
    ViewIndex i = view_.addNode(std::move(n));
    std::vector<ParameterNote> notes;
    connect(v, i, notes);
  }

  void connect(ValueId in, ViewIndex consumer, std::vector<ParameterNote>& notes) {
    std::vector<Source> sources;
    std::vector<NodeId> through;
    std::set<std::pair<ValueId, ValueId>> seen;
    walk(in, kNone, through, sources, notes, seen);
    for (auto& s : sources) {
      auto key = std::make_tuple(s.from, consumer, s.value);
      if (!edgeKeys_.insert(key).second) continue;
      ViewEdge e;
      e.from = s.from;
      e.to = consumer;
      e.value = s.value;
      e.shape = shapeText(g_, s.value);
      e.through = std::move(s.through);
      view_.addEdge(std::move(e));
    }
  }

  // Walks back from value `v` to the visible nodes whose data it carries. `label` is the first
  // tensor with a recorded shape seen on the way (what the consumer actually receives).
  void walk(ValueId v, ValueId label, std::vector<NodeId>& through, std::vector<Source>& out,
            std::vector<ParameterNote>& notes, std::set<std::pair<ValueId, ValueId>>& seen) {
    const auto& value = g_.value(v);
    if (label == kNone && value.tensor) label = v;
    // Visited per (value, label): two parts unpacked from one list reach the same container but
    // are different edges (split -> a, b -> cat gives two), while a shared sub-bundle is walked once.
    if (!seen.insert({v, label}).second) return;
    if (value.param != kNone) {
      const auto& p = g_.parameter(value.param);
      bool dup = std::any_of(notes.begin(), notes.end(), [&](const auto& n) { return n.param == p.id; });
      if (!dup) notes.push_back(ParameterNote{p.id, lastComponent(p.path), p.path, p.shape});
      return;
    }
    NodeId p = value.producer;
    if (p == kNone) return;
    if (p == g_.graphInputNode()) {
      auto it = inputIndex_.find(v);
      if (it != inputIndex_.end()) out.push_back(Source{it->second, label == kNone ? v : label, through});
      return;
    }
    if (isVisibleInDataflow(g_, p)) {
      out.push_back(Source{view_.indexOf(p), label == kNone ? v : label, through});
      return;
    }
    const auto& n = g_.node(p);
    if (isBundle(n)) {
      through.push_back(p);
      for (auto part : n.inputs) walk(part, label, through, out, notes, seen);
      through.pop_back();
    } else if (isUnbundle(n) && !n.inputs.empty()) {
      through.push_back(p);
      // An unpack of a list built right here: follow only the matching part.
      ValueId container = n.inputs[0];
      NodeId builder = g_.value(container).producer;
      std::optional<std::size_t> index;
      if (n.kind == "prim::ListUnpack" || n.kind == "prim::TupleUnpack") index = value.producerSlot;
      else if (n.inputs.size() > 1)
        if (auto k = g_.constantInt(n.inputs[1]); k && *k >= 0) index = static_cast<std::size_t>(*k);
      if (index && builder != kNone && isBundle(g_.node(builder)) && !isVisibleInDataflow(g_, builder) &&
          *index < g_.node(builder).inputs.size()) {
        through.push_back(builder);
        walk(g_.node(builder).inputs[*index], label, through, out, notes, seen);
        through.pop_back();
      } else {
        walk(container, label, through, out, notes, seen);
      }
      through.pop_back();
    }
    // Any other hidden node (constants, size/NumToTensor arithmetic) carries no data.
  }

  const Graph& g_;
  DataflowView& view_;
  std::map<ValueId, ViewIndex> inputIndex_;
  std::set<std::tuple<ViewIndex, ViewIndex, ValueId>> edgeKeys_;
};

DataflowView buildFullView(const Graph& g) {
  DataflowView view;
  for (auto id : g.topologicalOrder()) {
    const auto& gn = g.node(id);
    ViewNode n;
    n.node = id;
    n.opKind = gn.kind;
    n.modulePath = gn.modulePath;
    for (auto out : gn.outputs)
      if (g.value(out).kind == ValueKind::Tensor) { n.value = out; break; }
    n.shape = shapeText(g, n.value);
    view.addNode(std::move(n));
  }
  for (const auto& gn : g.nodes())
    for (auto in : gn.inputs) {
      const auto& v = g.value(in);
      if (v.producer == kNone) continue;
      ViewEdge e;
      e.from = view.indexOf(v.producer);
      e.to = view.indexOf(gn.id);
      e.value = in;
      e.shape = shapeText(g, in);
      view.addEdge(std::move(e));
    }
  return view;
}

}  // namespace

bool isVisibleInDataflow(const Graph& graph, NodeId node) {
  const auto& n = graph.node(node);
  return !isPlumbing(n) && producesData(graph, n);
}

DataflowView buildDataflowView(const Graph& graph, const DataflowViewOptions& options) {
  if (!options.hidePlumbing) return buildFullView(graph);
  DataflowView view;
  Builder(graph, view).build();
  return view;
}

}  // namespace foldnorm
