// What every rule file shares: the context rules write facts through, the family names, and
// the helpers of rule_helpers.h.
#include <algorithm>
#include <cctype>

#include "rule_helpers.h"

namespace foldnorm {

const char* toString(RuleFamily family) {
  switch (family) {
    case RuleFamily::Leaf: return "leaf";
    case RuleFamily::Preserving: return "preserving";
    case RuleFamily::Axis: return "axis";
    case RuleFamily::Absorber: return "absorber";
    case RuleFamily::ShapeOnly: return "shape-only";
    case RuleFamily::Breaker: return "breaker";
  }
  return "?";
}

void MeanZeroContext::setAll(const MeanZeroFact& fact) {
  for (std::size_t i = 0; i < node().outputs.size(); ++i) set(i, fact);
}

void MeanZeroContext::breakHere(const std::string& reason) {
  setAll(MeanZeroFact::broken(node_, reason, rule_));
}

void MeanZeroContext::propagateBroken(std::size_t slot) {
  const auto& from = inputFact(slot);
  if (from.state != MeanZeroFact::State::Broken) {
    breakHere("input " + std::to_string(slot) + " has no mean-zero fact");
    return;
  }
  setAll(MeanZeroFact::propagated(from, node().inputs.at(slot), rule_));
}

void MeanZeroContext::delegateTo(const Rule& rule) {
  MeanZeroContext other(graph_, node_, facts_, leaves_, rule.name);
  rule.meanZero(other);
}

LeafId MeanZeroContext::addLeaf(Leaf leaf) {
  leaf.id = leaves_.size();
  leaf.node = leaf.node == kNone ? node_ : leaf.node;
  leaf.rule = rule_;
  leaves_.push_back(std::move(leaf));
  return leaves_.back().id;
}

namespace rules {

std::optional<ParamOperand> paramOperand(const Graph& g, ValueId value, int64_t axis) {
  ParamOperand out;
  ValueId v = value;
  for (int hops = 0; hops < 16; ++hops) {
    const auto& val = g.value(v);
    if (val.param != kNone) {
      out.param = val.param;
      out.paramAxis = axis;
      out.read = v;
      return out;
    }
    if (val.producer == kNone || (v != value && val.uses.size() != 1)) return std::nullopt;
    const auto& n = g.node(val.producer);
    auto rank = rankOf(g, n.inputs.empty() ? v : n.inputs.at(0));
    if (n.kind == "aten::t" || n.kind == "aten::numpy_T") {
      if (rank == 2) axis = 1 - axis;
    } else if (n.kind == "aten::transpose" || n.kind == "aten::swapaxes") {
      auto d0 = dimArg(g, n.inputs.at(1), rank), d1 = dimArg(g, n.inputs.at(2), rank);
      if (!d0 || !d1) return std::nullopt;
      if (axis == *d0) axis = *d1;
      else if (axis == *d1) axis = *d0;
    } else if (n.kind == "aten::permute") {
      auto dims = g.constantIntList(n.inputs.at(1));
      if (!dims || axis >= int64_t(dims->size())) return std::nullopt;
      auto d = dims->at(axis);
      axis = d < 0 ? d + rank : d;
      if (axis < 0 || (rank >= 0 && axis >= rank)) return std::nullopt;
    } else if (n.kind == "aten::contiguous" || n.kind == "aten::detach" || n.kind == "aten::to" ||
               n.kind == "aten::clone" || n.kind == "aten::type_as") {
      // axis unchanged
    } else {
      return std::nullopt;
    }
    out.chain.push_back(val.producer);
    v = n.inputs.at(0);
  }
  return std::nullopt;
}

namespace {

/// A bias operand: absent (None), or a parameter centered along its last axis.
/// Returns false when the bias is computed (the output cannot be centered then).
bool biasAction(const Graph& g, ValueId bias, std::vector<CenterAction>& actions, int64_t groups) {
  if (g.isNoneValue(bias)) return true;
  auto r = rankOf(g, bias);
  auto p = paramOperand(g, bias, r > 0 ? r - 1 : 0);
  if (!p) return false;
  if (r == 0) return false;
  actions.push_back({p->param, p->paramAxis, groups});
  return true;
}

}  // namespace

void weightLeaf(MeanZeroContext& ctx, LeafKind kind, ValueId weight, int64_t weightAxis,
                std::optional<ValueId> bias, int64_t outAxis, int64_t groups) {
  const auto& g = ctx.graph();
  if (outAxis < 0 || weightAxis < 0) {
    ctx.breakHere("the ranks of its operands or output were not recorded");
    return;
  }
  auto p = paramOperand(g, weight, weightAxis);
  if (!p) {
    ctx.breakHere("its weight is computed in the graph, not a parameter, so it cannot be centered");
    return;
  }
  Leaf leaf;
  leaf.kind = kind;
  leaf.output = ctx.node().outputs.at(0);
  leaf.axes = AxisSet::of({outAxis});
  leaf.actions.push_back({p->param, p->paramAxis, groups});
  leaf.chain = p->chain;
  if (bias && !biasAction(g, *bias, leaf.actions, groups)) {
    ctx.breakHere("its bias is computed in the graph, not a parameter, so it cannot be centered");
    return;
  }
  auto id = ctx.addLeaf(std::move(leaf));
  ctx.set(0, MeanZeroFact::meanZero(AxisSet::of({outAxis}), {id}, ctx.rule()));
}

bool isParamOperand(const Graph& g, ValueId v) {
  auto r = rankOf(g, v);
  return r >= 1 && paramOperand(g, v, r - 1).has_value();
}


ShiftOutcome passSame(const ShiftInput& in) {
  std::vector<std::pair<ValueId, AxisSet>> outs;
  for (auto o : in.graph.node(in.node).outputs)
    if (isTensor(in.graph, o) || in.graph.value(o).kind == ValueKind::TensorList ||
        in.graph.value(o).kind == ValueKind::Tuple)
      outs.emplace_back(o, in.axes);
  return ShiftOutcome::passed(outs);
}

ShiftOutcome unsafeSeen(const ShiftInput& in, const std::string& what) {
  return ShiftOutcome::unsafe(in.graph.node(in.node).kind + " " + what);
}

std::optional<EinsumForm> einsumForm(const Graph& g, const Node& n) {
  if (n.inputs.size() < 2) return std::nullopt;
  const auto& c = g.value(n.inputs.at(0)).constant;
  const auto* text = c ? std::get_if<std::string>(&*c) : nullptr;
  auto list = g.value(n.inputs.at(1)).producer;
  if (!text || list == kNone || g.node(list).kind != "prim::ListConstruct") return std::nullopt;
  std::string eq;
  for (char ch : *text)
    if (ch != ' ') eq += ch;
  auto arrow = eq.find("->");
  if (arrow == std::string::npos || eq.find('.') != std::string::npos) return std::nullopt;
  EinsumForm form;
  form.list = list;
  form.tensors = g.node(list).inputs;
  form.output = eq.substr(arrow + 2);
  std::string lhs = eq.substr(0, arrow);
  for (std::size_t start = 0;;) {
    auto comma = lhs.find(',', start);
    form.operands.push_back(lhs.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (form.operands.size() != form.tensors.size()) return std::nullopt;
  for (std::size_t i = 0; i < form.operands.size(); ++i)
    if (rankOf(g, form.tensors[i]) != int64_t(form.operands[i].size())) return std::nullopt;
  for (const auto& s : form.operands)
    for (char ch : s)
      if (!std::isalpha(static_cast<unsigned char>(ch))) return std::nullopt;
  return form;
}

int64_t carriedAxis(const EinsumForm& form, std::size_t i, char letter) {
  auto count = [&](const std::string& s) { return std::count(s.begin(), s.end(), letter); };
  if (count(form.operands.at(i)) != 1 || count(form.output) != 1) return -1;
  for (std::size_t j = 0; j < form.operands.size(); ++j)
    if (j != i && count(form.operands[j]) != 0) return -1;
  return int64_t(form.output.find(letter));
}

MeanZeroFn guardedMeanZero(const std::string& rule, MeanZeroFn fn) {
  return [rule, fn = std::move(fn)](MeanZeroContext& ctx) {
    try {
      fn(ctx);
    } catch (const std::exception& e) {
      ctx.breakHere(ctx.node().kind + " does not have the form the " + rule + " rule reads (" + e.what() +
                    "): treated as breaking");
    }
  };
}

ShiftFn guardedShift(const std::string& rule, ShiftFn fn) {
  return [rule, fn = std::move(fn)](const ShiftInput& in) {
    try {
      return fn(in);
    } catch (const std::exception& e) {
      return ShiftOutcome::unsafe(in.graph.node(in.node).kind + " does not have the form the " + rule +
                                  " rule reads (" + e.what() + "): it is assumed to see the changed value");
    }
  };
}

MatchFn guardedMatch(MatchFn fn) {
  return [fn = std::move(fn)](const Graph& g, NodeId node) {
    try {
      return fn(g, node);
    } catch (const std::exception&) {
      return false;  // not this rule's pattern; the op's next rule (or the fallback) decides
    }
  };
}

ShiftOutcome unsafeShift(const ShiftInput& in) { return unsafeSeen(in, "sees the changed value"); }

ShiftOutcome ignoreShift(const ShiftInput&) { return ShiftOutcome::ignored(); }

}  // namespace rules
}  // namespace foldnorm
