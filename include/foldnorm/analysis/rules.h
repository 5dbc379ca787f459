// The op-rule registry: how each op transforms the two facts of facts.h.
//
// Families (docs/rules.md is generated from this table and checked by a test):
//  - leaf:       output can be made mean-zero by centering parameters (linear, addmm, matmul with a
//                parameter operand, convolution, embedding, a parameter entering the sum directly,
//                x - mean(x)). A shift arriving at a leaf's input is unsafe (it sees the change).
//  - preserving: mean-zero in -> mean-zero out on the same axes (add/sub of mean-zero operands,
//                scalar or row-constant multiply/divide, eval dropout, casts). Shifts pass.
//  - axis:       shape and layout ops that move axes (view/reshape, permute/transpose, expand,
//                slice/select/index on other axes, cat/stack, split/chunk, pad, roll/flip,
//                reductions over other axes, attention-weighted sums P @ V).
//  - absorber:   remove a constant shift along their axis (layer_norm, softmax); their output is
//                not mean-zero.
//  - shape-only: read only the shape of their input (size, dim): never see a shift.
//  - breaker:    everything else, explicitly (nonlinearities, products with per-feature tensors,
//                normalizations that do not absorb) — and any op with no rule, named in the reason.
//
// Each rule states its rationale in one line; the report, the docs and the GUI show it. The rules
// live in src/analysis/rules/, one file per family, each rule's two transfer functions stated in
// prose above it; registry.cpp assembles them in documentation order. Axis helpers: axes.h.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "foldnorm/analysis/facts.h"

namespace foldnorm {

enum class RuleFamily { Leaf, Preserving, Axis, Absorber, ShapeOnly, Breaker };
const char* toString(RuleFamily family);

struct Rule;

/// What a rule sees when it computes the mean-zero facts of a node's outputs.
class MeanZeroContext {
 public:
  MeanZeroContext(const Graph& graph, NodeId node, std::vector<MeanZeroFact>& facts,
                  std::vector<Leaf>& leaves, const std::string& ruleName)
      : graph_(graph), node_(node), facts_(facts), leaves_(leaves), rule_(ruleName) {}
  const Graph& graph() const { return graph_; }
  const Node& node() const { return graph_.node(node_); }
  NodeId nodeId() const { return node_; }
  const MeanZeroFact& fact(ValueId v) const { return facts_.at(v); }
  const MeanZeroFact& inputFact(std::size_t slot) const { return facts_.at(node().inputs.at(slot)); }
  const std::string& rule() const { return rule_; }

  void set(std::size_t outputSlot, MeanZeroFact fact) { facts_.at(node().outputs.at(outputSlot)) = std::move(fact); }
  void setAll(const MeanZeroFact& fact);
  /// This node breaks mean-zero: every output is Broken with `reason`.
  void breakHere(const std::string& reason);
  /// The output is broken because input `slot` is (carries the original breaker along).
  void propagateBroken(std::size_t slot);
  LeafId addLeaf(Leaf leaf);
  const Leaf& leaf(LeafId id) const { return leaves_.at(id); }
  /// Computes this node's facts by another rule (under that rule's name): a rule whose
  /// predicate is structural hands the nodes whose facts do not fit it to the next rule.
  void delegateTo(const Rule& rule);

 private:
  const Graph& graph_;
  NodeId node_;
  std::vector<MeanZeroFact>& facts_;
  std::vector<Leaf>& leaves_;
  const std::string& rule_;
};

/// A shift (constant along `axes`, and along `factor` of another axis when it has one) arrives
/// at input `slot` of `node`. Only rules that move factors read `factor` (facts.h).
struct ShiftInput {
  const Graph& graph;
  NodeId node;
  std::size_t slot;
  AxisSet axes;
  std::optional<AxisFactor> factor = std::nullopt;
};

struct ShiftOutcome {
  enum class Kind { Absorbed, Passed, Ignored, Unsafe };
  Kind kind = Kind::Unsafe;
  std::vector<std::pair<ValueId, AxisSet>> outputs;  // Passed: shifted outputs, constant along
  std::string why;                                   // Absorbed/Unsafe: in words
  std::vector<std::pair<ValueId, AxisFactor>> factors;  // Passed: outputs constant along a factor too

  static ShiftOutcome absorbed(std::string why) { return {Kind::Absorbed, {}, std::move(why), {}}; }
  static ShiftOutcome ignored() { return {Kind::Ignored, {}, {}, {}}; }
  static ShiftOutcome unsafe(std::string why) { return {Kind::Unsafe, {}, std::move(why), {}}; }
  static ShiftOutcome passed(std::vector<std::pair<ValueId, AxisSet>> outs,
                             std::vector<std::pair<ValueId, AxisFactor>> factors = {}) {
    return {Kind::Passed, std::move(outs), {}, std::move(factors)};
  }
};

struct Rule {
  std::string name;
  RuleFamily family = RuleFamily::Breaker;
  std::vector<std::string> ops;
  std::string rationale;
  std::function<void(MeanZeroContext&)> meanZero;
  std::function<ShiftOutcome(const ShiftInput&)> shift;
  /// Rules that share an op tell its nodes apart by their operands (x - mean(x) before add/sub,
  /// a parameter operand before the attention-weighted sum): a rule with a predicate applies
  /// only to the nodes it accepts; without one, to every node of its ops. Rules are tried in
  /// registry order.
  std::function<bool(const Graph&, NodeId)> matches;
  bool appliesTo(const Graph& g, NodeId node) const { return !matches || matches(g, node); }
};

/// All rules, grouped by family, in documentation order.
const std::vector<Rule>& ruleRegistry();
/// The rule for a node: the first rule of its op kind that applies to it (Rule::matches);
/// the explicit fallback ("unknown-op") when none matches.
const Rule& ruleFor(const Graph& graph, NodeId node);
const Rule& fallbackRule();

/// docs/rules.md, generated from the registry.
std::string rulesMarkdown();

}  // namespace foldnorm
