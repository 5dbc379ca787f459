// Axis rules, layout: ops that move, copy or select along axes. The fact's axes move with the
// data; taking a part along a mean-zero axis breaks it.
#include <algorithm>

#include "rule_helpers.h"

namespace foldnorm::rules {
namespace {

void viewMz(MeanZeroContext& ctx) {
  const auto& g = ctx.graph();
  const auto& n = ctx.node();
  const auto& f = ctx.inputFact(0);
  if (!f.isMeanZero()) { ctx.propagateBroken(0); return; }
  const auto* in = shapeOf(g, n.inputs.at(0));
  const auto* out = shapeOf(g, n.outputs.at(0));
  if (!in || !out) { ctx.breakHere("shapes were not recorded"); return; }
  auto mapped = mapFactoredMeanZeroThroughView(*in, *out, {f.axes, f.factor});
  if (mapped.axes.empty()) { ctx.breakHere("the reshape drops the mean-zero axes"); return; }
  ctx.set(0, MeanZeroFact::meanZero(mapped.axes, mapped.factor, f.leaves, ctx.rule()));
}

ShiftOutcome viewShift(const ShiftInput& in) {
  if (in.slot != 0) return ShiftOutcome::ignored();
  const auto& g = in.graph;
  const auto& n = g.node(in.node);
  const auto* a = shapeOf(g, n.inputs.at(0));
  const auto* b = shapeOf(g, n.outputs.at(0));
  if (!a || !b) return unsafeSeen(in, "has unrecorded shapes");
  auto mapped = mapFactoredConstantThroughView(*a, *b, {in.axes, in.factor});
  std::vector<std::pair<ValueId, AxisFactor>> factors;
  if (mapped.factor) factors.emplace_back(n.outputs.at(0), *mapped.factor);
  return ShiftOutcome::passed({{n.outputs.at(0), mapped.axes}}, factors);
}

/// Output axis -> input axis for permute/transpose/t; nullopt when the dims are not constant.

std::optional<std::vector<int64_t>> permutation(const Graph& g, const Node& n) {
  auto rank = rankOf(g, n.inputs.at(0));
  if (rank < 0 || rank != rankOf(g, n.outputs.at(0))) return std::nullopt;
  std::vector<int64_t> perm(rank);
  for (int64_t i = 0; i < rank; ++i) perm[i] = i;
  if (n.kind == "aten::permute") {
    auto dims = g.constantIntList(n.inputs.at(1));
    if (!dims || int64_t(dims->size()) != rank) return std::nullopt;
    std::vector<bool> seen(rank, false);
    for (int64_t i = 0; i < rank; ++i) {
      int64_t d = dims->at(i) < 0 ? dims->at(i) + rank : dims->at(i);
      if (d < 0 || d >= rank || seen[d]) return std::nullopt;  // not a permutation of the axes
      seen[d] = true;
      perm[i] = d;
    }
  } else if (n.kind == "aten::t" || n.kind == "aten::numpy_T") {
    std::reverse(perm.begin(), perm.end());
  } else {
    auto d0 = dimArg(g, n.inputs.at(1), rank), d1 = dimArg(g, n.inputs.at(2), rank);
    if (!d0 || !d1) return std::nullopt;
    std::swap(perm[*d0], perm[*d1]);
  }
  return perm;
}

AxisSet permuteAxes(const std::vector<int64_t>& perm, AxisSet axes) {
  AxisSet out;
  for (std::size_t i = 0; i < perm.size(); ++i)
    if (axes.contains(perm[i])) out.insert(int64_t(i));
  return out;
}

/// A factor moves with its axis: the digit stays the same digit of the same index.
std::optional<AxisFactor> permuteFactor(const std::vector<int64_t>& perm, std::optional<AxisFactor> f) {
  if (!f) return std::nullopt;
  for (std::size_t i = 0; i < perm.size(); ++i)
    if (perm[i] == f->axis) return AxisFactor{int64_t(i), f->size, f->stride};
  return std::nullopt;
}

void permuteMz(MeanZeroContext& ctx) {
  const auto& f = ctx.inputFact(0);
  if (!f.isMeanZero()) { ctx.propagateBroken(0); return; }
  auto perm = permutation(ctx.graph(), ctx.node());
  if (!perm) { ctx.breakHere("its dims are not constants"); return; }
  ctx.set(0, MeanZeroFact::meanZero(permuteAxes(*perm, f.axes), permuteFactor(*perm, f.factor), f.leaves,
                                    ctx.rule()));
}

ShiftOutcome permuteShift(const ShiftInput& in) {
  if (in.slot != 0) return ShiftOutcome::ignored();
  auto perm = permutation(in.graph, in.graph.node(in.node));
  if (!perm) return unsafeSeen(in, "has non-constant dims");
  auto out = in.graph.node(in.node).outputs.at(0);
  std::vector<std::pair<ValueId, AxisFactor>> factors;
  if (auto f = permuteFactor(*perm, in.factor)) factors.emplace_back(out, *f);
  return ShiftOutcome::passed({{out, permuteAxes(*perm, in.axes)}}, factors);
}


void expandMz(MeanZeroContext& ctx) {
  const auto& g = ctx.graph();
  const auto& n = ctx.node();
  const auto& f = ctx.inputFact(0);
  if (!f.isMeanZero()) { ctx.propagateBroken(0); return; }
  auto axes = alignAxes(f.axes, rankOf(g, n.inputs.at(0)), rankOf(g, n.outputs.at(0)));
  ctx.set(0, MeanZeroFact::meanZero(axes, f.leaves, ctx.rule()));
}

ShiftOutcome expandShift(const ShiftInput& in) {
  if (in.slot != 0) return ShiftOutcome::ignored();
  const auto& g = in.graph;
  const auto& n = g.node(in.node);
  auto ri = rankOf(g, n.inputs.at(0)), ro = rankOf(g, n.outputs.at(0));
  auto axes = alignAxes(in.axes, ri, ro);
  const auto* si = shapeOf(g, n.inputs.at(0));
  const auto* so = shapeOf(g, n.outputs.at(0));
  if (si && so && n.kind != "aten::repeat" && ri <= ro) {
    for (int64_t a = 0; a < ro; ++a) {
      int64_t ia = a - (ro - ri);
      if (ia < 0 || (si->at(ia) == 1 && so->at(a) != 1)) axes.insert(a);
    }
  }
  return ShiftOutcome::passed({{n.outputs.at(0), axes}});
}

/// Removes axis `dim`, shifting later axes down.

bool removesDim(const std::string& kind) { return kind == "aten::select" || kind == "aten::unbind"; }

void sliceMz(MeanZeroContext& ctx) {
  const auto& g = ctx.graph();
  const auto& n = ctx.node();
  const auto& f = ctx.inputFact(0);
  if (!f.isMeanZero()) { ctx.propagateBroken(0); return; }
  auto rank = rankOf(g, n.inputs.at(0));
  auto dim = n.inputs.size() > 1 ? dimArg(g, n.inputs.at(1), rank) : std::optional<int64_t>(0);
  if (n.kind == "aten::chunk" || n.kind == "aten::unsafe_chunk" || n.kind == "aten::split" ||
      n.kind == "aten::split_with_sizes" || n.kind == "aten::unsafe_split" ||
      n.kind == "aten::tensor_split")
    dim = n.inputs.size() > 2 ? dimArg(g, n.inputs.at(2), rank) : std::optional<int64_t>(0);
  if (!dim) { ctx.breakHere("its dim is not a constant"); return; }
  // x[..., :] traces as a slice over the whole dim: same shape in and out, nothing taken away.
  bool wholeSlice = (n.kind == "aten::slice" || n.kind == "aten::narrow") && shapeOf(g, n.inputs.at(0)) &&
                    shapeOf(g, n.outputs.at(0)) && *shapeOf(g, n.inputs.at(0)) == *shapeOf(g, n.outputs.at(0));
  if (f.axes.contains(*dim) && !wholeSlice) {
    ctx.breakHere("takes a part along the mean-zero axis " + std::to_string(*dim) +
                  "; a part of a mean-zero row is not mean-zero");
    return;
  }
  auto axes = removesDim(n.kind) ? dropAxis(f.axes, *dim) : f.axes;
  ctx.setAll(MeanZeroFact::meanZero(axes, f.leaves, ctx.rule()));
}

ShiftOutcome sliceShift(const ShiftInput& in) {
  if (in.slot != 0) return ShiftOutcome::ignored();  // indices only select positions
  const auto& g = in.graph;
  const auto& n = g.node(in.node);
  auto axes = in.axes;
  if (removesDim(n.kind)) {
    auto dim = dimArg(g, n.inputs.at(1), rankOf(g, n.inputs.at(0)));
    if (!dim) return unsafeSeen(in, "has a non-constant dim");
    axes = dropAxis(axes, *dim);
  }
  std::vector<std::pair<ValueId, AxisSet>> outs;
  for (auto o : n.outputs) outs.emplace_back(o, axes);
  return ShiftOutcome::passed(outs);
}

/// gather(x, dim, index) / take_along_dim(x, index, dim): out[p] = x[p with p_dim := index[p]].
/// The index (slot) and dim of the node; nullopt for take_along_dim without a dim (flattened).
struct Gather {
  ValueId index = kNone;
  int64_t dim = 0;
};

std::optional<Gather> gatherOf(const Graph& g, const Node& n) {
  bool take = n.kind == "aten::take_along_dim";
  if (n.inputs.size() < 3) return std::nullopt;
  auto dim = dimArg(g, n.inputs.at(take ? 2 : 1), rankOf(g, n.inputs.at(0)));
  if (!dim || rankOf(g, n.inputs.at(0)) != rankOf(g, n.outputs.at(0))) return std::nullopt;
  return Gather{n.inputs.at(take ? 1 : 2), *dim};
}

/// The index takes the same value all along `axis` (of the output's rank): a size-1 axis
/// (broadcast by take_along_dim), or an expand or a repeat of a tensor of size 1 there (a repeat
/// tiles its input, so along an axis where the input has one entry it copies that entry:
/// ViT-MAE's `ids.unsqueeze(-1).repeat(1, 1, dim)`).
bool indexConstantAlong(const Graph& g, ValueId index, int64_t axis, int64_t rank) {
  const auto* shape = shapeOf(g, index);
  if (!shape || int64_t(shape->size()) != rank) return false;
  if (shape->at(axis) == 1) return true;
  auto p = g.value(index).producer;
  if (p == kNone) return false;
  const auto& e = g.node(p);
  if (e.kind != "aten::expand" && e.kind != "aten::expand_as" && e.kind != "aten::broadcast_to" &&
      e.kind != "aten::repeat")
    return false;
  const auto* src = shapeOf(g, e.inputs.at(0));
  if (!src || int64_t(src->size()) > rank) return false;
  int64_t at = axis - (rank - int64_t(src->size()));
  return at < 0 || src->at(at) == 1;
}

void gatherMz(MeanZeroContext& ctx) {
  const auto& g = ctx.graph();
  const auto& n = ctx.node();
  const auto& f = ctx.inputFact(0);
  if (!f.isMeanZero()) { ctx.propagateBroken(0); return; }
  auto gather = gatherOf(g, n);
  const auto* in = shapeOf(g, n.inputs.at(0));
  const auto* out = shapeOf(g, n.outputs.at(0));
  if (!gather || !in || !out) { ctx.breakHere("its dim is not a constant or its shapes were not recorded"); return; }
  if (f.axes.contains(gather->dim)) {
    ctx.breakHere("gathers along the mean-zero axis " + std::to_string(gather->dim) + ": picked entries of a mean-zero row need not sum to zero");
    return;
  }
  // Along another axis a, a row of the output is a row of x only when the index is the same
  // all along a (else each position reads another row) and spans the whole axis.
  for (auto a : f.axes.axes())
    if (a >= int64_t(out->size()) || out->at(a) != in->at(a) || !indexConstantAlong(g, gather->index, a, int64_t(out->size()))) {
      ctx.breakHere("its index varies along (or does not span) the mean-zero axis " + std::to_string(a) +
                    ", so an output row mixes rows of the input");
      return;
    }
  ctx.set(0, MeanZeroFact::meanZero(f.axes, f.leaves, ctx.rule()));
}

ShiftOutcome gatherShift(const ShiftInput& in) {
  const auto& g = in.graph;
  const auto& n = g.node(in.node);
  if (in.slot != 0) return unsafeSeen(in, "uses the changed value as an index or a dim");
  auto gather = gatherOf(g, n);
  auto rank = rankOf(g, n.outputs.at(0));
  if (!gather) return unsafeSeen(in, "has a non-constant dim or unrecorded ranks");
  // Moving along a changes the read position along a and, through the index, along dim.
  bool alongDim = in.axes.contains(gather->dim);
  AxisSet axes;
  for (int64_t a = 0; a < rank; ++a) {
    bool indexSteady = alongDim || indexConstantAlong(g, gather->index, a, rank);
    if (indexSteady && (a == gather->dim || in.axes.contains(a))) axes.insert(a);
  }
  return ShiftOutcome::passed({{n.outputs.at(0), axes}});
}

/// Dims indexed by aten::index's list of optional index tensors; nullopt if not readable.

std::optional<int64_t> lastIndexedDim(const Graph& g, const Node& n) {
  auto list = g.value(n.inputs.at(1)).producer;
  if (list == kNone || g.node(list).kind != "prim::ListConstruct") return std::nullopt;
  int64_t last = -1;
  const auto& items = g.node(list).inputs;
  for (std::size_t i = 0; i < items.size(); ++i)
    if (!g.isNoneValue(items.at(i))) last = int64_t(i);
  return last;
}

void indexMz(MeanZeroContext& ctx) {
  const auto& g = ctx.graph();
  const auto& n = ctx.node();
  const auto& f = ctx.inputFact(0);
  if (!f.isMeanZero()) { ctx.propagateBroken(0); return; }
  auto last = lastIndexedDim(g, n);
  if (!last) { ctx.breakHere("its index list is not readable"); return; }
  auto ri = rankOf(g, n.inputs.at(0)), ro = rankOf(g, n.outputs.at(0));
  if (ri < 0 || ro < 0) { ctx.breakHere("shapes were not recorded"); return; }
  AxisSet out;
  for (auto a : f.axes.axes()) {
    if (a <= *last) { ctx.breakHere("indexes along the mean-zero axis " + std::to_string(a)); return; }
    out.insert(a + (ro - ri));
  }
  ctx.set(0, MeanZeroFact::meanZero(out, f.leaves, ctx.rule()));
}

ShiftOutcome indexShift(const ShiftInput& in) {
  if (in.slot != 0) return ShiftOutcome::ignored();
  const auto& g = in.graph;
  const auto& n = g.node(in.node);
  auto last = lastIndexedDim(g, n);
  if (!last) return unsafeSeen(in, "has an unreadable index list");
  auto ri = rankOf(g, n.inputs.at(0)), ro = rankOf(g, n.outputs.at(0));
  AxisSet out;
  for (auto a : in.axes.axes())
    if (a > *last) out.insert(a + (ro - ri));
  return ShiftOutcome::passed({{n.outputs.at(0), out}});
}


bool isShiftCarrier(const Graph& g, ValueId v) {
  auto k = g.value(v).kind;
  return k == ValueKind::Tensor || k == ValueKind::TensorList || k == ValueKind::Tuple;
}

/// For an op that takes a tuple or list apart (TupleUnpack, ListUnpack, or TupleIndex /
/// __getitem__ with a constant index) whose bundle is built by a Tuple/ListConstruct in the
/// graph: the construct's input each output is, in output order. nullopt when the bundle comes
/// from elsewhere or the index is not a constant in range.
std::optional<std::vector<ValueId>> bundleElements(const Graph& g, const Node& n) {
  if (n.inputs.empty()) return std::nullopt;
  auto producer = g.value(n.inputs.at(0)).producer;
  if (producer == kNone) return std::nullopt;
  const auto& c = g.node(producer);
  bool tuple = c.kind == "prim::TupleConstruct", list = c.kind == "prim::ListConstruct";
  // A list taken apart must not be written in between: only lists with no in-place user.
  if (list)
    for (const auto& use : g.value(n.inputs.at(0)).uses) {
      const auto& k = g.node(use.node).kind;
      if (k == "aten::append" || k == "aten::_set_item" || k == "aten::insert" || k == "aten::extend")
        return std::nullopt;
    }
  if ((n.kind == "prim::TupleUnpack" && tuple) || (n.kind == "prim::ListUnpack" && list)) {
    if (c.inputs.size() != n.outputs.size()) return std::nullopt;
    return c.inputs;
  }
  if ((n.kind == "prim::TupleIndex" && tuple) || (n.kind == "aten::__getitem__" && list)) {
    if (n.inputs.size() < 2) return std::nullopt;
    auto idx = g.constantInt(n.inputs.at(1));
    auto size = int64_t(c.inputs.size());
    if (!idx || *idx < -size || *idx >= size) return std::nullopt;
    return std::vector<ValueId>{c.inputs.at(*idx < 0 ? *idx + size : *idx)};
  }
  return std::nullopt;
}

void listMz(MeanZeroContext& ctx) {
  const auto& g = ctx.graph();
  const auto& n = ctx.node();
  if (n.kind == "prim::ListConstruct") {
    if (g.value(n.outputs.at(0)).kind != ValueKind::TensorList || n.inputs.empty()) return;
    // A list is as mean-zero as all its elements (same rank): cat/stack read the elements.
    MeanZeroFact acc = ctx.inputFact(0);
    if (!acc.isMeanZero()) { ctx.propagateBroken(0); return; }
    for (std::size_t i = 1; i < n.inputs.size(); ++i) {
      const auto& f = ctx.inputFact(i);
      if (!f.isMeanZero()) { ctx.propagateBroken(i); return; }
      acc = MeanZeroFact::join(acc, f);
    }
    acc.rule = ctx.rule();
    ctx.set(0, acc);
    return;
  }
  // An element taken from a tuple or list built in the graph is that element, not the bundle:
  // `x, (H, W)` unpacked gives x the facts of x, and H those of a shape.
  if (auto from = bundleElements(g, n)) {
    for (std::size_t i = 0; i < n.outputs.size() && i < from->size(); ++i) {
      const auto& f = ctx.fact(from->at(i));
      if (f.isMeanZero()) ctx.set(i, MeanZeroFact::meanZero(f.axes, f.leaves, ctx.rule()));
      else if (f.state == Kind::Broken) ctx.set(i, MeanZeroFact::propagated(f, from->at(i), ctx.rule()));
      else ctx.set(i, MeanZeroFact::broken(ctx.nodeId(), "a tuple or list element without a mean-zero fact", ctx.rule()));
    }
    return;
  }
  // Otherwise (a bundle from a call or a model input): every element carries the bundle's fact.
  const auto& f = ctx.inputFact(0);
  if (f.isMeanZero()) ctx.setAll(MeanZeroFact::meanZero(f.axes, f.leaves, ctx.rule()));
  else if (f.state == Kind::Broken) ctx.propagateBroken(0);
  else ctx.breakHere("a tuple or list element without a mean-zero fact");
}

ShiftOutcome listShift(const ShiftInput& in) {
  const auto& g = in.graph;
  const auto& n = g.node(in.node);
  if (n.kind != "prim::TupleConstruct" && n.kind != "prim::ListConstruct") return passSame(in);
  // Element `slot` of a bundle built here: where the bundle is taken apart in the graph, only
  // the element at that index is shifted; any other use (a call, cat, the return) gets the
  // bundle itself, which carries the shift to everything taken from it.
  std::vector<std::pair<ValueId, AxisSet>> outs;
  auto bundle = n.outputs.at(0);
  bool whole = false;
  for (const auto& use : g.value(bundle).uses) {
    auto elements = bundleElements(g, g.node(use.node));
    if (!elements || use.slot != 0) { whole = true; continue; }
    const auto& taker = g.node(use.node);
    for (std::size_t i = 0; i < elements->size() && i < taker.outputs.size(); ++i)
      if (elements->at(i) == n.inputs.at(in.slot) && isShiftCarrier(g, taker.outputs[i]))
        outs.emplace_back(taker.outputs[i], in.axes);
  }
  if (whole) outs.emplace_back(bundle, in.axes);
  return ShiftOutcome::passed(outs);
}


bool isStack(const std::string& kind) { return kind == "aten::stack"; }

void catMz(MeanZeroContext& ctx) {
  const auto& g = ctx.graph();
  const auto& n = ctx.node();
  auto list = g.value(n.inputs.at(0)).producer;
  if (list == kNone || g.node(list).kind != "prim::ListConstruct") {
    ctx.breakHere("its tensor list is not built in the graph");
    return;
  }
  const auto& parts = g.node(list).inputs;
  auto outRank = rankOf(g, n.outputs.at(0));
  auto dim = dimArg(g, n.inputs.at(1), outRank);
  if (!dim) { ctx.breakHere("its dim is not a constant"); return; }
  MeanZeroFact joined;  // Unknown: the identity of the join
  for (auto p : parts) {
    const auto& f = ctx.fact(p);
    if (!f.isMeanZero()) {
      ctx.setAll(MeanZeroFact::propagated(f, p, ctx.rule()));
      if (f.state != Kind::Broken) ctx.breakHere("a part has no mean-zero fact");
      return;
    }
    // Each part mean-zero on its own: along the cat axis too, the concatenation's row sums to zero.
    auto part = MeanZeroFact::meanZero(isStack(n.kind) ? insertAxis(f.axes, *dim) : f.axes, f.leaves, ctx.rule());
    joined = MeanZeroFact::join(joined, part);
  }
  joined.rule = ctx.rule();
  ctx.set(0, joined);
}

ShiftOutcome catShift(const ShiftInput& in) {
  if (in.slot != 0) return ShiftOutcome::ignored();
  const auto& g = in.graph;
  const auto& n = g.node(in.node);
  auto list = g.value(n.inputs.at(0)).producer;
  std::size_t parts = list == kNone ? 2 : g.node(list).inputs.size();
  auto outRank = rankOf(g, n.outputs.at(0));
  auto dim = dimArg(g, n.inputs.at(1), outRank);
  if (!dim) return unsafeSeen(in, "has a non-constant dim");
  auto axes = isStack(n.kind) ? insertAxis(in.axes, *dim) : in.axes;
  // Parts shifted by different amounts (or not at all) make the shift vary along the cat axis.
  if (parts > 1) axes.erase(*dim);
  return ShiftOutcome::passed({{n.outputs.at(0), axes}});
}

/// Dims padded by aten::pad/constant_pad_nd (pairs from the last dim backwards).

AxisSet paddedDims(const Graph& g, const Node& n) {
  AxisSet out;
  auto pad = g.constantIntList(n.inputs.at(1));
  auto rank = rankOf(g, n.inputs.at(0));
  if (!pad) return AxisSet::trailing(rank, rank);
  for (std::size_t i = 0; i + 1 < pad->size(); i += 2)
    if (pad->at(i) != 0 || pad->at(i + 1) != 0) {
      // More pad pairs than dims (or an unknown rank): treat every dim as padded.
      if (rank - 1 - int64_t(i / 2) < 0) return AxisSet::trailing(rank, rank);
      out.insert(rank - 1 - int64_t(i / 2));
    }
  return out;
}

std::string padMode(const Graph& g, const Node& n) {
  if (n.kind == "aten::_pad_enum") {
    // What F::pad becomes in LibTorch's C++ API: the mode is at::padding_mode as an int
    // (reflect, replicate, circular, constant).
    auto m = n.inputs.size() > 2 ? g.constantInt(n.inputs.at(2)) : std::nullopt;
    if (!m) return "unknown";
    static const char* kModes[] = {"reflect", "replicate", "circular", "constant"};
    return *m >= 0 && *m < 4 ? kModes[*m] : "unknown";
  }
  if (n.kind == "aten::pad" && n.inputs.size() > 2) {
    if (const auto& c = g.value(n.inputs.at(2)).constant)
      if (auto* s = std::get_if<std::string>(&*c)) return *s;
  }
  if (n.kind == "aten::reflection_pad1d" || n.kind == "aten::reflection_pad2d") return "reflect";
  if (n.kind == "aten::replication_pad1d" || n.kind == "aten::replication_pad2d") return "replicate";
  return "constant";
}

void padMz(MeanZeroContext& ctx) {
  const auto& g = ctx.graph();
  const auto& n = ctx.node();
  const auto& f = ctx.inputFact(0);
  if (!f.isMeanZero()) { ctx.propagateBroken(0); return; }
  auto mode = padMode(g, n);
  if (mode == "constant") {
    std::size_t valueSlot = n.kind == "aten::pad" || n.kind == "aten::_pad_enum" ? 3 : 2;
    double value = 0;
    if (n.inputs.size() > valueSlot && !g.isNoneValue(n.inputs.at(valueSlot)))
      value = g.constantDouble(n.inputs.at(valueSlot)).value_or(1.0);
    if (value != 0) { ctx.breakHere("pads with a non-zero constant"); return; }
    // Zeros added along any axis keep every row's sum at zero.
    ctx.set(0, MeanZeroFact::meanZero(f.axes, f.leaves, ctx.rule()));
    return;
  }
  if (!(paddedDims(g, n) & f.axes).empty()) {
    ctx.breakHere(mode + " padding along the mean-zero axes copies values into the row");
    return;
  }
  ctx.set(0, MeanZeroFact::meanZero(f.axes, f.leaves, ctx.rule()));
}

ShiftOutcome padShift(const ShiftInput& in) {
  if (in.slot != 0) return ShiftOutcome::ignored();
  const auto& g = in.graph;
  const auto& n = g.node(in.node);
  auto axes = in.axes;
  if (padMode(g, n) == "constant")
    for (auto a : paddedDims(g, n).axes()) axes.erase(a);
  return ShiftOutcome::passed({{n.outputs.at(0), axes}});
}


void rollMz(MeanZeroContext& ctx) {
  const auto& f = ctx.inputFact(0);
  if (!f.isMeanZero()) { ctx.propagateBroken(0); return; }
  ctx.set(0, MeanZeroFact::meanZero(f.axes, f.leaves, ctx.rule()));
}

/// Reduced dims of mean/sum, or nullopt for "all dims" / unreadable.

}  // namespace

void addAxisRules(std::vector<Rule>& rules) {
  FamilyTable t(rules, RuleFamily::Axis);
  // view/reshape/flatten/squeeze/... (shapes from the recording run).
  //   mean-zero: along the union of the output groups (of equal element count) that hold a
  //              mean-zero input axis; a reshape that drops them, or unrecorded shapes, break.
  //              Exact instead when the mean-zero part is one block of the row-major index (a
  //              run of whole axes or a factor, facts.h): whole output axes, or a factor of one
  //              output axis when it was merged with others (MobileViT's unfold).
  //   shift:     constant along the output groups made only of constant input axes, and along
  //              every output axis (or factor of one) inside a constant block.
  t.add("view",
        {"aten::view", "aten::reshape", "aten::_unsafe_view", "aten::flatten", "aten::unflatten",
         "aten::squeeze", "aten::unsqueeze", "aten::view_as", "aten::reshape_as",
         "aten::_reshape_alias", "aten::squeeze_", "aten::unsqueeze_"},
        "a reshape regroups dims: mean-zero along some dims of a group of equal element count "
        "implies mean-zero along the whole group on the other side (shapes from the recording run)",
        viewMz, viewShift);
  // permute/transpose/t/swapaxes.
  //   mean-zero: the axes (and a factor with its axis) permuted; non-constant dims break.
  //   shift:     the axes (and a factor with its axis) permuted; non-constant dims see it.
  t.add("permute", {"aten::permute", "aten::transpose", "aten::t", "aten::numpy_T", "aten::swapaxes"},
        "permutes and transposes move the mean-zero axes with them", permuteMz, permuteShift);
  // expand/expand_as/broadcast_to/repeat.
  //   mean-zero: the input's axes, right-aligned into the output rank (whole rows are copied).
  //   shift:     constant also along the axes the input is broadcast over (not for repeat).
  t.add("expand", {"aten::expand", "aten::expand_as", "aten::broadcast_to", "aten::repeat"},
        "broadcasting or repeating copies whole rows, which stay mean-zero", expandMz, expandShift);
  // slice/narrow/select/index_select/split/chunk/unbind along a dim.
  //   mean-zero: kept when the dim is not a mean-zero axis (select/unbind drop the dim) or the
  //              slice takes the whole dim; a part along a mean-zero axis breaks.
  //   shift:     passes to every output (select/unbind drop the dim); index inputs ignored.
  t.add("slice",
        {"aten::slice", "aten::narrow", "aten::select", "aten::index_select", "aten::split",
         "aten::split_with_sizes", "aten::chunk", "aten::unsafe_chunk", "aten::unsafe_split",
         "aten::tensor_split", "aten::unbind"},
        "taking parts along another axis keeps whole rows; a part along a mean-zero axis is not "
        "mean-zero", sliceMz, sliceShift);
  // gather(x, dim, index), take_along_dim(x, index, dim) (a relative-position or bias table
  // read per position; the table itself is a parameter leaf).
  //   mean-zero: kept along the mean-zero axes when none is dim, the output spans each of them
  //              and the index is constant along each (a size-1 or expanded axis); else breaks.
  //   shift:     constant along dim when the index is constant along it or the shift is; along
  //              another axis when the shift is and the index is constant along it (or the
  //              shift along dim). A shift into the index is seen.
  t.add("gather", {"aten::gather", "aten::take_along_dim"},
        "gathering along another axis with an index constant along the mean-zero axes reads whole "
        "rows (a table centered along them stays centered); gathering along them breaks",
        gatherMz, gatherShift);
  // index(x, [i0, i1, ...]) (advanced indexing).
  //   mean-zero: kept when every indexed dim precedes the mean-zero axes (axes move by the rank
  //              change); indexing along them breaks.
  //   shift:     constant along the axes after the last indexed dim.
  t.add("index", {"aten::index"},
        "advanced indexing on leading axes (before the mean-zero axes) keeps whole rows", indexMz, indexShift);
  // Lists and tuples.
  //   mean-zero: ListConstruct of tensors: the join of its elements' facts; unpack/index of a
  //              bundle built in the graph: the fact of the element at that index; of any
  //              other bundle: every element carries the bundle's fact.
  //   shift:     an element of a bundle built here shifts only what is taken out at its index
  //              (the bundle itself where it is used otherwise); unpack passes to every element.
  t.add("list",
        {"prim::ListConstruct", "prim::ListUnpack", "aten::__getitem__", "prim::TupleConstruct",
         "prim::TupleUnpack", "prim::TupleIndex"},
        "lists and tuples carry their elements' facts; an element taken out of a bundle built in the graph is the element at that index, not its neighbours", listMz, listShift);
  // cat/stack(parts, dim).
  //   mean-zero: every part mean-zero -> the union of their axes (stack inserts the dim): along
  //              the cat axis too, each part's row sums to zero.
  //   shift:     constant along the shift's axes except the cat axis (parts shift differently).
  t.add("cat", {"aten::cat", "aten::concat", "aten::concatenate", "aten::stack"},
        "concatenating parts that are each mean-zero is mean-zero, along other axes and along the "
        "mean-zero axis itself (each part's row sums to zero); parts shifted by different amounts "
        "are not shift-constant along the cat axis", catMz, catShift);
  // pad/constant_pad_nd/reflection/replication padding.
  //   mean-zero: zero padding keeps the fact along any axis (zeros add nothing to a row sum);
  //              a non-zero value, or reflect/replicate along a mean-zero axis, breaks.
  //   shift:     constant padding makes the padded dims non-constant; other modes pass.
  t.add("pad",
        {"aten::pad", "aten::_pad_enum", "aten::constant_pad_nd", "aten::reflection_pad1d",
         "aten::reflection_pad2d", "aten::replication_pad1d", "aten::replication_pad2d"},
        "zero padding adds zeros, which keep every row sum at zero; reflect/replicate padding is "
        "fine along other axes only", padMz, padShift);
  // roll/flip.
  //   mean-zero: input 0's fact (elements permuted within rows).
  //   shift:     passes unchanged.
  t.add("roll-flip", {"aten::roll", "aten::flip", "aten::fliplr", "aten::flipud"},
        "rolling or flipping permutes elements within rows, so the row mean is unchanged", rollMz, identityShift);
}

}  // namespace foldnorm::rules
