// Axis rules, spatial: average pooling, interpolation and the rearrangements of convolutional
// models (channel and pixel shuffles, patch extraction and folding). Inputs are
// [N, C, spatial...] or unbatched [C, spatial...]; the channel axis is the one before the
// spatial axes. Also repeat_interleave, a rearrangement along one axis.
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

/// A shuffle as the view -> permute -> view it is defined by (torch's own decompositions):
/// the input viewed as `split`, its axes permuted (output axis i is split axis perm[i]), viewed
/// as the output. Facts go through the three steps with the factor machinery of the view and
/// permute rules (axes.h), so a mean-zero channel axis merged with block positions stays a
/// factor of the merged axis and comes back whole when a later shuffle splits it out.
struct Shuffle {
  std::vector<int64_t> in, split, perm, permuted, out;
};

/// The shuffle of a node from its recorded shapes and its constant factor (groups or r);
/// nullopt when a shape, the factor or the output shape does not fit the op's definition.
std::optional<Shuffle> shuffleOf(const Graph& g, const Node& n) {
  const auto* in = shapeOf(g, n.inputs.at(0));
  const auto* out = shapeOf(g, n.outputs.at(0));
  auto factor = n.inputs.size() > 1 ? g.constantInt(n.inputs.at(1)) : std::nullopt;
  if (!in || !out || !factor || *factor < 1) return std::nullopt;
  const int64_t r = *factor, rank = int64_t(in->size());
  Shuffle s{*in, {}, {}, {}, *out};
  if (n.kind == "aten::channel_shuffle" || n.kind == "aten::native_channel_shuffle") {
    // [N, C, *] -> [N, g, C/g, *] -> transpose(1, 2) -> [N, C, *].
    if (rank < 2 || in->at(1) % r != 0) return std::nullopt;
    s.split = {in->at(0), r, in->at(1) / r};
    s.split.insert(s.split.end(), in->begin() + 2, in->end());
    for (int64_t a = 0; a < rank + 1; ++a) s.perm.push_back(a == 1 ? 2 : a == 2 ? 1 : a);
  } else {
    if (rank < 3) return std::nullopt;
    const int64_t lead = rank - 3, c = in->at(lead), h = in->at(lead + 1), w = in->at(lead + 2);
    s.split.assign(in->begin(), in->begin() + lead);
    for (int64_t a = 0; a < lead; ++a) s.perm.push_back(a);
    if (n.kind == "aten::pixel_shuffle") {
      // [*, C r^2, H, W] -> [*, C, r, r, H, W] -> [*, C, H, r, W, r] -> [*, C, H r, W r].
      if (c % (r * r) != 0) return std::nullopt;
      s.split.insert(s.split.end(), {c / (r * r), r, r, h, w});
      for (int64_t a : {0, 3, 1, 4, 2}) s.perm.push_back(lead + a);
    } else {
      // pixel_unshuffle: [*, C, H r, W r] -> [*, C, H, r, W, r] -> [*, C, r, r, H, W] -> [*, C r^2, H, W].
      if (h % r != 0 || w % r != 0) return std::nullopt;
      s.split.insert(s.split.end(), {c, h / r, r, w / r, r});
      for (int64_t a : {0, 2, 4, 1, 3}) s.perm.push_back(lead + a);
    }
  }
  for (auto a : s.perm) s.permuted.push_back(s.split.at(a));
  int64_t count = 1, outCount = 1;
  for (auto d : s.permuted) count *= d;
  for (auto d : *out) outCount *= d;
  // The output must be the permuted view regrouped: same element count, same rank as the input.
  if (count != outCount || out->size() != in->size()) return std::nullopt;
  return s;
}

FactoredAxes permuteFactored(const std::vector<int64_t>& perm, const FactoredAxes& f) {
  FactoredAxes o;
  for (std::size_t i = 0; i < perm.size(); ++i) {
    if (f.axes.contains(perm[i])) o.axes.insert(int64_t(i));
    if (f.factor && f.factor->axis == perm[i]) o.factor = AxisFactor{int64_t(i), f.factor->size, f.factor->stride};
  }
  return o;
}

