// Preserving rules: mean-zero in, mean-zero out on the same axes; a shift passes through.
#include <fmt/format.h>

#include "rule_helpers.h"

namespace foldnorm::rules {

ShiftOutcome addSubShift(const ShiftInput& in) {
  const auto& g = in.graph;
  const auto& n = g.node(in.node);
  if (in.slot > 1) return unsafeSeen(in, "uses the changed value as its alpha");
  auto out = rankOf(g, n.outputs.at(0));
  auto v = n.inputs.at(in.slot);
  auto axes = alignAxes(in.axes, rankOf(g, v), out);
  // Axes along which the shifted operand is broadcast carry the same shift everywhere.
  if (const auto* s = shapeOf(g, v); s && shapeOf(g, n.outputs.at(0)) && int64_t(s->size()) <= out) {
    const auto& os = *shapeOf(g, n.outputs.at(0));
    for (int64_t a = 0; a < out; ++a) {
      int64_t ia = a - (out - int64_t(s->size()));
      if (ia < 0 || (s->at(ia) == 1 && os.at(a) != 1)) axes.insert(a);
    }
  }
  return ShiftOutcome::passed({{n.outputs.at(0), axes}});
}

ShiftOutcome identityShift(const ShiftInput& in) {
  if (in.slot != 0) return ShiftOutcome::ignored();
  return passSame(in);
}

namespace {

/// x + table, where the table is a free parameter read only here (a parameter leaf, centered
/// along its last axis of size > 1) and x is mean-zero along one axis the table spans, another
/// than that one: PiT's pos_embed [1, C, H, W] added to its patch conv's output, mean-zero
/// along C. Centering the table along x's axis instead makes the sum mean-zero along that axis
/// alone (along its last axis, W, the sum is only mean-zero along {C, W}, which no LN over C
/// uses). The re-aimed table is a new parameter leaf; the one along the last axis stays unused.
std::optional<MeanZeroFact> reaimedTable(MeanZeroContext& ctx, ValueId table, const MeanZeroFact& x, ValueId xValue) {
  const auto& g = ctx.graph();
  const auto& t = g.value(table);
  const auto& ft = ctx.fact(table);
  auto out = rankOf(g, ctx.node().outputs.at(0));
  const auto* shape = shapeOf(g, table);
  if (t.param == kNone || t.producer == kNone || t.uses.size() != 1 || !shape || out < 1) return std::nullopt;
  const auto& reader = g.node(t.producer).kind;
  if ((reader != "prim::GetAttr" && reader != "prim::Constant") || !ft.isMeanZero() || ft.rule != "parameter" ||
      ft.leaves.size() != 1 || !x.isMeanZero() || x.factor)
    return std::nullopt;
  auto xAxes = alignAxes(x.axes, rankOf(g, xValue), out);
  auto rt = int64_t(shape->size());
  if (xAxes.size() != 1 || rt > out || alignAxes(ft.axes, rt, out) == xAxes) return std::nullopt;
  int64_t axis = xAxes.axes().front() - (out - rt);
  if (axis < 0 || shape->at(axis) <= 1) return std::nullopt;
  Leaf leaf;
  leaf.kind = LeafKind::Parameter;
  leaf.node = t.producer;
  leaf.output = table;
  leaf.axes = AxisSet::of({axis});
  leaf.actions.push_back({t.param, axis, 1});
  auto id = ctx.addLeaf(std::move(leaf));
  return MeanZeroFact::meanZero(AxisSet::of({axis}), {id}, ctx.rule());
}

void addSubMz(MeanZeroContext& ctx) {
  const auto& g = ctx.graph();
  const auto& n = ctx.node();
  auto a = n.inputs.at(0), b = n.inputs.at(1);
  auto out = rankOf(g, n.outputs.at(0));
  if (!isTensor(g, b)) {
    auto c = g.constantDouble(b);
    if (c && *c == 0.0) {
      if (ctx.fact(a).isMeanZero()) ctx.set(0, ctx.fact(a));
      else ctx.propagateBroken(0);
    } else {
      ctx.breakHere("adds a scalar constant, which shifts every element");
    }
    return;
  }
  MeanZeroFact fa = ctx.fact(a), fb = ctx.fact(b);
  if (!fa.isMeanZero()) { ctx.propagateBroken(0); return; }
  if (!fb.isMeanZero()) { ctx.propagateBroken(1); return; }
  if (auto t = reaimedTable(ctx, b, fa, a)) fb = *t;
  else if (auto t2 = reaimedTable(ctx, a, fb, b)) fa = *t2;
  // Both in the output's frame, then the join: mean-zero along the union, by both sets of leaves.
  auto aligned = [&](const MeanZeroFact& f, ValueId v) {
    return MeanZeroFact::meanZero(alignAxes(f.axes, rankOf(g, v), out), f.leaves, ctx.rule());
  };
  ctx.set(0, MeanZeroFact::join(aligned(fa, a), aligned(fb, b)));
}

void scaleMz(MeanZeroContext& ctx) {
  const auto& g = ctx.graph();
  const auto& n = ctx.node();
  auto out = rankOf(g, n.outputs.at(0));
  bool isDiv = n.kind.find("div") != std::string::npos;
  for (std::size_t slot = 0; slot < 2; ++slot) {
    if (isDiv && slot == 1) break;
    auto x = n.inputs.at(slot), other = n.inputs.at(1 - slot);
    const auto& f = ctx.fact(x);
    if (!f.isMeanZero()) continue;
    auto axes = alignAxes(f.axes, rankOf(g, x), out);
    if (constantAlong(g, other, axes, out)) {
      ctx.set(0, MeanZeroFact::meanZero(axes, f.leaves, ctx.rule()));
      return;
    }
  }
  // Blame: a mean-zero operand times something varying along its axes is the breaker here;
  // otherwise the operand that was not mean-zero.
  const auto& f0 = ctx.inputFact(0);
  if (f0.isMeanZero() || (!isDiv && ctx.inputFact(1).isMeanZero()))
    ctx.breakHere("elementwise product with a tensor that varies along the mean-zero axes "
                  "(a per-feature scale breaks the zero mean)");
  else
    ctx.propagateBroken(0);
}

ShiftOutcome scaleShift(const ShiftInput& in) {
  const auto& g = in.graph;
  const auto& n = g.node(in.node);
  bool isDiv = n.kind.find("div") != std::string::npos;
  if (in.slot > 1 || (isDiv && in.slot == 1)) return unsafeSeen(in, "divides by the changed value");
  auto out = rankOf(g, n.outputs.at(0));
  auto axes = alignAxes(in.axes, rankOf(g, n.inputs.at(in.slot)), out);
  if (!constantAlong(g, n.inputs.at(1 - in.slot), axes, out))
    return unsafeSeen(in, "multiplies the change by a tensor that varies along its axes");
  return ShiftOutcome::passed({{n.outputs.at(0), axes}});
}

/// addcmul(self, t1, t2, value) = self + value * t1 * t2 (timm's Affine, some GRN forms).
/// The fact of value * t1 * t2: one factor mean-zero along B and the other constant along B.
std::optional<MeanZeroFact> addcmulProduct(MeanZeroContext& ctx) {
  const auto& g = ctx.graph();
  const auto& n = ctx.node();
  auto out = rankOf(g, n.outputs.at(0));
  for (std::size_t slot : {std::size_t(1), std::size_t(2)}) {
    auto x = n.inputs.at(slot), other = n.inputs.at(slot == 1 ? 2 : 1);
    const auto& f = ctx.fact(x);
    if (!f.isMeanZero()) continue;
    auto axes = alignAxes(f.axes, rankOf(g, x), out);
    if (constantAlong(g, other, axes, out)) return MeanZeroFact::meanZero(axes, f.leaves, ctx.rule());
  }
  return std::nullopt;
}

void addcmulMz(MeanZeroContext& ctx) {
  const auto& g = ctx.graph();
  const auto& n = ctx.node();
  if (n.inputs.size() < 3) { ctx.breakHere("has fewer than three tensor operands"); return; }
  auto value = n.inputs.size() > 3 ? g.constantDouble(n.inputs.at(3)) : std::optional<double>(1.0);
  if (!value) { ctx.breakHere("its value is not a constant"); return; }
  const auto& fs = ctx.inputFact(0);
  if (!fs.isMeanZero()) { ctx.propagateBroken(0); return; }
  auto self = MeanZeroFact::meanZero(alignAxes(fs.axes, rankOf(g, n.inputs.at(0)), rankOf(g, n.outputs.at(0))),
                                     fs.leaves, ctx.rule());
  if (*value == 0.0) { ctx.set(0, self); return; }
  auto product = addcmulProduct(ctx);
  if (!product) {
    ctx.breakHere("t1 * t2 is not a mean-zero tensor times a factor constant along its mean-zero axes");
    return;
  }
  ctx.set(0, MeanZeroFact::join(self, *product));
}

ShiftOutcome addcmulShift(const ShiftInput& in) {
  const auto& g = in.graph;
  const auto& n = g.node(in.node);
  if (in.slot == 0) return addSubShift(in);
  if (in.slot > 2) return unsafeSeen(in, "uses the changed value as its value factor");
  auto out = rankOf(g, n.outputs.at(0));
  auto axes = alignAxes(in.axes, rankOf(g, n.inputs.at(in.slot)), out);
  if (!constantAlong(g, n.inputs.at(in.slot == 1 ? 2 : 1), axes, out))
    return unsafeSeen(in, "multiplies the change by a tensor that varies along its axes");
  return ShiftOutcome::passed({{n.outputs.at(0), axes}});
}

void identityMz(MeanZeroContext& ctx) {
  const auto& g = ctx.graph();
  const auto& n = ctx.node();
  if (const auto& t = g.value(n.outputs.at(0)).tensor) {
    const auto& d = t->dtype;
    if (d != "float32" && d != "float64" && d != "float16" && d != "bfloat16") {
      ctx.breakHere("casts to " + d);
      return;
    }
  }
  const auto& f = ctx.inputFact(0);
  if (f.isMeanZero()) ctx.set(0, MeanZeroFact::meanZero(f.axes, f.leaves, ctx.rule()));
  else ctx.propagateBroken(0);
}

/// Why a dropout node is not the identity (it draws a random mask), or nullopt when it is:
/// p == 0 drops nothing and scales by 1/(1-0) = 1 whatever the training flag (torchvision's
/// Swin calls F.dropout(x, p=0.0) with training left True); training False is the identity too.
std::optional<std::string> dropoutMask(const Graph& g, const Node& n) {
  auto p = n.inputs.size() > 1 ? g.constantDouble(n.inputs.at(1)) : std::nullopt;
  if (p && *p == 0.0) return std::nullopt;
  auto train = n.inputs.size() > 2 ? g.constantBool(n.inputs.at(2)) : std::nullopt;
  if (train && !*train) return std::nullopt;
  if (!train) return "dropout whose training flag is not a constant (a random mask when training)";
  if (!p) return "dropout in training mode with a probability that is not a constant (a random mask)";
  return fmt::format("dropout in training mode with p = {} (a random mask)", *p);
}

void dropoutMz(MeanZeroContext& ctx) {
  if (auto mask = dropoutMask(ctx.graph(), ctx.node())) { ctx.breakHere(*mask); return; }
  identityMz(ctx);
}

ShiftOutcome dropoutShift(const ShiftInput& in) {
  // A random mask multiplies the change too: mask * c / (1 - p) is not constant along any axis.
  if (auto mask = dropoutMask(in.graph, in.graph.node(in.node))) return unsafeSeen(in, "applies " + *mask);
  return identityShift(in);
}

/// masked_fill(x, mask, fill) or where(mask, fill, x) / where(mask, x, fill): which operand is
/// the data, which the mask, which the fill. nullopt for other forms (where(cond) alone).
struct MaskForm {
  std::size_t data, mask, fill;
};

std::optional<MaskForm> maskForm(const Graph& g, const Node& n) {
  if (n.inputs.size() != 3) return std::nullopt;
  if (n.kind != "aten::where") return MaskForm{0, 1, 2};
  // The data is the tensor operand that is not a constant 0; a constant 0 is the fill.
  auto isZero = [&](std::size_t slot) { return g.constantDouble(n.inputs.at(slot)) == std::optional<double>(0.0); };
  if (isZero(1) && !isZero(2)) return MaskForm{2, 0, 1};
  if (isZero(2)) return MaskForm{1, 0, 2};
  return MaskForm{isTensor(g, n.inputs.at(1)) ? std::size_t(1) : std::size_t(2), 0,
                  isTensor(g, n.inputs.at(1)) ? std::size_t(2) : std::size_t(1)};
}

void rowMaskMz(MeanZeroContext& ctx) {
  const auto& g = ctx.graph();
  const auto& n = ctx.node();
  auto form = maskForm(g, n);
  if (!form) { ctx.breakHere("a where with one operand returns indices"); return; }
  const auto& f = ctx.inputFact(form->data);
  if (!f.isMeanZero()) { ctx.propagateBroken(form->data); return; }
  if (g.constantDouble(n.inputs.at(form->fill)) != std::optional<double>(0.0)) {
    ctx.breakHere("fills the masked elements with a value that is not the constant 0");
    return;
  }
  auto out = rankOf(g, n.outputs.at(0));
  auto axes = alignAxes(f.axes, rankOf(g, n.inputs.at(form->data)), out);
  if (out < 0 || axes.empty() || !constantAlong(g, n.inputs.at(form->mask), axes, out)) {
    ctx.breakHere("its mask varies along the mean-zero axes (it zeroes parts of a row, not whole rows)");
    return;
  }
  ctx.set(0, MeanZeroFact::meanZero(axes, f.leaves, ctx.rule()));
}

ShiftOutcome rowMaskShift(const ShiftInput& in) {
  const auto& g = in.graph;
  const auto& n = g.node(in.node);
  auto form = maskForm(g, n);
  if (!form || in.slot != form->data) return unsafeSeen(in, "uses the changed value as its mask or fill");
  // The change becomes c where the mask is off and 0 where it is on (whatever the fill): still
  // constant along the shift's axes along which the mask is constant.
  auto out = rankOf(g, n.outputs.at(0));
  AxisSet axes;
  for (auto a : alignAxes(in.axes, rankOf(g, n.inputs.at(form->data)), out).axes())
    if (constantAlong(g, n.inputs.at(form->mask), AxisSet::of({a}), out)) axes.insert(a);
  return ShiftOutcome::passed({{n.outputs.at(0), axes}});
}

}  // namespace

void addPreservingRules(std::vector<Rule>& rules) {
  FamilyTable t(rules, RuleFamily::Preserving);
  // add/sub/rsub(a, b, alpha).
  //   mean-zero: both operands mean-zero -> the join of their facts (axes aligned by broadcasting,
  //              leaves united); adding a zero scalar keeps a's fact; a non-zero scalar breaks.
  //              A table read only here (a parameter leaf) is re-centered along the one axis the
  //              other operand is mean-zero along, when it spans that axis (PiT's [1, C, H, W]).
  //   shift:     an operand's shift passes on, constant also along the axes that operand is
  //              broadcast over; a changed alpha is seen.
  t.add("add-sub", {"aten::add", "aten::sub", "aten::add_", "aten::sub_", "aten::rsub"},
        "a sum or difference of tensors that are each mean-zero (along the same axes after "
        "broadcasting) is mean-zero; adding a non-zero scalar breaks it", addSubMz, addSubShift);
  // mul/div(x, s).
  //   mean-zero: x mean-zero along B and s constant along B (a scalar, a per-row scale) -> x's
  //              fact; a per-feature factor breaks.
  //   shift:     passes when the other factor is constant along the shift's axes; a changed
  //              divisor, or a factor varying along them, sees it.
  t.add("scale", {"aten::mul", "aten::div", "aten::mul_", "aten::div_", "aten::true_divide"},
        "multiplying or dividing a mean-zero tensor by a scalar, or by a tensor constant along the "
        "mean-zero axes (per-row scale), keeps the zero mean; a per-feature factor breaks it",
        scaleMz, scaleShift);
  // addcmul(self, t1, t2, value) = self + value * t1 * t2.
  //   mean-zero: self mean-zero and t1 * t2 mean-zero (one factor mean-zero along B, the other
  //              constant along B) -> the join, as add of the two; value 0 -> self's fact; a
  //              per-feature factor times a mean-zero tensor breaks, as in scale.
  //   shift:     self's shift passes as in add; a factor's shift passes when the other factor is
  //              constant along its axes; a changed value is seen.
  t.add("addcmul", {"aten::addcmul"},
        "self + value * t1 * t2 is a sum of self and a scaled product: mean-zero when self is and "
        "one factor is mean-zero along axes the other factor is constant along",
        addcmulMz, addcmulShift);
  // Copies, casts to float types, negation.
  //   mean-zero: input 0's fact; casts to non-float types break.
  //   shift:     input 0's shift passes unchanged.
  t.add("identity",
        {"aten::neg", "aten::contiguous", "aten::clone", "aten::detach", "aten::alias", "aten::to",
         "aten::type_as", "aten::lift_fresh", "aten::positive", "aten::identity"},
        "value-preserving ops (copies, float casts, negation) keep the zero mean", identityMz, identityShift);
  // dropout(x, p, train) and its in-place, feature and alpha variants.
  //   mean-zero: the identity when p == 0 (whatever the flag) or train is False: x's fact;
  //              otherwise (a random mask), or when p or the flag is not a constant, broken.
  //   shift:     passes when it is the identity; otherwise the mask makes the change vary: seen.
  t.add("dropout",
        {"aten::dropout", "aten::dropout_", "aten::feature_dropout", "aten::feature_dropout_",
         "aten::alpha_dropout", "aten::alpha_dropout_", "aten::feature_alpha_dropout",
         "aten::feature_alpha_dropout_"},
        "dropout with p = 0 (whatever the training flag) or in eval mode is the identity; in "
        "training mode with p > 0 it multiplies by a random mask, which breaks the zero mean and "
        "makes a shift vary", dropoutMz, dropoutShift);
  // masked_fill(x, mask, 0) and where(mask, 0, x) / where(mask, x, 0) (ESM's token dropout,
  // padding): whole rows set to zero.
  //   mean-zero: x mean-zero along B and the mask constant along B (size 1 there: it selects
  //              whole rows) -> x's fact; a fill other than the constant 0, or a mask varying
  //              along B, breaks.
  //   shift:     a shift of x passes, constant along the axes the mask is constant along
  //              (masked rows change by 0, the others by c); a changed mask or fill is seen.
  t.add("row-mask", {"aten::masked_fill", "aten::masked_fill_", "aten::where"},
        "zeroing whole rows (a mask constant along the mean-zero axes, fill 0) keeps every row "
        "mean-zero, and a row's shift becomes 0 or stays: constant along the row either way; a "
        "non-zero fill or a mask within rows breaks", rowMaskMz, rowMaskShift);
}

}  // namespace foldnorm::rules
