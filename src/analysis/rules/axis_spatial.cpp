// Axis rules, spatial: average pooling and the rearrangements of convolutional models (channel
// shuffles, space-to-depth, patch extraction). Inputs are [N, C, spatial...] or unbatched
// [C, spatial...]; the channel axis is the one before the spatial axes.
#include "rule_helpers.h"

namespace foldnorm::rules {
namespace {

/// The number of spatial (trailing) axes an op works on: avg_pool2d -> 2, ...
int64_t spatialRank(const std::string& kind) {
  if (kind.find("1d") != std::string::npos) return 1;
  if (kind.find("3d") != std::string::npos) return 3;
  return 2;
}

/// The spatial axes of the node's input (the trailing spatialRank axes), or nullopt when the
/// rank is unknown, too small, or differs from the output's.
std::optional<AxisSet> spatialAxes(const Graph& g, const Node& n, int64_t k) {
  auto r = rankOf(g, n.inputs.at(0));
  if (r < k + 1 || r != rankOf(g, n.outputs.at(0))) return std::nullopt;
  return AxisSet::trailing(r, k);
}

/// Linear maps of each channel's spatial plane (window averages, interpolation): a mean-zero
/// fact outside the spatial axes stays; along them, `why` breaks it.
void perChannelSpatialMz(MeanZeroContext& ctx, const std::string& why) {
  const auto& n = ctx.node();
  const auto& f = ctx.inputFact(0);
  if (!f.isMeanZero()) { ctx.propagateBroken(0); return; }
  auto spatial = spatialAxes(ctx.graph(), n, spatialRank(n.kind));
  if (!spatial) { ctx.breakHere("its input and output ranks were not recorded as [N, C, spatial...]"); return; }
  if (!(f.axes & *spatial).empty()) {
    ctx.breakHere(why);
    return;
  }
  ctx.set(0, MeanZeroFact::meanZero(f.axes, f.leaves, ctx.rule()));
}

void averagePoolMz(MeanZeroContext& ctx) {
  perChannelSpatialMz(ctx, "averages windows along the mean-zero axes (a window of a mean-zero row is not mean-zero)");
}

void interpolateMz(MeanZeroContext& ctx) {
  perChannelSpatialMz(ctx, "interpolates along the mean-zero axes (resampled rows need not sum to zero)");
}

ShiftOutcome interpolateShift(const ShiftInput& in) {
  const auto& n = in.graph.node(in.node);
  if (in.slot != 0) return unsafeSeen(in, "uses the changed value as a size or scale");
  if (!spatialAxes(in.graph, n, spatialRank(n.kind))) return unsafeSeen(in, "has unrecorded ranks");
  // Every output pixel is a combination of input pixels of its channel whose weights sum to one
  // (nearest copies, linear/cubic/area weights are normalised, edges are clamped, not padded):
  // a change constant along any axis stays constant along it, the spatial ones included.
  return ShiftOutcome::passed({{n.outputs.at(0), in.axes}});
}

ShiftOutcome averagePoolShift(const ShiftInput& in) {
  const auto& n = in.graph.node(in.node);
  if (in.slot != 0) return unsafeSeen(in, "uses the changed value as a pooling argument");
  auto spatial = spatialAxes(in.graph, n, spatialRank(n.kind));
  if (!spatial) return unsafeSeen(in, "has unrecorded ranks");
  // A window average of a change constant along an axis outside the window is constant along
  // it; along the window axes, zero padding and edges would make it vary: dropped.
  // An output axis of size 1 (global pooling) holds one value: constant along it whatever came in.
  AxisSet axes = in.axes;
  const auto* outShape = shapeOf(in.graph, n.outputs.at(0));
  for (auto a : spatial->axes()) {
    if (outShape && a < int64_t(outShape->size()) && outShape->at(a) == 1) axes.insert(a);
    else axes.erase(a);
  }
  return ShiftOutcome::passed({{n.outputs.at(0), axes}});
}

/// channel_shuffle(x, groups) permutes the channels; pixel_unshuffle(x, r) moves r x r spatial
/// blocks into channels (channel c becomes channels c*r*r + k); im2col(x, ...) moves patches into
/// channels the same way (c*kh*kw + k) and windows into one axis. For each k the old channels
/// are one block: mean-zero over C stays mean-zero over the new channel axis.
bool permutesChannels(const std::string& kind) { return kind == "aten::channel_shuffle" || kind == "aten::native_channel_shuffle"; }

void toChannelsMz(MeanZeroContext& ctx) {
  const auto& g = ctx.graph();
  const auto& n = ctx.node();
  const auto& f = ctx.inputFact(0);
  if (!f.isMeanZero()) { ctx.propagateBroken(0); return; }
  auto ri = rankOf(g, n.inputs.at(0)), ro = rankOf(g, n.outputs.at(0));
  bool shuffle = permutesChannels(n.kind);
  if (ri < (shuffle ? 2 : 3) || ro < 2) { ctx.breakHere("its input and output ranks were not recorded as [N, C, ...]"); return; }
  int64_t channel = shuffle ? 1 : ri - 3;
  if (f.axes != AxisSet::of({channel})) {
    ctx.breakHere("it rearranges the mean-zero axes into others (only mean-zero along the channels alone is kept)");
    return;
  }
  // im2col's output is [N, C*kh*kw, L] (rank 3 for rank 4 in); pixel_unshuffle keeps the rank.
  int64_t outChannel = shuffle ? 1 : n.kind == "aten::im2col" ? ro - 2 : ro - 3;
  ctx.set(0, MeanZeroFact::meanZero(AxisSet::of({outChannel}), f.leaves, ctx.rule()));
}

ShiftOutcome toChannelsShift(const ShiftInput& in) {
  const auto& g = in.graph;
  const auto& n = g.node(in.node);
  if (in.slot != 0) return unsafeSeen(in, "uses the changed value as an argument");
  auto r = rankOf(g, n.inputs.at(0));
  if (r < 1 || r != rankOf(g, n.outputs.at(0))) return unsafeSeen(in, "has unrecorded or changing ranks");
  if (permutesChannels(n.kind)) return ShiftOutcome::passed({{n.outputs.at(0), in.axes}});
  // pixel_unshuffle: an output channel mixes channels and block positions, an output pixel is a
  // block: constant along the new channels only if constant along the old ones and within
  // blocks; kept: the leading axes, and the spatial ones when constant along both.
  AxisSet axes;
  for (int64_t a = 0; a + 3 < r; ++a)
    if (in.axes.contains(a)) axes.insert(a);
  bool spatial = in.axes.contains(r - 1) && in.axes.contains(r - 2);
  if (spatial) { axes.insert(r - 1); axes.insert(r - 2); }
  if (spatial && in.axes.contains(r - 3)) axes.insert(r - 3);
  return ShiftOutcome::passed({{n.outputs.at(0), axes}});
}

}  // namespace

void addAxisSpatialRules(std::vector<Rule>& rules) {
  FamilyTable t(rules, RuleFamily::Axis);
  // avg_pool1d/2d/3d and adaptive_avg_pool1d/2d/3d over the trailing spatial axes.
  //   mean-zero: linear and the same for every channel: mean-zero along channels (or any axis
  //              outside the windows) stays; along a spatial axis it breaks.
  //   shift:     constant along the axes outside the windows; the window axes are dropped,
  //              except those pooled to size 1 (one value is constant along its axis).
  t.add("average-pool",
        {"aten::avg_pool1d", "aten::avg_pool2d", "aten::avg_pool3d", "aten::adaptive_avg_pool1d",
         "aten::adaptive_avg_pool2d", "aten::adaptive_avg_pool3d"},
        "average pooling over spatial windows is linear and the same for every channel: the "
        "channel mean stays zero, and a shift constant along the channels stays constant along "
        "them", averagePoolMz, averagePoolShift);
  // upsample_* (F.interpolate: nearest, nearest-exact, linear, bilinear, bicubic, trilinear,
  // antialiased) over the trailing spatial axes.
  //   mean-zero: linear and the same for every channel: mean-zero along channels (or any axis
  //              outside the spatial ones) stays; along a spatial axis it breaks.
  //   shift:     passes on every axis (interpolation weights sum to one, edges are clamped).
  t.add("interpolate",
        {"aten::upsample_nearest1d", "aten::upsample_nearest2d", "aten::upsample_nearest3d",
         "aten::_upsample_nearest_exact1d", "aten::_upsample_nearest_exact2d",
         "aten::_upsample_nearest_exact3d", "aten::upsample_linear1d", "aten::upsample_bilinear2d",
         "aten::upsample_bicubic2d", "aten::upsample_trilinear3d", "aten::_upsample_bilinear2d_aa",
         "aten::_upsample_bicubic2d_aa"},
        "interpolation over spatial axes (an interpolated position table) is linear and the same "
        "for every channel: the channel mean stays zero; its weights sum to one, so a shift "
        "constant along an axis stays constant along it", interpolateMz, interpolateShift);
  // channel_shuffle, pixel_unshuffle, im2col (unfold).
  //   mean-zero: along the channel axis alone -> along the output's channel axis (the old
  //              channels form one block per new position); anything else breaks.
  //   shift:     channel_shuffle: unchanged; pixel_unshuffle: the leading axes, plus spatial and
  //              channels when constant along both spatial axes; im2col: seen (rank changes).
  t.add("to-channels", {"aten::channel_shuffle", "aten::native_channel_shuffle", "aten::pixel_unshuffle", "aten::im2col"},
        "channel shuffles permute the channels; space-to-depth and patch extraction put every "
        "channel of one position into one block of the new channel axis: mean-zero over the "
        "channels stays mean-zero over the new channel axis", toChannelsMz, toChannelsShift);
}

}  // namespace foldnorm::rules