void shuffleMz(MeanZeroContext& ctx) {
  const auto& f = ctx.inputFact(0);
  if (!f.isMeanZero()) { ctx.propagateBroken(0); return; }
  auto s = shuffleOf(ctx.graph(), ctx.node());
  if (!s) { ctx.breakHere("its shapes or its factor do not fit the shuffle (not recorded or not constant)"); return; }
  auto a = mapFactoredMeanZeroThroughView(s->in, s->split, {f.axes, f.factor});
  auto b = mapFactoredMeanZeroThroughView(s->permuted, s->out, permuteFactored(s->perm, a));
  if (a.axes.empty() || b.axes.empty()) { ctx.breakHere("the rearrangement drops the mean-zero axes"); return; }
  ctx.set(0, MeanZeroFact::meanZero(b.axes, b.factor, f.leaves, ctx.rule()));
}

ShiftOutcome shuffleShift(const ShiftInput& in) {
  if (in.slot != 0) return unsafeSeen(in, "uses the changed value as an argument");
  auto s = shuffleOf(in.graph, in.graph.node(in.node));
  if (!s) return unsafeSeen(in, "has shapes or a factor that do not fit the shuffle");
  auto a = mapFactoredConstantThroughView(s->in, s->split, {in.axes, in.factor});
  auto b = mapFactoredConstantThroughView(s->permuted, s->out, permuteFactored(s->perm, a));
  auto out = in.graph.node(in.node).outputs.at(0);
  std::vector<std::pair<ValueId, AxisFactor>> factors;
  if (b.factor) factors.emplace_back(out, *b.factor);
  return ShiftOutcome::passed({{out, b.axes}}, factors);
}

/// im2col/col2im (F.unfold/F.fold) on [N, C, H, W] <-> [N, C*kh*kw, L] (or unbatched without
/// N): the patch channel c*kh*kw + k holds channel c at kernel offset k. Returns {C, kh*kw} from
/// the recorded shapes and the constant kernel size, nullopt when they do not fit.
std::optional<std::pair<int64_t, int64_t>> patchChannels(const Graph& g, const Node& n, bool fold) {
  const auto* in = shapeOf(g, n.inputs.at(0));
  const auto* out = shapeOf(g, n.outputs.at(0));
  auto kernel = n.inputs.size() > (fold ? 2 : 1) ? g.constantIntList(n.inputs.at(fold ? 2 : 1)) : std::nullopt;
  if (!in || !out || !kernel || kernel->size() != 2 || kernel->at(0) < 1 || kernel->at(1) < 1) return std::nullopt;
  const auto& image = fold ? *out : *in;
  const auto& cols = fold ? *in : *out;
  if ((image.size() != 3 && image.size() != 4) || cols.size() + 1 != image.size()) return std::nullopt;
  int64_t c = image.at(image.size() - 3), k = kernel->at(0) * kernel->at(1);
  if (cols.at(cols.size() - 2) != c * k) return std::nullopt;
  return std::make_pair(c, k);
}

void unfoldMz(MeanZeroContext& ctx) {
  const auto& n = ctx.node();
  const auto& f = ctx.inputFact(0);
  if (!f.isMeanZero()) { ctx.propagateBroken(0); return; }
  auto ck = patchChannels(ctx.graph(), n, false);
  auto r = rankOf(ctx.graph(), n.inputs.at(0));
  if (!ck || f.axes != AxisSet::of({r - 3})) {
    ctx.breakHere(ck ? "it moves the mean-zero axes into patches (only mean-zero along the channels alone is kept)"
                     : "its shapes or kernel size do not fit [N, C, H, W] -> [N, C*kh*kw, L]");
    return;
  }
  // Each column entry c*k + o is channel c of one (zero-padded) pixel: for every offset o and
  // column, the sum over c is a channel sum of one pixel (or of zeros), i.e. zero.
  int64_t axis = r - 3;
  ctx.set(0, MeanZeroFact::meanZero(AxisSet::of({axis}), AxisFactor{axis, ck->first, ck->second}, f.leaves, ctx.rule()));
}

