// Private to the rule files: helpers several rule families share, and how each family file
// hands its rules to the registry (registry.cpp assembles them in documentation order).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "foldnorm/analysis/axes.h"
#include "foldnorm/analysis/rules.h"

namespace foldnorm::rules {

using Kind = MeanZeroFact::State;
using MeanZeroFn = std::function<void(MeanZeroContext&)>;
using ShiftFn = std::function<ShiftOutcome(const ShiftInput&)>;
using MatchFn = std::function<bool(const Graph&, NodeId)>;

/// No input may crash the analysis: a rule that meets a node it cannot read (an operand
/// missing, a shape of another rank than its dims say) throws from a checked access, and these
/// wrappers turn that into the fallback's answer, named: the outputs break, the shift is seen,
/// the rule does not match.
MeanZeroFn guardedMeanZero(const std::string& rule, MeanZeroFn fn);
ShiftFn guardedShift(const std::string& rule, ShiftFn fn);
MatchFn guardedMatch(MatchFn fn);

/// Appends the rules of one family to the registry under construction, each guarded.
class FamilyTable {
 public:
  FamilyTable(std::vector<Rule>& rules, RuleFamily family) : rules_(rules), family_(family) {}
  void add(std::string name, std::vector<std::string> ops, std::string rationale, MeanZeroFn meanZero,
           ShiftFn shift, MatchFn matches = {}) {
    auto mz = guardedMeanZero(name, std::move(meanZero));
    auto sh = guardedShift(name, std::move(shift));
    rules_.push_back(Rule{std::move(name), family_, std::move(ops), std::move(rationale), std::move(mz),
                          std::move(sh), matches ? guardedMatch(std::move(matches)) : MatchFn{}});
  }

 private:
  std::vector<Rule>& rules_;
  RuleFamily family_;
};

// One per family file, called by registry.cpp in this order.
void addLeafRules(std::vector<Rule>& rules);
void addScaledLeafRules(std::vector<Rule>& rules);  // scaled_leaf.cpp (leaf family)
void addPreservingRules(std::vector<Rule>& rules);
void addAxisRules(std::vector<Rule>& rules);     // layout (axis.cpp)
void addAxisSumRules(std::vector<Rule>& rules);  // sums over other axes (axis_sums.cpp)
void addAxisSpatialRules(std::vector<Rule>& rules);  // pooling, shuffles (axis_spatial.cpp)
void addScatterRules(std::vector<Rule>& rules);  // functional writes (scatter.cpp)
void addAbsorberRules(std::vector<Rule>& rules);
void addShapeOnlyRules(std::vector<Rule>& rules);
void addBreakerRules(std::vector<Rule>& rules);

inline bool isTensor(const Graph& g, ValueId v) { return g.value(v).kind == ValueKind::Tensor; }

/// A weight operand traced back to its parameter through layout-only ops.
struct ParamOperand {
  ParamId param = kNone;
  int64_t paramAxis = 0;       // the parameter axis that becomes the operand's axis `axis`
  std::vector<NodeId> chain;   // from the op back towards the parameter read
  ValueId read = kNone;        // the value reading the parameter
};

/// Follows `value` back through t/transpose/permute/contiguous/detach/float casts to a parameter
/// read, mapping operand axis `axis` to the parameter's axis. Intermediates must have one use
/// (otherwise the parameter feeds something else too and is not a plain weight).
std::optional<ParamOperand> paramOperand(const Graph& g, ValueId value, int64_t axis);
/// A tensor of rank >= 1 that paramOperand traces to a parameter.
bool isParamOperand(const Graph& g, ValueId v);
/// Emits a weight leaf (linear-like: the output axis `outAxis` is made mean-zero by centering
/// the weight along `weightAxis` within `groups` blocks, and the bias), or breaks with the reason.
void weightLeaf(MeanZeroContext& ctx, LeafKind kind, ValueId weight, int64_t weightAxis,
                std::optional<ValueId> bias, int64_t outAxis, int64_t groups = 1);

/// einsum(equation, [tensors], path): the equation's subscripts, one string per operand and the
/// output, and the operand values. Only explicit forms ("ij,jk->ik": letters, "->", no "...")
/// whose subscripts match the operands' recorded ranks; nullopt otherwise.
struct EinsumForm {
  std::vector<std::string> operands;
  std::string output;
  std::vector<ValueId> tensors;
  NodeId list = kNone;  // the ListConstruct holding the operands
};
std::optional<EinsumForm> einsumForm(const Graph& g, const Node& n);
/// The output axis of a letter that appears once in operand `i`, once in the output and in no
/// other operand (the axis is carried through unsummed), or -1.
int64_t carriedAxis(const EinsumForm& form, std::size_t i, char letter);

/// Every tensor-like output carries the shift unchanged (copies, list plumbing).
ShiftOutcome passSame(const ShiftInput& in);
/// "<op> <what>": the node sees the change.
ShiftOutcome unsafeSeen(const ShiftInput& in, const std::string& what);
/// The node sees the change (leaves, breakers).
ShiftOutcome unsafeShift(const ShiftInput& in);
/// The node reads no values of its input (shapes only, parameters).
ShiftOutcome ignoreShift(const ShiftInput& in);
/// Input 0 passes on unchanged; other inputs (flags, dtypes) carry no shift that matters.
ShiftOutcome identityShift(const ShiftInput& in);
/// The shift of one operand of a sum, widened along the axes that operand is broadcast over.
ShiftOutcome addSubShift(const ShiftInput& in);

}  // namespace foldnorm::rules
