// Absorber rules: ops that remove a shift constant along their axes. Their outputs are not
// mean-zero.
#include "rule_helpers.h"

namespace foldnorm::rules {
namespace {

void layerNormMz(MeanZeroContext& ctx) {
  ctx.breakHere("LayerNorm output is scaled and shifted by its weight and bias, not mean-zero");
}

ShiftOutcome layerNormShift(const ShiftInput& in) {
  const auto& g = in.graph;
  const auto& n = g.node(in.node);
  if (in.slot != 0) return unsafeSeen(in, "uses the changed value as its weight or bias");
  auto shape = g.constantIntList(n.inputs.at(1));
  auto rank = rankOf(g, n.inputs.at(0));
  if (!shape) return unsafeSeen(in, "has a non-constant normalized_shape");
  auto normalized = AxisSet::trailing(rank, int64_t(shape->size()));
  if (normalized.subsetOf(in.axes))
    return ShiftOutcome::absorbed("LayerNorm subtracts the mean over " + toString(normalized) +
                                  ", removing a shift constant along those axes");
  return unsafeSeen(in, "normalizes over " + toString(normalized) +
                            " but the shift is constant only along " + toString(in.axes));
}


void softmaxMz(MeanZeroContext& ctx) {
  ctx.breakHere("softmax output is positive, not mean-zero");
}

ShiftOutcome softmaxShift(const ShiftInput& in) {
  const auto& g = in.graph;
  const auto& n = g.node(in.node);
  if (in.slot != 0) return ShiftOutcome::ignored();
  auto dim = dimArg(g, n.inputs.at(1), rankOf(g, n.inputs.at(0)));
  if (dim && in.axes.contains(*dim))
    return ShiftOutcome::absorbed("softmax is invariant to a shift constant along its axis");
  return unsafeSeen(in, "is taken along an axis where the shift varies");
}

}  // namespace

void addAbsorberRules(std::vector<Rule>& rules) {
  FamilyTable t(rules, RuleFamily::Absorber);
  // layer_norm(x, normalized_shape, w, b).
  //   mean-zero: broken (its output is scaled and shifted by w, b).
  //   shift:     absorbed when the shift is constant along all normalized axes; seen otherwise,
  //              and a changed weight or bias is seen.
  t.add("layer-norm", {"aten::layer_norm"},
        "LayerNorm subtracts the mean over its normalized axes, so it absorbs a shift constant along "
        "them; its own output is affine and not mean-zero", layerNormMz, layerNormShift);
  // softmax/log_softmax(x, dim).
  //   mean-zero: broken (positive output).
  //   shift:     absorbed when constant along dim; seen otherwise.
  t.add("softmax", {"aten::softmax", "aten::_softmax", "aten::log_softmax", "aten::_log_softmax"},
        "softmax is invariant to a shift constant along its axis; its output is positive",
        softmaxMz, softmaxShift);
}

}  // namespace foldnorm::rules