void foldMz(MeanZeroContext& ctx) {
  const auto& n = ctx.node();
  const auto& f = ctx.inputFact(0);
  if (!f.isMeanZero()) { ctx.propagateBroken(0); return; }
  auto ck = patchChannels(ctx.graph(), n, true);
  auto r = rankOf(ctx.graph(), n.inputs.at(0));
  if (!ck) { ctx.breakHere("its shapes or kernel size do not fit [N, C*kh*kw, L] -> [N, C, H, W]"); return; }
  const int64_t channel = r - 2;
  // out[c, y, x] sums in[c*K + o, l] over the (o, l) that land on (y, x): the same terms for
  // every c. Mean-zero over c at each (o, l) (the factor, or the whole axis when K is 1) thus
  // stays mean-zero over c; a sum over the whole patch axis does not (other o, l land elsewhere).
  AxisSet lead = f.axes;
  lead.erase(channel);
  bool leadingOnly = lead.empty() || lead.axes().back() < channel;
  bool overC = f.axes.contains(channel) &&
               ((f.factor && *f.factor == AxisFactor{channel, ck->first, ck->second}) || (!f.factor && ck->second == 1));
  if (!leadingOnly || (f.axes.contains(channel) && !overC)) {
    ctx.breakHere("sums overlapping patches: only mean-zero over the channel c of each patch entry c*kh*kw + k "
                  "(or over leading axes) stays mean-zero");
    return;
  }
  AxisSet axes = lead;
  if (overC) axes.insert(channel);  // [N, C*K, L] -> [N, C, H, W]: C keeps the patch axis' index
  ctx.set(0, MeanZeroFact::meanZero(axes, f.leaves, ctx.rule()));
}

ShiftOutcome foldShift(const ShiftInput& in) {
  const auto& g = in.graph;
  const auto& n = g.node(in.node);
  if (in.slot != 0) return unsafeSeen(in, "uses the changed value as an argument");
  auto ck = patchChannels(g, n, true);
  if (!ck) return unsafeSeen(in, "has shapes or a kernel size that do not fit");
  auto r = rankOf(g, n.inputs.at(0));
  const int64_t channel = r - 2;
  // A change constant along c (the whole patch axis, or its c digit) adds the same sum of terms
  // to every output channel; overlap counts vary over the image, so the spatial axes are dropped.
  AxisSet axes;
  for (auto a : in.axes.axes())
    if (a < channel) axes.insert(a);
  if (in.axes.contains(channel) || (in.factor && *in.factor == AxisFactor{channel, ck->first, ck->second}))
    axes.insert(channel);
  return ShiftOutcome::passed({{n.outputs.at(0), axes}});
}

/// repeat_interleave(self, repeats, dim, output_size): the repeated axis, or nullopt for the
/// one-operand form (indices made from a repeats tensor) and for dim None (a flattened result).
std::optional<int64_t> interleaveDim(const Graph& g, const Node& n) {
  if (n.inputs.size() < 3 || g.isNoneValue(n.inputs.at(2))) return std::nullopt;
  auto rank = rankOf(g, n.inputs.at(0));
  if (rank != rankOf(g, n.outputs.at(0))) return std::nullopt;
  return dimArg(g, n.inputs.at(2), rank);
}

void repeatInterleaveMz(MeanZeroContext& ctx) {
  const auto& g = ctx.graph();
  const auto& n = ctx.node();
  if (n.inputs.size() < 3) { ctx.breakHere("makes indices from a repeats tensor"); return; }
  const auto& f = ctx.inputFact(0);
  if (!f.isMeanZero()) { ctx.propagateBroken(0); return; }
  auto dim = interleaveDim(g, n);
  if (!dim) { ctx.breakHere("its dim is None (a flattened result) or not a constant"); return; }
  // Along dim, each element appears r times: a mean-zero row sums to r * 0, but only when r is
  // one number; per-element counts weight the elements unevenly.
  bool uniform = g.constantInt(n.inputs.at(1)).has_value();
  if (f.axes.contains(*dim) && !uniform) {
    ctx.breakHere("repeats elements of the mean-zero axis " + std::to_string(*dim) +
                  " by per-element counts, which weight the row unevenly");
    return;
  }
  // A factor of dim itself (facts.h) does not survive the repetition; the coarse claim does.
  auto fine = f.factor && f.factor->axis == *dim ? std::nullopt : f.factor;
  ctx.set(0, MeanZeroFact::meanZero(f.axes, fine, f.leaves, ctx.rule()));
}

