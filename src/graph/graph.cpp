#include "foldnorm/graph/graph.h"

#include <algorithm>
#include <boost/graph/topological_sort.hpp>
#include <iterator>
#include <ostream>
#include <sstream>

#include "foldnorm/graph/boost_graph.h"

namespace foldnorm {

const char* toString(ValueKind kind) {
  switch (kind) {
    case ValueKind::Tensor: return "Tensor";
    case ValueKind::Int: return "int";
    case ValueKind::Float: return "float";
    case ValueKind::Bool: return "bool";
    case ValueKind::String: return "str";
    case ValueKind::Device: return "Device";
    case ValueKind::ScalarType: return "ScalarType";
    case ValueKind::None: return "None";
    case ValueKind::IntList: return "int[]";
    case ValueKind::FloatList: return "float[]";
    case ValueKind::BoolList: return "bool[]";
    case ValueKind::TensorList: return "Tensor[]";
    case ValueKind::Tuple: return "Tuple";
    case ValueKind::Module: return "Module";
    case ValueKind::Other: return "other";
  }
  return "other";
}

int64_t TensorInfo::numel() const {
  int64_t n = 1;
  for (auto s : shape) n *= s;
  return n;
}

bool isPlumbing(const Node& node) {
  static const char* const kPlumbing[] = {
      "prim::Constant",     "prim::ListConstruct", "prim::ListUnpack",  "prim::TupleConstruct",
      "prim::TupleUnpack",  "prim::GetAttr",       "aten::size",        "prim::NumToTensor",
      "aten::Int",          "aten::Float",         "aten::ScalarImplicit", "prim::device",
      "prim::dtype",        "aten::dim",           "aten::len",         "prim::TupleIndex",
      "aten::__getitem__",  "prim::shape",         "aten::numel",       "prim::Uninitialized",
      "aten::floordiv",     "aten::sym_size",      "prim::Param",       "prim::Return"};
  if (std::find_if(std::begin(kPlumbing), std::end(kPlumbing),
                   [&](const char* k) { return node.kind == k; }) != std::end(kPlumbing))
    return true;
  return false;
}

Graph::Graph() : storage_(std::make_unique<Storage>()) {}
Graph::~Graph() = default;
Graph::Graph(Graph&&) noexcept = default;
Graph& Graph::operator=(Graph&&) noexcept = default;

NodeId Graph::addNode(std::string kind, std::string modulePath, std::string sourceLocation) {
  Node n;
  n.id = nodes_.size();
  n.kind = std::move(kind);
  n.modulePath = std::move(modulePath);
  n.sourceLocation = std::move(sourceLocation);
  nodes_.push_back(std::move(n));
  auto v = boost::add_vertex(NodeVertex{nodes_.back().id}, storage_->graph);
  (void)v;
  return nodes_.back().id;
}

ValueId Graph::addOutput(NodeId node, std::string name, ValueKind kind, std::string typeName) {
  Value v;
  v.id = values_.size();
  v.name = std::move(name);
  v.kind = kind;
  v.typeName = std::move(typeName);
  v.producer = node;
  v.producerSlot = nodes_.at(node).outputs.size();
  nodes_.at(node).outputs.push_back(v.id);
  values_.push_back(std::move(v));
  return values_.back().id;
}

void Graph::addInput(NodeId node, ValueId value) {
  auto& n = nodes_.at(node);
  std::size_t slot = n.inputs.size();
  n.inputs.push_back(value);
  auto& v = values_.at(value);
  v.uses.push_back(Use{node, slot});
  if (v.producer != kNone) boost::add_edge(v.producer, node, UseEdge{value, slot}, storage_->graph);
}

ParamId Graph::addParameter(Parameter parameter) {
  parameter.id = params_.size();
  params_.push_back(std::move(parameter));
  return params_.back().id;
}

void Graph::setTiedGroups(std::vector<std::vector<ParamId>> groups) {
  tiedGroups_ = std::move(groups);
  for (auto& p : params_) p.tiedGroup = -1;
  for (std::size_t g = 0; g < tiedGroups_.size(); ++g)
    for (auto p : tiedGroups_[g]) params_.at(p).tiedGroup = static_cast<int>(g);
}

std::vector<ValueId> Graph::modelInputs() const {
  std::vector<ValueId> out;
  if (inputNode_ == kNone) return out;
  for (auto v : nodes_.at(inputNode_).outputs)
    if (values_.at(v).kind != ValueKind::Module) out.push_back(v);
  return out;
}

std::vector<ValueId> Graph::modelOutputs() const {
  if (returnNode_ == kNone) return {};
  return nodes_.at(returnNode_).inputs;
}

std::vector<NodeId> Graph::topologicalOrder() const {
  std::vector<BoostVertex> reversed;
  reversed.reserve(nodes_.size());
  boost::topological_sort(storage_->graph, std::back_inserter(reversed));
  return std::vector<NodeId>(reversed.rbegin(), reversed.rend());
}

std::vector<NodeId> Graph::successors(NodeId node) const {
  std::vector<NodeId> out;
  for (auto [e, end] = boost::out_edges(node, storage_->graph); e != end; ++e) {
    NodeId t = boost::target(*e, storage_->graph);
    if (std::find(out.begin(), out.end(), t) == out.end()) out.push_back(t);
  }
  return out;
}

std::vector<NodeId> Graph::predecessors(NodeId node) const {
  std::vector<NodeId> out;
  for (auto [e, end] = boost::in_edges(node, storage_->graph); e != end; ++e) {
    NodeId s = boost::source(*e, storage_->graph);
    if (std::find(out.begin(), out.end(), s) == out.end()) out.push_back(s);
  }
  return out;
}

NodeId Graph::producerOf(NodeId node, std::size_t slot) const {
  const auto& n = nodes_.at(node);
  if (slot >= n.inputs.size()) return kNone;
  return values_.at(n.inputs[slot]).producer;
}

std::optional<int64_t> Graph::constantInt(ValueId v) const {
  const auto& c = values_.at(v).constant;
  if (!c) return std::nullopt;
  if (auto* i = std::get_if<int64_t>(&*c)) return *i;
  if (auto* b = std::get_if<bool>(&*c)) return *b ? 1 : 0;
  return std::nullopt;
}

std::optional<double> Graph::constantDouble(ValueId v) const {
  const auto& c = values_.at(v).constant;
  if (!c) return std::nullopt;
  if (auto* d = std::get_if<double>(&*c)) return *d;
  if (auto* i = std::get_if<int64_t>(&*c)) return static_cast<double>(*i);
  return std::nullopt;
}

std::optional<bool> Graph::constantBool(ValueId v) const {
  const auto& c = values_.at(v).constant;
  if (!c) return std::nullopt;
  if (auto* b = std::get_if<bool>(&*c)) return *b;
  if (auto* i = std::get_if<int64_t>(&*c)) return *i != 0;
  return std::nullopt;
}

namespace {

/// An int the graph computes from a tensor's size (h.shape[-1] traces as aten::size(h, -1),
/// sometimes through NumToTensor/Int, x.dim() - 1 through int arithmetic), read from the
/// recorded shape; or a constant int. `depth` bounds the walk (size arithmetic is shallow).
std::optional<int64_t> sizeInt(const Graph& g, ValueId v, int depth = 0) {
  if (auto c = g.constantInt(v)) return c;
  const auto& val = g.value(v);
  if (val.producer == kNone || depth > 8) return std::nullopt;
  const auto& n = g.node(val.producer);
  if ((n.kind == "aten::Int" || n.kind == "prim::NumToTensor" || n.kind == "aten::ScalarImplicit") &&
      n.inputs.size() == 1)
    return sizeInt(g, n.inputs[0], depth + 1);
  if ((n.kind == "aten::add" || n.kind == "aten::sub" || n.kind == "aten::mul" || n.kind == "aten::floordiv") &&
      n.inputs.size() == 2 && g.value(n.inputs[0]).kind == ValueKind::Int && g.value(n.inputs[1]).kind == ValueKind::Int) {
    auto a = sizeInt(g, n.inputs[0], depth + 1), b = sizeInt(g, n.inputs[1], depth + 1);
    if (!a || !b) return std::nullopt;
    if (n.kind == "aten::add") return *a + *b;
    if (n.kind == "aten::sub") return *a - *b;
    if (n.kind == "aten::mul") return *a * *b;
    if (*b == 0) return std::nullopt;
    auto q = *a / *b;  // Python's floor division
    return (*a % *b != 0 && ((*a < 0) != (*b < 0))) ? q - 1 : q;
  }
  if (n.kind == "aten::dim" && n.inputs.size() == 1 && g.value(n.inputs[0]).tensor)
    return int64_t(g.value(n.inputs[0]).tensor->shape.size());
  if ((n.kind != "aten::size" && n.kind != "aten::sym_size") || n.inputs.size() != 2) return std::nullopt;
  const auto& t = g.value(n.inputs[0]).tensor;
  auto dim = g.constantInt(n.inputs[1]);
  if (!t || !dim) return std::nullopt;
  auto rank = int64_t(t->shape.size());
  auto d = *dim < 0 ? *dim + rank : *dim;
  if (d < 0 || d >= rank) return std::nullopt;
  return t->shape[std::size_t(d)];
}

}  // namespace

std::optional<std::vector<int64_t>> Graph::constantIntList(ValueId v) const {
  const auto& c = values_.at(v).constant;
  if (c) {
    if (auto* l = std::get_if<std::vector<int64_t>>(&*c)) return *l;
    if (auto* i = std::get_if<int64_t>(&*c)) return std::vector<int64_t>{*i};
    return std::nullopt;
  }
  // A list built in the graph from sizes (F.layer_norm(h, (h.shape[-1],)), x.mean(dims) with
  // dims from x.dim()): its ints at the recorded shapes. Every shape-dependent decision of the
  // analysis reads the recording run's shapes, and these lists are no different.
  const auto& val = values_.at(v);
  if (val.producer == kNone) return std::nullopt;
  const auto& n = nodes_.at(val.producer);
  if (n.kind == "aten::size" && n.inputs.size() == 1 && values_.at(n.inputs[0]).tensor)
    return values_.at(n.inputs[0]).tensor->shape;
  if (n.kind != "prim::ListConstruct" || val.kind != ValueKind::IntList) return std::nullopt;
  std::vector<int64_t> out;
  for (auto in : n.inputs) {
    auto i = sizeInt(*this, in);
    if (!i) return std::nullopt;
    out.push_back(*i);
  }
  return out;
}

bool Graph::isNoneValue(ValueId v) const { return values_.at(v).kind == ValueKind::None; }

std::string formatShape(const std::vector<int64_t>& shape) {
  std::ostringstream os;
  os << '[';
  for (std::size_t i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i];
  os << ']';
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const TensorInfo& info) {
  return os << formatShape(info.shape) << ' ' << info.dtype;
}

std::string formatConstant(const ConstantValue& c) {
  std::ostringstream os;
  std::visit(
      [&](const auto& x) {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, std::monostate>) os << "None";
        else if constexpr (std::is_same_v<T, bool>) os << (x ? "True" : "False");
        else if constexpr (std::is_same_v<T, std::string>) os << '"' << x << '"';
        else if constexpr (std::is_same_v<T, std::vector<int64_t>>) os << formatShape(x);
        else if constexpr (std::is_same_v<T, std::vector<double>>) {
          os << '[';
          for (std::size_t i = 0; i < x.size(); ++i) os << (i ? ", " : "") << x[i];
          os << ']';
        } else os << x;
      },
      c);
  return os.str();
}

std::string Graph::describeTensor(ValueId v) const {
  const auto& val = values_.at(v);
  if (!val.tensor) return "?";
  std::ostringstream os;
  os << *val.tensor;
  return os.str();
}

std::string Graph::describeNode(NodeId id) const {
  const auto& n = nodes_.at(id);
  std::string s = n.kind;
  if (!n.modulePath.empty()) s += " @ " + n.modulePath;
  if (!n.sourceLocation.empty()) s += " (" + n.sourceLocation + ")";
  return s;
}

}  // namespace foldnorm
