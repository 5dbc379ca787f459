// foldnorm's own graph: what the importer produces and everything downstream reads.
//
// A Graph is a dataflow graph of Nodes (one per TorchScript node, plus one for the graph inputs
// and one for the return) connected by Values. It speaks of ops, values, shapes and parameters,
// never of torch types, so a second importer (torch.export) can fill it too.
//
// Storage: a Boost bidirectional adjacency_list (vertices = nodes, one edge per use of a value)
// kept behind this header; see graph/boost_graph.h for code that wants Boost algorithms.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace foldnorm {

using NodeId = std::size_t;
using ValueId = std::size_t;
using ParamId = std::size_t;
inline constexpr std::size_t kNone = static_cast<std::size_t>(-1);

/// The type of a value, coarse enough for the analysis.
enum class ValueKind { Tensor, Int, Float, Bool, String, Device, ScalarType, None, IntList,
                       FloatList, BoolList, TensorList, Tuple, Module, Other };
const char* toString(ValueKind kind);

/// A compile-time constant carried by a value (from prim::Constant, or a ListConstruct of them).
using ConstantValue = std::variant<std::monostate, int64_t, double, bool, std::string,
                                   std::vector<int64_t>, std::vector<double>>;

/// Concrete shape and dtype, recorded by running the graph once on example inputs.
struct TensorInfo {
  std::vector<int64_t> shape;
  std::string dtype;  // "float32", "int64", ...
  int64_t rank() const { return static_cast<int64_t>(shape.size()); }
  int64_t numel() const;
};

struct Use {
  NodeId node;
  std::size_t slot;  // input index of `node`
};

struct Value {
  ValueId id = kNone;
  std::string name;  // the TorchScript debug name, e.g. "input.3"
  ValueKind kind = ValueKind::Other;
  std::string typeName;           // the full TorchScript type, for display
  NodeId producer = kNone;        // node whose output this is
  std::size_t producerSlot = 0;   // output index on producer
  std::vector<Use> uses;
  std::optional<TensorInfo> tensor;     // set for tensors reached by the shape-recording run
  std::optional<ConstantValue> constant;  // set for values known at import time
  ParamId param = kNone;          // set when this value is a parameter/buffer read (GetAttr)
};

/// A parameter or buffer of the model, or a tensor constant baked into the graph.
struct Parameter {
  ParamId id = kNone;
  std::string path;        // attribute path, e.g. "transformer.h.0.ln_1.weight"
  bool isBuffer = false;
  bool isConstant = false;  // a tensor constant in the graph (path is then "<const N>")
  std::vector<int64_t> shape;
  std::string dtype;
  int64_t bytes = 0;
  int tiedGroup = -1;      // index into Graph::tiedGroups(), -1 if not tied
  std::vector<ValueId> reads;  // the values that read it (one per GetAttr or constant node)
  // The smallest and largest |value|, recorded at import for floating tensors of at most
  // kValueRangeElements elements (the analysis needs them for per-channel scales it absorbs:
  // a zero or a wide range refuses); -1 when not recorded.
  double absMin = -1;
  double absMax = -1;
  static constexpr int64_t kValueRangeElements = 1 << 16;
};

struct Node {
  NodeId id = kNone;
  std::string kind;         // "aten::linear", "prim::Constant", "prim::Param", "prim::Return", ...
  std::vector<ValueId> inputs;
  std::vector<ValueId> outputs;
  std::string modulePath;    // "transformer.h.0.attn" (from GetAttr chains / scopes); "" at top
  std::string sourceLocation;  // "file.py:123" when the trace kept it
  std::size_t origin = kNone;  // index of the node in the importer's own graph (opaque)
};

/// Ops that are plumbing for people: they compute shapes, constants or bundle values and are
/// hidden from the dataflow view.
bool isPlumbing(const Node& node);

class Graph {
 public:
  Graph();
  ~Graph();
  Graph(Graph&&) noexcept;
  Graph& operator=(Graph&&) noexcept;
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  // ---- building (importers) ----
  NodeId addNode(std::string kind, std::string modulePath = {}, std::string sourceLocation = {});
  ValueId addOutput(NodeId node, std::string name, ValueKind kind, std::string typeName = {});
  void addInput(NodeId node, ValueId value);
  ParamId addParameter(Parameter parameter);
  void setGraphInputNode(NodeId node) { inputNode_ = node; }
  void setReturnNode(NodeId node) { returnNode_ = node; }
  void setTiedGroups(std::vector<std::vector<ParamId>> groups);

  // ---- reading ----
  std::size_t nodeCount() const { return nodes_.size(); }
  std::size_t valueCount() const { return values_.size(); }
  const Node& node(NodeId id) const { return nodes_.at(id); }
  Node& node(NodeId id) { return nodes_.at(id); }
  const Value& value(ValueId id) const { return values_.at(id); }
  Value& value(ValueId id) { return values_.at(id); }
  const std::vector<Node>& nodes() const { return nodes_; }
  const std::vector<Value>& values() const { return values_; }
  const std::vector<Parameter>& parameters() const { return params_; }
  const Parameter& parameter(ParamId id) const { return params_.at(id); }
  Parameter& parameter(ParamId id) { return params_.at(id); }
  const std::vector<std::vector<ParamId>>& tiedGroups() const { return tiedGroups_; }

  NodeId graphInputNode() const { return inputNode_; }
  NodeId returnNode() const { return returnNode_; }
  /// The model's inputs (without the module `self`) and outputs, in order.
  std::vector<ValueId> modelInputs() const;
  std::vector<ValueId> modelOutputs() const;

  /// Nodes in an order where every producer comes before its consumers (Boost topological sort).
  std::vector<NodeId> topologicalOrder() const;
  /// Nodes that consume a value of `node` (deduplicated, in use order).
  std::vector<NodeId> successors(NodeId node) const;
  std::vector<NodeId> predecessors(NodeId node) const;

  /// Producer node of input `slot` of `node`, or kNone.
  NodeId producerOf(NodeId node, std::size_t slot) const;
  const Value& input(NodeId node, std::size_t slot) const { return value(nodes_.at(node).inputs.at(slot)); }

  // Constant helpers: nullopt when the input is not a known constant of that type.
  std::optional<int64_t> constantInt(ValueId v) const;
  std::optional<double> constantDouble(ValueId v) const;  // ints widen
  std::optional<bool> constantBool(ValueId v) const;
  std::optional<std::vector<int64_t>> constantIntList(ValueId v) const;
  bool isNoneValue(ValueId v) const;

  /// Human-readable name of a value's shape "[2, 16, 768] float32", or "?" when unknown.
  std::string describeTensor(ValueId v) const;
  /// "aten::linear @ transformer.h.0.attn.c_attn (model.py:42)"
  std::string describeNode(NodeId n) const;

  /// The boost graph, for algorithms; see graph/boost_graph.h for its type.
  struct Storage;
  const Storage& storage() const { return *storage_; }

 private:
  std::vector<Node> nodes_;
  std::vector<Value> values_;
  std::vector<Parameter> params_;
  std::vector<std::vector<ParamId>> tiedGroups_;
  NodeId inputNode_ = kNone;
  NodeId returnNode_ = kNone;
  std::unique_ptr<Storage> storage_;
};

std::ostream& operator<<(std::ostream& os, const TensorInfo& info);
std::string formatShape(const std::vector<int64_t>& shape);
std::string formatConstant(const ConstantValue& c);

}  // namespace foldnorm