ShiftOutcome repeatInterleaveShift(const ShiftInput& in) {
  if (in.slot != 0) return ShiftOutcome::ignored();  // repeats and dim only place elements
  const auto& g = in.graph;
  const auto& n = g.node(in.node);
  if (!interleaveDim(g, n)) return unsafeSeen(in, "flattens or has a non-constant dim");
  // Copies of elements: constant along an axis before, constant along it after.
  return ShiftOutcome::passed({{n.outputs.at(0), in.axes}});
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
  // pixel_shuffle, pixel_unshuffle, channel_shuffle: by their definition as view -> permute ->
  // view ([*, C r^2, H, W] -> [*, C, r, r, H, W] -> [*, C, H, r, W, r] -> [*, C, H r, W r] and back;
  // [N, C, *] -> [N, g, C/g, *] -> transpose -> [N, C, *]).
  //   mean-zero: through the three steps as the view and permute rules move it, factors
  //              included: channels merged with block positions become a factor of the merged
  //              axis (space-to-depth), and a factor split out again is a whole axis
  //              (depth-to-space after space-to-depth); unrecorded shapes break.
  //   shift:     the same three steps for the constant axes and factor.
  t.add("shuffle", {"aten::pixel_shuffle", "aten::pixel_unshuffle", "aten::channel_shuffle", "aten::native_channel_shuffle"},
        "pixel and channel shuffles are a reshape, a permute and a reshape: the mean-zero axes (or a "
        "factor of a merged axis) move through them as through those ops", shuffleMz, shuffleShift);
  // im2col (F.unfold): [N, C, H, W] -> [N, C*kh*kw, L].
  //   mean-zero: along the channels alone -> along the patch axis, refined by its channel digit
  //              (factor size C, stride kh*kw): every entry c*kh*kw + k is channel c of one pixel
  //              or padding; anything else breaks.
  //   shift:     seen (the rank changes; no rule follows a shift through it).
  t.add("unfold", {"aten::im2col"},
        "patch extraction puts channel c of each patch position at c*kh*kw + k: mean-zero over the "
        "channels stays mean-zero over the channel digit of the patch axis", unfoldMz, unsafeShift);
  // col2im (F.fold): [N, C*kh*kw, L] -> [N, C, H, W], summing overlapping patches.
  //   mean-zero: mean-zero over the channel digit c of the patch axis (factor size C, stride
  //              kh*kw, or the whole axis when kh*kw = 1) -> along C; along leading axes ->
  //              along them; over the whole patch axis (or L) it breaks.
  //   shift:     constant along the leading axes, and along C when constant along c; the
  //              spatial axes are dropped (overlap counts vary).
  t.add("fold", {"aten::col2im"},
        "folding sums the patch entries that land on a pixel, the same entries for every channel: "
        "mean-zero over the channel digit of the patch axis stays mean-zero over the channels",
        foldMz, foldShift);
  // repeat_interleave(x, repeats, dim) (heads or tokens repeated, upsampling by repetition).
  //   mean-zero: along axes other than dim, x's fact; along dim too when repeats is one constant
  //              count; per-element counts, dim None and the indices-only form break.
  //   shift:     passes unchanged (every output element is a copy of an input element).
  t.add("repeat-interleave", {"aten::repeat_interleave"},
        "repeating each element along one axis copies whole rows of the other axes, and along that "
        "axis a mean-zero row repeated r times sums to zero; a shift is copied with its element",
        repeatInterleaveMz, repeatInterleaveShift);
}

}  // namespace foldnorm::rules
