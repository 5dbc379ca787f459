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

void statisticsMz(MeanZeroContext& ctx) {
  ctx.breakHere("a normalization's output is scaled and shifted by its weight and bias, and its "
                "statistics are not mean-zero");
}

/// native_layer_norm(x, normalized_shape, w, b, eps) -> (out, mean, rstd), the form export IR
/// uses: out and rstd do not change under a shift along the normalized axes, mean does.
ShiftOutcome nativeLayerNormShift(const ShiftInput& in) {
  const auto& g = in.graph;
  const auto& n = g.node(in.node);
  if (in.slot != 0) return unsafeSeen(in, "uses the changed value as its weight or bias");
  auto shape = g.constantIntList(n.inputs.at(1));
  if (!shape) return unsafeSeen(in, "has a non-constant normalized_shape");
  auto normalized = AxisSet::trailing(rankOf(g, n.inputs.at(0)), int64_t(shape->size()));
  if (normalized.empty() || !normalized.subsetOf(in.axes))
    return unsafeSeen(in, "normalizes over " + toString(normalized) + " but the shift is constant only along " +
                              toString(in.axes));
  if (n.outputs.size() > 1 && !g.value(n.outputs.at(1)).uses.empty())
    return unsafeSeen(in, "returns the mean it subtracts, which changes by the shift");
  return ShiftOutcome::absorbed("LayerNorm subtracts the mean over " + toString(normalized) +
                                ", removing a shift constant along those axes");
}

/// group_norm(x, num_groups, w, b, eps, cudnn): per sample and group of channels, the mean
/// over the group's channels and all spatial axes is subtracted.
ShiftOutcome groupNormShift(const ShiftInput& in) {
  const auto& g = in.graph;
  const auto& n = g.node(in.node);
  if (in.slot != 0) return unsafeSeen(in, "uses the changed value as an argument");
  auto rank = rankOf(g, n.inputs.at(0));
  if (rank < 2) return unsafeSeen(in, "has an unrecorded input rank");
  auto normalized = AxisSet::trailing(rank, rank - 1);  // C and the spatial axes
  if (!normalized.subsetOf(in.axes))
    return unsafeSeen(in, "normalizes over channel groups and " + toString(AxisSet::trailing(rank, rank - 2)) +
                              " but the shift is constant only along " + toString(in.axes));
  return ShiftOutcome::absorbed("GroupNorm subtracts each group's mean over its channels and the spatial axes, "
                                "removing a shift constant along " + toString(normalized));
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
  // native_layer_norm(x, normalized_shape, w, b, eps) -> (out, mean, rstd) (export IR).
  //   mean-zero: every output broken (affine output; statistics).
  //   shift:     absorbed when constant along the normalized axes and the mean output is
  //              unused; otherwise seen. Not a fold candidate: the fold replaces aten::layer_norm.
  t.add("native-layer-norm", {"aten::native_layer_norm"},
        "the form export IR gives LayerNorm: output 0 absorbs a shift constant along the "
        "normalized axes (outputs 1 and 2, mean and rstd, are not mean-zero, and the mean sees "
        "the shift); it is an absorber only, not a fold candidate", statisticsMz, nativeLayerNormShift);
  // group_norm(x, G, w, b, eps, cudnn).
  //   mean-zero: broken (per-channel affine output).
  //   shift:     absorbed when constant along the channels and all spatial axes (any G); seen
  //              otherwise. With G = 1 it is a LayerNorm over C, H, W, but its affine is per
  //              channel, which foldnorm::rms_norm over [C, H, W] cannot express: absorber only.
  t.add("group-norm", {"aten::group_norm"},
        "GroupNorm subtracts each group's mean over its channels and spatial axes, so it absorbs "
        "a shift constant along the channels and spatial axes; its per-channel affine output is not "
        "mean-zero, and it is not a fold candidate (RMSNorm over [C,H,W] has no per-channel affine)",
        statisticsMz, groupNormShift);
}

}  // namespace foldnorm::rules
