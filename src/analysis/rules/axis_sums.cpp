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

/// The fact of batch1 @ batch2 inside baddbmm(input, batch1, batch2, beta, alpha) (alpha scales).
std::optional<MeanZeroFact> productFact(MeanZeroContext& ctx) {
  const auto& g = ctx.graph();
  const auto& n = ctx.node();
  auto out = rankOf(g, n.outputs.at(0));
  auto ra = rankOf(g, n.inputs.at(1)), rb = rankOf(g, n.inputs.at(2));
  const auto& fa = ctx.inputFact(1);
  const auto& fb = ctx.inputFact(2);
  if (fb.isMeanZero() && rb >= 2 && out >= 1 && fb.axes == AxisSet::of({rb - 1}))
    return MeanZeroFact::meanZero(AxisSet::of({out - 1}), fb.leaves, ctx.rule());
  if (fa.isMeanZero() && ra >= 2 && out >= 2 && fa.axes == AxisSet::of({ra - 2}))
    return MeanZeroFact::meanZero(AxisSet::of({out - 2}), fa.leaves, ctx.rule());
  return std::nullopt;
}

void baddbmmMz(MeanZeroContext& ctx) {
  const auto& g = ctx.graph();
  const auto& n = ctx.node();
  auto product = productFact(ctx);
  if (!product) {
    ctx.breakHere("batch1 @ batch2 is mean-zero only as P @ V with V mean-zero along its last axis alone");
    return;
  }
  auto beta = n.inputs.size() > 3 ? g.constantDouble(n.inputs.at(3)) : std::optional<double>(1.0);
  if (beta == std::optional<double>(0.0)) { ctx.set(0, *product); return; }  // the input is not added
  const auto& fi = ctx.inputFact(0);
  if (!fi.isMeanZero()) { ctx.propagateBroken(0); return; }
  auto input = MeanZeroFact::meanZero(alignAxes(fi.axes, rankOf(g, n.inputs.at(0)), rankOf(g, n.outputs.at(0))),
                                      fi.leaves, ctx.rule());
  ctx.set(0, MeanZeroFact::join(input, *product));
}

ShiftOutcome baddbmmShift(const ShiftInput& in) {
  const auto& g = in.graph;
  const auto& n = g.node(in.node);
  if (in.slot == 0) return addSubShift(in);  // beta * (input + c): a constant factor keeps it constant
  auto out = rankOf(g, n.outputs.at(0));
  auto r = rankOf(g, n.inputs.at(in.slot));
  if (in.slot == 2 && r >= 2 && out >= 1 && in.axes.contains(r - 1))
    return ShiftOutcome::passed({{n.outputs.at(0), AxisSet::of({out - 1})}});
  if (in.slot == 1 && r >= 2 && out >= 2 && in.axes.contains(r - 2))
    return ShiftOutcome::passed({{n.outputs.at(0), AxisSet::of({out - 2})}});
  return unsafeSeen(in, "multiplies the changed value by another tensor");
}

