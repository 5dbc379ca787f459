// Axis rules, sums over other axes: reductions and attention-weighted sums. A weighted sum of
// mean-zero rows is mean-zero; a sum over a mean-zero axis is not.
#include "rule_helpers.h"

namespace foldnorm::rules {
namespace {

std::optional<AxisSet> reducedDims(const Graph& g, const Node& n) {
  if (n.inputs.size() < 2) return std::nullopt;
  auto dims = g.constantIntList(n.inputs.at(1));
  if (!dims || dims->empty()) return std::nullopt;
  return dimListArg(g, n.inputs.at(1), rankOf(g, n.inputs.at(0)));
}

AxisSet afterReduction(AxisSet axes, AxisSet reduced, bool keepdim) {
  if (keepdim) {
    for (auto r : reduced.axes()) axes.erase(r);
    return axes;
  }
  auto rs = reduced.axes();
  for (auto it = rs.rbegin(); it != rs.rend(); ++it) axes = dropAxis(axes, *it);
  return axes;
}

void reduceMz(MeanZeroContext& ctx) {
  const auto& g = ctx.graph();
  const auto& n = ctx.node();
  const auto& f = ctx.inputFact(0);
  if (!f.isMeanZero()) { ctx.propagateBroken(0); return; }
  auto reduced = reducedDims(g, n);
  if (!reduced || !(*reduced & f.axes).empty()) {
    ctx.breakHere("reduces over the mean-zero axes");
    return;
  }
  bool keepdim = n.inputs.size() > 2 && g.constantBool(n.inputs.at(2)).value_or(false);
  ctx.set(0, MeanZeroFact::meanZero(afterReduction(f.axes, *reduced, keepdim), f.leaves, ctx.rule()));
}

ShiftOutcome reduceShift(const ShiftInput& in) {
  if (in.slot != 0) return ShiftOutcome::ignored();
  const auto& g = in.graph;
  const auto& n = g.node(in.node);
  auto reduced = reducedDims(g, n);
  if (!reduced) return ShiftOutcome::passed({{n.outputs.at(0), AxisSet{}}});
  bool keepdim = n.inputs.size() > 2 && g.constantBool(n.inputs.at(2)).value_or(false);
  return ShiftOutcome::passed({{n.outputs.at(0), afterReduction(in.axes, *reduced, keepdim)}});
}


void attentionMz(MeanZeroContext& ctx) {
  const auto& g = ctx.graph();
  const auto& n = ctx.node();
  auto out = rankOf(g, n.outputs.at(0));
  auto ra = rankOf(g, n.inputs.at(0)), rb = rankOf(g, n.inputs.at(1));
  const auto& fb = ctx.inputFact(1);
  if (fb.isMeanZero() && rb >= 2 && out >= 1 && fb.axes == AxisSet::of({rb - 1})) {
    ctx.set(0, MeanZeroFact::meanZero(AxisSet::of({out - 1}), fb.leaves, ctx.rule()));
    return;
  }
  const auto& fa = ctx.inputFact(0);
  if (fa.isMeanZero() && ra >= 2 && out >= 2 && fa.axes == AxisSet::of({ra - 2})) {
    ctx.set(0, MeanZeroFact::meanZero(AxisSet::of({out - 2}), fa.leaves, ctx.rule()));
    return;
  }
  if (fb.isMeanZero() || fa.isMeanZero())
    ctx.breakHere("a product of two computed tensors keeps the zero mean only for P @ V with V "
                  "mean-zero along its last axis alone");
  else
    ctx.propagateBroken(1);
}

ShiftOutcome attentionShift(const ShiftInput& in) {
  const auto& g = in.graph;
  const auto& n = g.node(in.node);
  auto out = rankOf(g, n.outputs.at(0));
  auto r = rankOf(g, n.inputs.at(in.slot));
  if (in.slot == 1 && r >= 2 && in.axes.contains(r - 1))
    return ShiftOutcome::passed({{n.outputs.at(0), AxisSet::of({out - 1})}});
  if (in.slot == 0 && r >= 2 && in.axes.contains(r - 2))
    return ShiftOutcome::passed({{n.outputs.at(0), AxisSet::of({out - 2})}});
  return unsafeSeen(in, "multiplies the changed value by another tensor");
}

void sdpaMz(MeanZeroContext& ctx) {
  // out = softmax(q k^T / s + mask) v: a weighted sum of the rows of v.
  const auto& g = ctx.graph();
  const auto& n = ctx.node();
  auto rv = rankOf(g, n.inputs.at(2));
  if (n.inputs.size() > 4 && g.constantDouble(n.inputs.at(4)).value_or(1.0) != 0.0) {
    ctx.breakHere("attention dropout is active");
    return;
  }
  const auto& fv = ctx.inputFact(2);
  if (fv.isMeanZero() && rv >= 1 && rankOf(g, n.outputs.at(0)) >= 1 && fv.axes == AxisSet::of({rv - 1})) {
    ctx.set(0, MeanZeroFact::meanZero(AxisSet::of({rankOf(g, n.outputs.at(0)) - 1}), fv.leaves, ctx.rule()));
    return;
  }
  if (fv.isMeanZero()) ctx.breakHere("its value input is mean-zero along other axes than the last");
  else ctx.propagateBroken(2);
}

ShiftOutcome sdpaShift(const ShiftInput& in) {
  const auto& g = in.graph;
  const auto& n = g.node(in.node);
  auto rv = rankOf(g, n.inputs.at(2));
  if (in.slot == 2 && in.axes.contains(rv - 1))
    return ShiftOutcome::passed({{n.outputs.at(0), AxisSet::of({rankOf(g, n.outputs.at(0)) - 1})}});
  return unsafeSeen(in, "uses the changed value as query, key or mask");
}

}  // namespace

void addAxisSumRules(std::vector<Rule>& rules) {
  FamilyTable t(rules, RuleFamily::Axis);
  // mean/sum(x, dims, keepdim).
  //   mean-zero: kept when the reduced dims avoid the mean-zero axes (axes renumbered without
  //              keepdim); a reduction over them, or over all dims, breaks.
  //   shift:     constant along the remaining axes (all dims reduced: constant along none).
  t.add("reduce", {"aten::mean", "aten::sum"},
        "averaging or summing over other axes averages mean-zero rows, which stay mean-zero",
        reduceMz, reduceShift);
  // matmul/mm/bmm of two computed tensors (P @ V).
  //   mean-zero: V mean-zero along its last axis alone -> the output's last axis; P mean-zero
  //              along its second-to-last axis alone -> the output's; anything else breaks.
  //   shift:     V shifted along its last axis -> the output's last axis (rows of P need not sum
  //              to one: the shift is still constant along it); otherwise seen.
  t.add("attention-weighted-sum", {"aten::matmul", "aten::mm", "aten::bmm"},
        "P @ V with V mean-zero along its last axis is mean-zero along the output's last axis "
        "(a weighted sum of mean-zero rows)", attentionMz, attentionShift);
  // scaled_dot_product_attention(q, k, v, mask, dropout_p, ...).
  //   mean-zero: v mean-zero along its last axis and no dropout -> the output's last axis.
  //   shift:     v's shift along its last axis passes to the output's; q, k, mask see it.
  t.add("scaled-dot-product-attention", {"aten::scaled_dot_product_attention"},
        "softmax(q k^T) v is a weighted sum of rows of v: mean-zero when v is mean-zero along its "
        "last axis (no attention dropout)", sdpaMz, sdpaShift);
}

}  // namespace foldnorm::rules
