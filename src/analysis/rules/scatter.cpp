// Functional writes: the ops torch's functionalization writes for an in-place op (x[i] = v, x.fill_(c),
// a write through a view), which the .pt2 importer puts into the Graph in place of the program's
// in-place node (import/export.h). Each output is a new tensor: "the base with a region replaced",
// so nothing here depends on aliasing; the facts follow from which region is replaced by what.
#include "rule_helpers.h"

namespace foldnorm::rules {
namespace {

/// The replaced region of slice_scatter / select_scatter / diagonal_scatter(self, src, ...):
/// which output axes it is cut along, where each src axis lands in the output (-1: the
/// diagonal's own axis, which is no output axis), and whether it is the whole tensor (then the
/// output is src, laid out as the output).
struct Region {
  AxisSet cut;
  std::vector<int64_t> srcToOut;
  bool whole = false;
};

std::optional<Region> regionOf(const Graph& g, const Node& n) {
  const auto rank = rankOf(g, n.inputs.at(0));
  const auto srcRank = rankOf(g, n.inputs.at(1));
  const auto* self = shapeOf(g, n.inputs.at(0));
  const auto* src = shapeOf(g, n.inputs.at(1));
  if (rank < 0 || srcRank < 0 || !self || !src) return std::nullopt;
  Region r;
  if (n.kind == "aten::slice_scatter" || n.kind == "aten::select_scatter") {
    const bool select = n.kind == "aten::select_scatter";
    if (srcRank != (select ? rank - 1 : rank)) return std::nullopt;
    auto dim = dimArg(g, n.inputs.at(2), rank);
    if (!dim) return std::nullopt;
    r.cut.insert(*dim);
    for (int64_t a = 0; a < srcRank; ++a) r.srcToOut.push_back(select && a >= *dim ? a + 1 : a);
    r.whole = select ? self->at(*dim) == 1 : *self == *src;
    return r;
  }
  // diagonal_scatter(self, src, offset, dim1, dim2): src holds the other axes in order, then the diagonal.
  if (srcRank != rank - 1 || n.inputs.size() < 5) return std::nullopt;
  auto d1 = dimArg(g, n.inputs.at(3), rank), d2 = dimArg(g, n.inputs.at(4), rank);
  if (!d1 || !d2 || *d1 == *d2) return std::nullopt;
  r.cut.insert(*d1);
  r.cut.insert(*d2);
  for (int64_t a = 0; a < rank; ++a)
    if (a != *d1 && a != *d2) r.srcToOut.push_back(a);
  r.srcToOut.push_back(-1);
  return r;
}

/// src axes -> output axes; nullopt when one of them is the diagonal's axis.
std::optional<AxisSet> srcAxes(const Region& r, const AxisSet& axes) {
  AxisSet out;
  for (auto a : axes.axes()) {
    if (a >= int64_t(r.srcToOut.size()) || r.srcToOut[a] < 0) return std::nullopt;
    out.insert(r.srcToOut[a]);
  }
  return out;
}

void scatterMz(MeanZeroContext& ctx) {
  const auto& n = ctx.node();
  auto region = regionOf(ctx.graph(), n);
  if (!region) { ctx.breakHere("its dims are not constants or its shapes were not recorded"); return; }
  const auto& src = ctx.inputFact(1);
  if (!src.isMeanZero()) { ctx.propagateBroken(1); return; }
  auto moved = srcAxes(*region, src.axes);
  if (!moved) { ctx.breakHere("the written values are mean-zero only along the diagonal they fill"); return; }
  if (region->whole) {  // every element comes from src
    ctx.set(0, MeanZeroFact::meanZero(*moved, src.leaves, ctx.rule()));
    return;
  }
  const auto& self = ctx.inputFact(0);
  if (!self.isMeanZero()) { ctx.propagateBroken(0); return; }
  auto joined = MeanZeroFact::join(self, MeanZeroFact::meanZero(*moved, src.leaves, ctx.rule()));
  if (!(joined.axes & region->cut).empty()) {
    ctx.breakHere("replaces part of a row along the mean-zero axis " + toString(joined.axes & region->cut) +
                  "; a row made of two tensors' parts need not sum to zero");
    return;
  }
  ctx.set(0, MeanZeroFact::meanZero(joined.axes, joined.leaves, ctx.rule()));
}

ShiftOutcome scatterShift(const ShiftInput& in) {
  if (in.slot > 1) return ShiftOutcome::ignored();  // dims, indices, offsets
  const auto& g = in.graph;
  const auto& n = g.node(in.node);
  auto region = regionOf(g, n);
  if (!region) return unsafeSeen(in, "has non-constant dims or unrecorded shapes");
  const auto out = n.outputs.at(0);
  if (in.slot == 0) {
    if (region->whole) return ShiftOutcome::ignored();  // self's values are all replaced
    AxisSet axes = in.axes;
    for (auto a : region->cut.axes()) axes.erase(a);  // changed outside the region only
    return ShiftOutcome::passed({{out, axes}});
  }
  AxisSet kept;
  for (auto a : in.axes.axes())
    if (a < int64_t(region->srcToOut.size()) && region->srcToOut[a] >= 0) kept.insert(a);
  auto axes = *srcAxes(*region, kept);
  if (!region->whole)
    for (auto a : region->cut.axes()) axes.erase(a);  // changed inside the region only
  return ShiftOutcome::passed({{out, axes}});
}

bool floatingDtype(const std::string& d) {
  return d == "float32" || d == "float64" || d == "float16" || d == "bfloat16";
}

void copyMz(MeanZeroContext& ctx) {
  const auto& g = ctx.graph();
  const auto& n = ctx.node();
  const auto& src = ctx.inputFact(1);
  if (!src.isMeanZero()) { ctx.propagateBroken(1); return; }
  const auto& out = g.value(n.outputs.at(0)).tensor;
  if (!out || !floatingDtype(out->dtype)) {
    ctx.breakHere("copies into a tensor that is not floating point (a cast that rounds)");
    return;
  }
  auto axes = alignAxes(src.axes, rankOf(g, n.inputs.at(1)), rankOf(g, n.outputs.at(0)));
  ctx.set(0, MeanZeroFact::meanZero(axes, src.leaves, ctx.rule()));
}

ShiftOutcome copyShift(const ShiftInput& in) {
  if (in.slot != 1) return ShiftOutcome::ignored();  // self gives only the shape and dtype
  const auto& g = in.graph;
  const auto& n = g.node(in.node);
  auto ri = rankOf(g, n.inputs.at(1)), ro = rankOf(g, n.outputs.at(0));
  const auto* si = shapeOf(g, n.inputs.at(1));
  const auto* so = shapeOf(g, n.outputs.at(0));
  if (!si || !so || ri > ro) return unsafeSeen(in, "has unrecorded shapes");
  auto axes = alignAxes(in.axes, ri, ro);
  for (int64_t a = 0; a < ro; ++a) {  // broadcast axes repeat one value
    int64_t ia = a - (ro - ri);
    if (ia < 0 || (si->at(ia) == 1 && so->at(a) != 1)) axes.insert(a);
  }
  return ShiftOutcome::passed({{n.outputs.at(0), axes}});
}

void filledMz(MeanZeroContext& ctx) { ctx.breakHere("every element is set to one value"); }

ShiftOutcome fillShift(const ShiftInput& in) {
  if (in.slot != 1) return ShiftOutcome::ignored();
  const auto out = in.graph.node(in.node).outputs.at(0);
  auto rank = rankOf(in.graph, out);
  if (rank < 0) return unsafeSeen(in, "has an unrecorded shape");
  return ShiftOutcome::passed({{out, AxisSet::trailing(rank, rank)}});  // the same change everywhere
}

}  // namespace

void addScatterRules(std::vector<Rule>& rules) {
  FamilyTable axis(rules, RuleFamily::Axis);
  // slice_scatter / select_scatter / diagonal_scatter(self, src, ...): self with a region along
  // `dim` (the diagonal of dim1, dim2) replaced by src.
  //   mean-zero: when src is the whole tensor, src's fact (its axes where they land); otherwise
  //              self and src both mean-zero, joined (src's axes moved into the output's frame),
  //              and no joined axis is one the region is cut along (a row along it mixes parts of
  //              both); a src fact along the diagonal's own axis breaks.
  //   shift:     into self: constant along its axes except the cut ones (it changes outside the
  //              region only), ignored when the region is everything; into src: its axes moved
  //              into the output's frame, except the cut ones unless the region is everything.
  axis.add("scatter", {"aten::slice_scatter", "aten::select_scatter", "aten::diagonal_scatter"},
           "a region replaced along another axis keeps whole rows of either tensor, so rows mean-zero in both "
           "stay mean-zero; a region cut along a mean-zero axis mixes two tensors' parts in one row",
           scatterMz, scatterShift);
  // copy(self, src): src broadcast to self's shape, in self's dtype (x.copy_(src) functionalized).
  //   mean-zero: src's axes, right-aligned into the output's rank, when the output is floating
  //              point (a cast to an integer rounds).
  //   shift:     into src: its axes right-aligned, and every axis src is broadcast along; self
  //              gives only a shape and a dtype (ignored).
  axis.add("copy", {"aten::copy"},
           "copying src into a tensor's shape copies whole rows of src, which stay mean-zero",
           copyMz, copyShift);
  FamilyTable breaker(rules, RuleFamily::Breaker);
  // fill(self, value) / zero(self): one value everywhere.
  //   mean-zero: broken. shift: self gives only a shape (ignored); a change of the value changes
  //              every element by the same amount (constant along every axis).
  breaker.add("fill", {"aten::fill", "aten::zero"},
              "a tensor filled with one value is not made mean-zero by any centering; a change of the "
              "value reaches every element alike", filledMz, fillShift);
  // as_strided_scatter, index_put, masked_scatter, scatter, index_fill, index_copy: values written
  // at positions given by strides, indices or masks.
  //   mean-zero: broken. shift: seen.
  breaker.add("indexed-write",
              {"aten::as_strided_scatter", "aten::index_put", "aten::masked_scatter", "aten::scatter",
               "aten::index_fill", "aten::index_copy"},
              "values written at positions given by strides, indices or a mask replace parts of rows the "
              "analysis cannot name", [](MeanZeroContext& ctx) { ctx.breakHere("writes values at data-given positions"); },
              unsafeShift);
}

}  // namespace foldnorm::rules