void einsumMz(MeanZeroContext& ctx) {
  const auto& g = ctx.graph();
  auto form = einsumForm(g, ctx.node());
  if (!form) { ctx.breakHere("its equation is not an explicit one matching its operands' ranks"); return; }
  // Output elements along a letter that one operand alone carries are weighted sums of that
  // operand's elements along it, with weights that do not depend on the letter.
  for (std::size_t i = 0; i < form->tensors.size(); ++i) {
    const auto& f = ctx.fact(form->tensors[i]);
    if (!f.isMeanZero() || f.axes.size() != 1) continue;
    auto axis = f.axes.axes().front();
    auto outAxis = carriedAxis(*form, i, form->operands[i].at(std::size_t(axis)));
    if (outAxis >= 0) {
      ctx.set(0, MeanZeroFact::meanZero(AxisSet::of({outAxis}), f.leaves, ctx.rule()));
      return;
    }
  }
  ctx.breakHere("no operand is mean-zero along a single axis that it alone carries into the output");
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

/// cumsum(x, dim, dtype) / diff(x, n, dim, prepend, append): the scan axis, or nullopt (a dim
/// that is not a constant, diff with prepend/append, whose extra parts would need facts too).
std::optional<int64_t> scanDim(const Graph& g, const Node& n) {
  bool diff = n.kind == "aten::diff";
  auto at = diff ? std::size_t(2) : std::size_t(1);
  if (n.inputs.size() <= at) return std::nullopt;
  if (diff && ((n.inputs.size() > 3 && !g.isNoneValue(n.inputs.at(3))) ||
               (n.inputs.size() > 4 && !g.isNoneValue(n.inputs.at(4)))))
    return std::nullopt;
  return dimArg(g, n.inputs.at(at), rankOf(g, n.inputs.at(0)));
}

void scanMz(MeanZeroContext& ctx) {
  const auto& f = ctx.inputFact(0);
  if (!f.isMeanZero()) { ctx.propagateBroken(0); return; }
  auto dim = scanDim(ctx.graph(), ctx.node());
  if (!dim) { ctx.breakHere("its dim is not a constant (or diff prepends or appends values)"); return; }
  if (f.axes.contains(*dim)) {
    ctx.breakHere("scans along the mean-zero axis " + std::to_string(*dim) +
                  "; partial sums or differences of a mean-zero row are not mean-zero");
    return;
  }
  ctx.set(0, MeanZeroFact::meanZero(f.axes, f.factor, f.leaves, ctx.rule()));
}

ShiftOutcome scanShift(const ShiftInput& in) {
  if (in.slot != 0) return ShiftOutcome::ignored();  // dim, n, dtype: no values of the input
  const auto& g = in.graph;
  const auto& n = g.node(in.node);
  auto dim = scanDim(g, n);
  if (!dim) return unsafeSeen(in, "has a non-constant dim or extra parts");
  auto axes = in.axes;
  axes.erase(*dim);  // k c along the scan: constant along the other axes only
  return ShiftOutcome::passed({{n.outputs.at(0), axes}});
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
  // baddbmm(input, batch1, batch2, beta, alpha) = beta input + alpha batch1 @ batch2 (attention
  // P @ V plus a bias).
  //   mean-zero: the product as attention-weighted-sum, joined with input's fact (aligned)
  //              unless beta is 0; anything else breaks.
  //   shift:     input's shift passes as in add (widened along broadcast axes); batch2 shifted
  //              along its last axis -> the output's last; batch1 along its rows -> the output's
  //              rows; otherwise seen.
  t.add("baddbmm", {"aten::baddbmm"},
        "beta input + alpha batch1 @ batch2 is a weighted sum of rows of batch2 plus a bias: "
        "mean-zero along the last axis when batch2 and the bias are", baddbmmMz, baddbmmShift);
  // einsum(eq, [a, b, ...]) of computed tensors (attention written as einsum).
  //   mean-zero: an operand mean-zero along one axis whose subscript it alone carries into the
  //              output -> mean-zero along that output axis; otherwise broken.
  //   shift:     seen: the operand list does not say which operand changed.
  t.add("einsum", {"aten::einsum"},
        "an einsum is a weighted sum along every subscript an operand alone carries into the "
        "output: mean-zero along such an axis stays mean-zero; shifts through it are treated as "
        "seen (conservative)", einsumMz, unsafeShift);
  // scaled_dot_product_attention(q, k, v, mask, dropout_p, ...).
  //   mean-zero: v mean-zero along its last axis and no dropout -> the output's last axis.
  //   shift:     v's shift along its last axis passes to the output's; q, k, mask see it.
  t.add("scaled-dot-product-attention", {"aten::scaled_dot_product_attention"},
        "softmax(q k^T) v is a weighted sum of rows of v: mean-zero when v is mean-zero along its "
        "last axis (no attention dropout)", sdpaMz, sdpaShift);
  // cumsum(x, dim) and diff(x, n, dim) without prepend/append (RoBERTa's and OPT's positions
  // from cumsum of a mask, Funnel's and DeBERTa's relative positions): the same linear map along
  // dim at every position of the other axes.
  //   mean-zero: along axes other than dim, x's fact; a scan along a mean-zero axis breaks.
  //   shift:     constant along the shift's axes except dim (a constant c sums to k c along it).
  t.add("scan", {"aten::cumsum", "aten::diff"},
        "a cumulative sum or a difference along one axis is the same linear map at every position "
        "of the other axes: their zero mean survives; along the scanned axis it does not",
        scanMz, scanShift);
}

}  // namespace foldnorm::rules
