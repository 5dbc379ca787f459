// The rule table. Each rule: name, family, ops, one-line rationale, and its two transfer
// functions (mean-zero facts forward; what a constant shift on one input does).
// Argument positions follow the aten schemas (e.g. aten::linear(input, weight, bias?)).
#include <algorithm>
#include <map>
#include <sstream>

#include "foldnorm/analysis/rules.h"

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

LeafId MeanZeroContext::addLeaf(Leaf leaf) {
  leaf.id = leaves_.size();
  leaf.node = leaf.node == kNone ? node_ : leaf.node;
  leaf.rule = rule_;
  leaves_.push_back(std::move(leaf));
  return leaves_.back().id;
}

namespace {

using Kind = MeanZeroFact::State;

bool isTensor(const Graph& g, ValueId v) { return g.value(v).kind == ValueKind::Tensor; }

std::string op(const Graph& g, NodeId n) { return g.node(n).kind; }

/// Union of two facts' leaves.
std::vector<LeafId> unite(const std::vector<LeafId>& a, const std::vector<LeafId>& b) {
  std::vector<LeafId> out = a;
  out.insert(out.end(), b.begin(), b.end());
  return out;
}

/// A weight operand traced back to its parameter through layout-only ops.
struct ParamOperand {
  ParamId param = kNone;
  int64_t paramAxis = 0;       // the parameter axis that becomes the operand's axis `axis`
  std::vector<NodeId> chain;   // from the op back towards the parameter read
  ValueId read = kNone;        // the value reading the parameter
};

/// Follows `value` back through t/transpose/permute/contiguous/detach/float casts to a parameter
/// read, mapping operand axis `axis` to the parameter's axis. Intermediates must have one use
/// (otherwise the parameter feeds something else too and is not a plain weight).
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
    auto rank = rankOf(g, n.inputs.empty() ? v : n.inputs[0]);
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
      auto d = (*dims)[axis];
      axis = d < 0 ? d + rank : d;
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

/// A bias operand: absent (None), or a parameter centered along its last axis.
/// Returns false when the bias is computed (the output cannot be centered then).
bool biasAction(const Graph& g, ValueId bias, std::vector<CenterAction>& actions, int64_t groups = 1) {
  if (g.isNoneValue(bias)) return true;
  auto r = rankOf(g, bias);
  auto p = paramOperand(g, bias, r > 0 ? r - 1 : 0);
  if (!p) return false;
  if (r == 0) return false;
  actions.push_back({p->param, p->paramAxis, groups});
  return true;
}

/// Emits a weight leaf (linear-like) or breaks with the reason.
void weightLeaf(MeanZeroContext& ctx, LeafKind kind, ValueId weight, int64_t weightAxis,
                std::optional<ValueId> bias, int64_t outAxis, int64_t groups = 1) {
  const auto& g = ctx.graph();
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

bool producedBy(const Graph& g, ValueId v, const char* kind) {
  auto p = g.value(v).producer;
  return p != kNone && g.node(p).kind == kind;
}

/// Is `other` (an operand broadcast into `outRank`) constant along every axis of `axes`?
bool constantAlong(const Graph& g, ValueId other, AxisSet axes, int64_t outRank) {
  if (!isTensor(g, other)) return true;  // a Python scalar
  const auto* shape = shapeOf(g, other);
  if (!shape) return false;
  int64_t r = int64_t(shape->size());
  for (auto a : axes.axes()) {
    int64_t oa = a - (outRank - r);
    if (oa >= 0 && (*shape)[oa] != 1) return false;
  }
  return true;
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

// ---------------------------------------------------------------------------------------------
// Rule bodies
// ---------------------------------------------------------------------------------------------

void linearMz(MeanZeroContext& ctx) {
  const auto& n = ctx.node();
  auto r = rankOf(ctx.graph(), n.outputs[0]);
  std::optional<ValueId> bias;
  if (n.inputs.size() > 2) bias = n.inputs[2];
  weightLeaf(ctx, LeafKind::Linear, n.inputs.at(1), 0, bias, r - 1);
}

void addmmMz(MeanZeroContext& ctx) {
  const auto& n = ctx.node();
  const auto& g = ctx.graph();
  auto bias = n.inputs.at(0);
  if (!isTensor(g, bias)) { ctx.breakHere("addmm without a tensor bias"); return; }
  weightLeaf(ctx, LeafKind::Addmm, n.inputs.at(2), 1, bias, 1);
}

bool isParamOperand(const Graph& g, ValueId v) {
  auto r = rankOf(g, v);
  return r >= 1 && paramOperand(g, v, r - 1).has_value();
}

void matmulParamMz(MeanZeroContext& ctx) {
  const auto& n = ctx.node();
  const auto& g = ctx.graph();
  auto out = rankOf(g, n.outputs[0]);
  auto rb = rankOf(g, n.inputs[1]);
  if (isParamOperand(g, n.inputs[1])) {
    weightLeaf(ctx, LeafKind::Matmul, n.inputs[1], rb - 1, std::nullopt, out - 1);
  } else {
    auto ra = rankOf(g, n.inputs[0]);
    if (ra < 2 || out < 2) { ctx.breakHere("a vector-matrix product cannot be centered"); return; }
    weightLeaf(ctx, LeafKind::Matmul, n.inputs[0], ra - 2, std::nullopt, out - 2);
  }
}

void convMz(MeanZeroContext& ctx) {
  const auto& n = ctx.node();
  const auto& g = ctx.graph();
  bool transposed = false;
  std::optional<int64_t> groups;
  if (n.kind == "aten::_convolution" || n.kind == "aten::convolution") {
    transposed = g.constantBool(n.inputs.at(6)).value_or(false);
    groups = g.constantInt(n.inputs.at(8));
  } else if (n.kind.rfind("aten::conv_transpose", 0) == 0) {
    transposed = true;
    groups = n.inputs.size() > 6 ? g.constantInt(n.inputs.at(6)) : std::optional<int64_t>(1);
  } else {
    groups = n.inputs.size() > 6 ? g.constantInt(n.inputs.at(6)) : std::optional<int64_t>(1);
  }
  if (!groups || *groups < 1) { ctx.breakHere("its groups argument is not a constant"); return; }
  const auto* w = shapeOf(g, n.inputs.at(1));
  if (!w || w->size() < 2) { ctx.breakHere("its weight shape is unknown"); return; }
  int64_t outPerGroup = transposed ? (*w)[1] : (*w)[0] / *groups;
  if (outPerGroup <= 1) {
    ctx.breakHere("depthwise convolution (one output channel per group): centering within a "
                  "group of one channel would zero it, so it is not a general linear leaf");
    return;
  }
  // Transposed weights are [in, out/groups, k...]: centering along axis 1 is per group already.
  weightLeaf(ctx, LeafKind::Convolution, n.inputs.at(1), transposed ? 1 : 0, n.inputs.at(2), 1,
             transposed ? 1 : *groups);
}

void embeddingMz(MeanZeroContext& ctx) {
  const auto& n = ctx.node();
  auto r = rankOf(ctx.graph(), n.outputs[0]);
  weightLeaf(ctx, LeafKind::Embedding, n.inputs.at(0), 1, std::nullopt, r - 1);
}

void parameterMz(MeanZeroContext& ctx) {
  const auto& g = ctx.graph();
  const auto& n = ctx.node();
  if (n.outputs.size() != 1) return;
  const auto& v = g.value(n.outputs[0]);
  if (v.kind != ValueKind::Tensor) return;  // modules, ints, lists: not tensors
  if (v.param == kNone) {
    ctx.breakHere("a constant that is not a tensor parameter");
    return;
  }
  const auto* shape = shapeOf(g, v.id);
  if (!shape) shape = &g.parameter(v.param).shape;
  int64_t axis = -1;
  for (int64_t a = int64_t(shape->size()) - 1; a >= 0; --a)
    if ((*shape)[a] > 1) { axis = a; break; }
  if (axis < 0) {
    ctx.breakHere("a parameter of a single element per row cannot be centered");
    return;
  }
  Leaf leaf;
  leaf.kind = LeafKind::Parameter;
  leaf.output = v.id;
  leaf.axes = AxisSet::of({axis});
  leaf.actions.push_back({v.param, axis, 1});
  auto id = ctx.addLeaf(std::move(leaf));
  ctx.set(0, MeanZeroFact::meanZero(AxisSet::of({axis}), {id}, ctx.rule()));
}

bool isMeanSubtraction(const Graph& g, NodeId id) {
  const auto& n = g.node(id);
  if (n.inputs.size() < 2 || !isTensor(g, n.inputs[1])) return false;
  auto m = g.value(n.inputs[1]).producer;
  if (m == kNone || g.node(m).kind != "aten::mean") return false;
  const auto& mean = g.node(m);
  if (mean.inputs.size() < 3 || mean.inputs[0] != n.inputs[0]) return false;
  if (!g.constantBool(mean.inputs[2]).value_or(false)) return false;
  if (n.inputs.size() > 2 && g.constantDouble(n.inputs[2]).value_or(0) != 1.0) return false;
  return g.constantIntList(mean.inputs[1]).has_value();
}

void meanSubtractionMz(MeanZeroContext& ctx) {
  const auto& g = ctx.graph();
  const auto& mean = g.node(g.value(ctx.node().inputs[1]).producer);
  auto rank = rankOf(g, ctx.node().inputs[0]);
  AxisSet axes;
  auto dims = g.constantIntList(mean.inputs[1]);
  for (auto d : *dims) axes.insert(d < 0 ? d + rank : d);
  Leaf leaf;
  leaf.kind = LeafKind::MeanSubtraction;
  leaf.output = ctx.node().outputs[0];
  leaf.axes = axes;
  auto id = ctx.addLeaf(std::move(leaf));
  ctx.set(0, MeanZeroFact::meanZero(axes, {id}, ctx.rule()));
}

void addSubMz(MeanZeroContext& ctx) {
  const auto& g = ctx.graph();
  const auto& n = ctx.node();
  auto a = n.inputs.at(0), b = n.inputs.at(1);
  auto out = rankOf(g, n.outputs[0]);
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
  const auto& fa = ctx.fact(a);
  const auto& fb = ctx.fact(b);
  if (!fa.isMeanZero()) { ctx.propagateBroken(0); return; }
  if (!fb.isMeanZero()) { ctx.propagateBroken(1); return; }
  auto axes = alignAxes(fa.axes, rankOf(g, a), out) | alignAxes(fb.axes, rankOf(g, b), out);
  ctx.set(0, MeanZeroFact::meanZero(axes, unite(fa.leaves, fb.leaves), ctx.rule()));
}

ShiftOutcome addSubShift(const ShiftInput& in) {
  const auto& g = in.graph;
  const auto& n = g.node(in.node);
  if (in.slot > 1) return unsafeSeen(in, "uses the changed value as its alpha");
  auto out = rankOf(g, n.outputs[0]);
  auto v = n.inputs[in.slot];
  auto axes = alignAxes(in.axes, rankOf(g, v), out);
  // Axes along which the shifted operand is broadcast carry the same shift everywhere.
  if (const auto* s = shapeOf(g, v); s && shapeOf(g, n.outputs[0])) {
    const auto& os = *shapeOf(g, n.outputs[0]);
    for (int64_t a = 0; a < out; ++a) {
      int64_t ia = a - (out - int64_t(s->size()));
      if (ia < 0 || ((*s)[ia] == 1 && os[a] != 1)) axes.insert(a);
    }
  }
  return ShiftOutcome::passed({{n.outputs[0], axes}});
}

void scaleMz(MeanZeroContext& ctx) {
  const auto& g = ctx.graph();
  const auto& n = ctx.node();
  auto out = rankOf(g, n.outputs[0]);
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
  auto out = rankOf(g, n.outputs[0]);
  auto axes = alignAxes(in.axes, rankOf(g, n.inputs[in.slot]), out);
  if (!constantAlong(g, n.inputs[1 - in.slot], axes, out))
    return unsafeSeen(in, "multiplies the change by a tensor that varies along its axes");
  return ShiftOutcome::passed({{n.outputs[0], axes}});
}

void identityMz(MeanZeroContext& ctx) {
  const auto& g = ctx.graph();
  const auto& n = ctx.node();
  if (n.kind.find("dropout") != std::string::npos) {
    auto train = n.inputs.size() > 2 ? g.constantBool(n.inputs[2]) : std::optional<bool>(false);
    if (!train || *train) { ctx.breakHere("dropout in training mode (random mask)"); return; }
  }
  if (const auto& t = g.value(n.outputs[0]).tensor) {
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

ShiftOutcome identityShift(const ShiftInput& in) {
  if (in.slot != 0) return ShiftOutcome::ignored();
  return passSame(in);
}

void viewMz(MeanZeroContext& ctx) {
  const auto& g = ctx.graph();
  const auto& n = ctx.node();
  const auto& f = ctx.inputFact(0);
  if (!f.isMeanZero()) { ctx.propagateBroken(0); return; }
  const auto* in = shapeOf(g, n.inputs[0]);
  const auto* out = shapeOf(g, n.outputs[0]);
  if (!in || !out) { ctx.breakHere("shapes were not recorded"); return; }
  auto axes = mapMeanZeroThroughView(*in, *out, f.axes);
  if (axes.empty()) { ctx.breakHere("the reshape drops the mean-zero axes"); return; }
  ctx.set(0, MeanZeroFact::meanZero(axes, f.leaves, ctx.rule()));
}

ShiftOutcome viewShift(const ShiftInput& in) {
  if (in.slot != 0) return ShiftOutcome::ignored();
  const auto& g = in.graph;
  const auto& n = g.node(in.node);
  const auto* a = shapeOf(g, n.inputs[0]);
  const auto* b = shapeOf(g, n.outputs[0]);
  if (!a || !b) return unsafeSeen(in, "has unrecorded shapes");
  return ShiftOutcome::passed({{n.outputs[0], mapConstantThroughView(*a, *b, in.axes)}});
}

/// Output axis -> input axis for permute/transpose/t; nullopt when the dims are not constant.
std::optional<std::vector<int64_t>> permutation(const Graph& g, const Node& n) {
  auto rank = rankOf(g, n.inputs[0]);
  if (rank < 0) return std::nullopt;
  std::vector<int64_t> perm(rank);
  for (int64_t i = 0; i < rank; ++i) perm[i] = i;
  if (n.kind == "aten::permute") {
    auto dims = g.constantIntList(n.inputs[1]);
    if (!dims || int64_t(dims->size()) != rank) return std::nullopt;
    for (int64_t i = 0; i < rank; ++i) perm[i] = (*dims)[i] < 0 ? (*dims)[i] + rank : (*dims)[i];
  } else if (n.kind == "aten::t" || n.kind == "aten::numpy_T") {
    std::reverse(perm.begin(), perm.end());
  } else {
    auto d0 = dimArg(g, n.inputs[1], rank), d1 = dimArg(g, n.inputs[2], rank);
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

void permuteMz(MeanZeroContext& ctx) {
  const auto& f = ctx.inputFact(0);
  if (!f.isMeanZero()) { ctx.propagateBroken(0); return; }
  auto perm = permutation(ctx.graph(), ctx.node());
  if (!perm) { ctx.breakHere("its dims are not constants"); return; }
  ctx.set(0, MeanZeroFact::meanZero(permuteAxes(*perm, f.axes), f.leaves, ctx.rule()));
}

ShiftOutcome permuteShift(const ShiftInput& in) {
  if (in.slot != 0) return ShiftOutcome::ignored();
  auto perm = permutation(in.graph, in.graph.node(in.node));
  if (!perm) return unsafeSeen(in, "has non-constant dims");
  return ShiftOutcome::passed({{in.graph.node(in.node).outputs[0], permuteAxes(*perm, in.axes)}});
}

void expandMz(MeanZeroContext& ctx) {
  const auto& g = ctx.graph();
  const auto& n = ctx.node();
  const auto& f = ctx.inputFact(0);
  if (!f.isMeanZero()) { ctx.propagateBroken(0); return; }
  auto axes = alignAxes(f.axes, rankOf(g, n.inputs[0]), rankOf(g, n.outputs[0]));
  ctx.set(0, MeanZeroFact::meanZero(axes, f.leaves, ctx.rule()));
}

ShiftOutcome expandShift(const ShiftInput& in) {
  if (in.slot != 0) return ShiftOutcome::ignored();
  const auto& g = in.graph;
  const auto& n = g.node(in.node);
  auto ri = rankOf(g, n.inputs[0]), ro = rankOf(g, n.outputs[0]);
  auto axes = alignAxes(in.axes, ri, ro);
  const auto* si = shapeOf(g, n.inputs[0]);
  const auto* so = shapeOf(g, n.outputs[0]);
  if (si && so && n.kind != "aten::repeat") {
    for (int64_t a = 0; a < ro; ++a) {
      int64_t ia = a - (ro - ri);
      if (ia < 0 || ((*si)[ia] == 1 && (*so)[a] != 1)) axes.insert(a);
    }
  }
  return ShiftOutcome::passed({{n.outputs[0], axes}});
}

/// Removes axis `dim`, shifting later axes down.
AxisSet dropAxis(AxisSet axes, int64_t dim) {
  AxisSet out;
  for (auto a : axes.axes())
    if (a < dim) out.insert(a);
    else if (a > dim) out.insert(a - 1);
  return out;
}

AxisSet insertAxis(AxisSet axes, int64_t dim) {
  AxisSet out;
  for (auto a : axes.axes()) out.insert(a < dim ? a : a + 1);
  return out;
}

bool removesDim(const std::string& kind) { return kind == "aten::select" || kind == "aten::unbind"; }

void sliceMz(MeanZeroContext& ctx) {
  const auto& g = ctx.graph();
  const auto& n = ctx.node();
  const auto& f = ctx.inputFact(0);
  if (!f.isMeanZero()) { ctx.propagateBroken(0); return; }
  auto rank = rankOf(g, n.inputs[0]);
  auto dim = n.inputs.size() > 1 ? dimArg(g, n.inputs[1], rank) : std::optional<int64_t>(0);
  if (n.kind == "aten::chunk" || n.kind == "aten::unsafe_chunk" || n.kind == "aten::split" ||
      n.kind == "aten::split_with_sizes" || n.kind == "aten::unsafe_split" ||
      n.kind == "aten::tensor_split")
    dim = n.inputs.size() > 2 ? dimArg(g, n.inputs[2], rank) : std::optional<int64_t>(0);
  if (!dim) { ctx.breakHere("its dim is not a constant"); return; }
  // x[..., :] traces as a slice over the whole dim: same shape in and out, nothing taken away.
  bool wholeSlice = (n.kind == "aten::slice" || n.kind == "aten::narrow") && shapeOf(g, n.inputs[0]) &&
                    shapeOf(g, n.outputs[0]) && *shapeOf(g, n.inputs[0]) == *shapeOf(g, n.outputs[0]);
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
    auto dim = dimArg(g, n.inputs[1], rankOf(g, n.inputs[0]));
    if (!dim) return unsafeSeen(in, "has a non-constant dim");
    axes = dropAxis(axes, *dim);
  }
  std::vector<std::pair<ValueId, AxisSet>> outs;
  for (auto o : n.outputs) outs.emplace_back(o, axes);
  return ShiftOutcome::passed(outs);
}

/// Dims indexed by aten::index's list of optional index tensors; nullopt if not readable.
std::optional<int64_t> lastIndexedDim(const Graph& g, const Node& n) {
  auto list = g.value(n.inputs.at(1)).producer;
  if (list == kNone || g.node(list).kind != "prim::ListConstruct") return std::nullopt;
  int64_t last = -1;
  const auto& items = g.node(list).inputs;
  for (std::size_t i = 0; i < items.size(); ++i)
    if (!g.isNoneValue(items[i])) last = int64_t(i);
  return last;
}

void indexMz(MeanZeroContext& ctx) {
  const auto& g = ctx.graph();
  const auto& n = ctx.node();
  const auto& f = ctx.inputFact(0);
  if (!f.isMeanZero()) { ctx.propagateBroken(0); return; }
  auto last = lastIndexedDim(g, n);
  if (!last) { ctx.breakHere("its index list is not readable"); return; }
  auto ri = rankOf(g, n.inputs[0]), ro = rankOf(g, n.outputs[0]);
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
  auto ri = rankOf(g, n.inputs[0]), ro = rankOf(g, n.outputs[0]);
  AxisSet out;
  for (auto a : in.axes.axes())
    if (a > *last) out.insert(a + (ro - ri));
  return ShiftOutcome::passed({{n.outputs[0], out}});
}

void listMz(MeanZeroContext& ctx) {
  const auto& g = ctx.graph();
  const auto& n = ctx.node();
  if (n.kind == "prim::ListConstruct") {
    if (g.value(n.outputs[0]).kind != ValueKind::TensorList || n.inputs.empty()) return;
    // A list is as mean-zero as all its elements (same rank): cat/stack read the elements.
    MeanZeroFact acc = ctx.inputFact(0);
    if (!acc.isMeanZero()) { ctx.propagateBroken(0); return; }
    for (std::size_t i = 1; i < n.inputs.size(); ++i) {
      const auto& f = ctx.inputFact(i);
      if (!f.isMeanZero()) { ctx.propagateBroken(i); return; }
      acc = MeanZeroFact::meanZero(acc.axes | f.axes, unite(acc.leaves, f.leaves), ctx.rule());
    }
    ctx.set(0, acc);
    return;
  }
  // ListUnpack / __getitem__ / TupleUnpack / TupleIndex: every element carries the list's fact.
  const auto& f = ctx.inputFact(0);
  if (f.isMeanZero()) ctx.setAll(MeanZeroFact::meanZero(f.axes, f.leaves, ctx.rule()));
  else if (f.state == Kind::Broken) ctx.propagateBroken(0);
  else ctx.breakHere("a tuple or list element without a mean-zero fact");
}

ShiftOutcome listShift(const ShiftInput& in) { return passSame(in); }

bool isStack(const std::string& kind) { return kind == "aten::stack"; }

void catMz(MeanZeroContext& ctx) {
  const auto& g = ctx.graph();
  const auto& n = ctx.node();
  auto list = g.value(n.inputs[0]).producer;
  if (list == kNone || g.node(list).kind != "prim::ListConstruct") {
    ctx.breakHere("its tensor list is not built in the graph");
    return;
  }
  const auto& parts = g.node(list).inputs;
  auto outRank = rankOf(g, n.outputs[0]);
  auto dim = dimArg(g, n.inputs[1], outRank);
  if (!dim) { ctx.breakHere("its dim is not a constant"); return; }
  AxisSet axes;
  std::vector<LeafId> leaves;
  for (auto p : parts) {
    const auto& f = ctx.fact(p);
    if (!f.isMeanZero()) {
      ctx.setAll(MeanZeroFact::propagated(f, p, ctx.rule()));
      if (f.state != Kind::Broken) ctx.breakHere("a part has no mean-zero fact");
      return;
    }
    // Each part mean-zero on its own: along the cat axis too, the concatenation's row sums to zero.
    axes = axes | (isStack(n.kind) ? insertAxis(f.axes, *dim) : f.axes);
    leaves = unite(leaves, f.leaves);
  }
  ctx.set(0, MeanZeroFact::meanZero(axes, leaves, ctx.rule()));
}

ShiftOutcome catShift(const ShiftInput& in) {
  if (in.slot != 0) return ShiftOutcome::ignored();
  const auto& g = in.graph;
  const auto& n = g.node(in.node);
  auto list = g.value(n.inputs[0]).producer;
  std::size_t parts = list == kNone ? 2 : g.node(list).inputs.size();
  auto outRank = rankOf(g, n.outputs[0]);
  auto dim = dimArg(g, n.inputs[1], outRank);
  if (!dim) return unsafeSeen(in, "has a non-constant dim");
  auto axes = isStack(n.kind) ? insertAxis(in.axes, *dim) : in.axes;
  // Parts shifted by different amounts (or not at all) make the shift vary along the cat axis.
  if (parts > 1) axes.erase(*dim);
  return ShiftOutcome::passed({{n.outputs[0], axes}});
}

/// Dims padded by aten::pad/constant_pad_nd (pairs from the last dim backwards).
AxisSet paddedDims(const Graph& g, const Node& n) {
  AxisSet out;
  auto pad = g.constantIntList(n.inputs.at(1));
  auto rank = rankOf(g, n.inputs[0]);
  if (!pad) return AxisSet::trailing(rank, rank);
  for (std::size_t i = 0; i + 1 < pad->size(); i += 2)
    if ((*pad)[i] != 0 || (*pad)[i + 1] != 0) out.insert(rank - 1 - int64_t(i / 2));
  return out;
}

std::string padMode(const Graph& g, const Node& n) {
  if (n.kind == "aten::_pad_enum") {
    // What F::pad becomes in LibTorch's C++ API: the mode is at::padding_mode as an int
    // (reflect, replicate, circular, constant).
    auto m = n.inputs.size() > 2 ? g.constantInt(n.inputs[2]) : std::nullopt;
    if (!m) return "unknown";
    static const char* kModes[] = {"reflect", "replicate", "circular", "constant"};
    return *m >= 0 && *m < 4 ? kModes[*m] : "unknown";
  }
  if (n.kind == "aten::pad" && n.inputs.size() > 2) {
    if (const auto& c = g.value(n.inputs[2]).constant)
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
    if (n.inputs.size() > valueSlot && !g.isNoneValue(n.inputs[valueSlot]))
      value = g.constantDouble(n.inputs[valueSlot]).value_or(1.0);
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
  return ShiftOutcome::passed({{n.outputs[0], axes}});
}

void rollMz(MeanZeroContext& ctx) {
  const auto& f = ctx.inputFact(0);
  if (!f.isMeanZero()) { ctx.propagateBroken(0); return; }
  ctx.set(0, MeanZeroFact::meanZero(f.axes, f.leaves, ctx.rule()));
}

/// Reduced dims of mean/sum, or nullopt for "all dims" / unreadable.
std::optional<AxisSet> reducedDims(const Graph& g, const Node& n) {
  if (n.inputs.size() < 2) return std::nullopt;
  auto dims = g.constantIntList(n.inputs[1]);
  if (!dims || dims->empty()) return std::nullopt;
  auto rank = rankOf(g, n.inputs[0]);
  AxisSet out;
  for (auto d : *dims) out.insert(d < 0 ? d + rank : d);
  return out;
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
  bool keepdim = n.inputs.size() > 2 && g.constantBool(n.inputs[2]).value_or(false);
  ctx.set(0, MeanZeroFact::meanZero(afterReduction(f.axes, *reduced, keepdim), f.leaves, ctx.rule()));
}

ShiftOutcome reduceShift(const ShiftInput& in) {
  if (in.slot != 0) return ShiftOutcome::ignored();
  const auto& g = in.graph;
  const auto& n = g.node(in.node);
  auto reduced = reducedDims(g, n);
  if (!reduced) return ShiftOutcome::passed({{n.outputs[0], AxisSet{}}});
  bool keepdim = n.inputs.size() > 2 && g.constantBool(n.inputs[2]).value_or(false);
  return ShiftOutcome::passed({{n.outputs[0], afterReduction(in.axes, *reduced, keepdim)}});
}

void attentionMz(MeanZeroContext& ctx) {
  const auto& g = ctx.graph();
  const auto& n = ctx.node();
  auto out = rankOf(g, n.outputs[0]);
  auto ra = rankOf(g, n.inputs[0]), rb = rankOf(g, n.inputs[1]);
  const auto& fb = ctx.inputFact(1);
  if (fb.isMeanZero() && rb >= 2 && fb.axes == AxisSet::of({rb - 1})) {
    ctx.set(0, MeanZeroFact::meanZero(AxisSet::of({out - 1}), fb.leaves, ctx.rule()));
    return;
  }
  const auto& fa = ctx.inputFact(0);
  if (fa.isMeanZero() && ra >= 2 && fa.axes == AxisSet::of({ra - 2})) {
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
  auto out = rankOf(g, n.outputs[0]);
  auto r = rankOf(g, n.inputs[in.slot]);
  if (in.slot == 1 && r >= 2 && in.axes.contains(r - 1))
    return ShiftOutcome::passed({{n.outputs[0], AxisSet::of({out - 1})}});
  if (in.slot == 0 && r >= 2 && in.axes.contains(r - 2))
    return ShiftOutcome::passed({{n.outputs[0], AxisSet::of({out - 2})}});
  return unsafeSeen(in, "multiplies the changed value by another tensor");
}

void sdpaMz(MeanZeroContext& ctx) {
  // out = softmax(q k^T / s + mask) v: a weighted sum of the rows of v.
  const auto& g = ctx.graph();
  const auto& n = ctx.node();
  auto rv = rankOf(g, n.inputs.at(2));
  if (n.inputs.size() > 4 && g.constantDouble(n.inputs[4]).value_or(1.0) != 0.0) {
    ctx.breakHere("attention dropout is active");
    return;
  }
  const auto& fv = ctx.inputFact(2);
  if (fv.isMeanZero() && rv >= 1 && fv.axes == AxisSet::of({rv - 1})) {
    ctx.set(0, MeanZeroFact::meanZero(AxisSet::of({rankOf(g, n.outputs[0]) - 1}), fv.leaves, ctx.rule()));
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
    return ShiftOutcome::passed({{n.outputs[0], AxisSet::of({rankOf(g, n.outputs[0]) - 1})}});
  return unsafeSeen(in, "uses the changed value as query, key or mask");
}

void nativeMhaMz(MeanZeroContext& ctx) {
  // aten::_native_multi_head_attention(q, k, v, embed_dim, num_head, qkv_weight, qkv_bias,
  // proj_weight, proj_bias, mask, ...) -> (out, weights): out ends in the output projection.
  const auto& n = ctx.node();
  auto r = rankOf(ctx.graph(), n.outputs[0]);
  weightLeaf(ctx, LeafKind::Linear, n.inputs.at(7), 0, n.inputs.at(8), r - 1);
  if (n.outputs.size() > 1 && ctx.graph().value(n.outputs[1]).kind == ValueKind::Tensor)
    ctx.set(1, MeanZeroFact::broken(ctx.nodeId(), "attention weights are positive", ctx.rule()));
}

void layerNormMz(MeanZeroContext& ctx) {
  ctx.breakHere("LayerNorm output is scaled and shifted by its weight and bias, not mean-zero");
}

ShiftOutcome layerNormShift(const ShiftInput& in) {
  const auto& g = in.graph;
  const auto& n = g.node(in.node);
  if (in.slot != 0) return unsafeSeen(in, "uses the changed value as its weight or bias");
  auto shape = g.constantIntList(n.inputs.at(1));
  auto rank = rankOf(g, n.inputs[0]);
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
  auto dim = dimArg(g, n.inputs.at(1), rankOf(g, n.inputs[0]));
  if (dim && in.axes.contains(*dim))
    return ShiftOutcome::absorbed("softmax is invariant to a shift constant along its axis");
  return unsafeSeen(in, "is taken along an axis where the shift varies");
}

void shapeOnlyMz(MeanZeroContext& ctx) {
  for (std::size_t i = 0; i < ctx.node().outputs.size(); ++i)
    if (isTensor(ctx.graph(), ctx.node().outputs[i]))
      ctx.set(i, MeanZeroFact::broken(ctx.nodeId(), "a tensor computed from shapes or constants",
                                      ctx.rule()));
}

ShiftOutcome ignoreShift(const ShiftInput&) { return ShiftOutcome::ignored(); }

void breakMz(MeanZeroContext& ctx) {
  ctx.breakHere(ctx.node().kind + " is " + (ctx.rule() == "nonlinearity" ? "nonlinear"
                                             : ctx.rule() == "normalization" ? "a normalization with an affine output"
                                             : ctx.rule() == "creation" ? "a tensor created in the graph"
                                             : "not mean-preserving"));
}

ShiftOutcome unsafeShift(const ShiftInput& in) { return unsafeSeen(in, "sees the changed value"); }

void modelInputMz(MeanZeroContext& ctx) {
  for (std::size_t i = 0; i < ctx.node().outputs.size(); ++i)
    ctx.set(i, MeanZeroFact::broken(ctx.nodeId(), "a model input is arbitrary, not mean-zero",
                                    ctx.rule()));
}

ShiftOutcome modelOutputShift(const ShiftInput& in) {
  return ShiftOutcome::unsafe("model output " + std::to_string(in.slot) +
                              ": the caller would see the changed value");
}

void unknownMz(MeanZeroContext& ctx) {
  ctx.breakHere("no rule for " + ctx.node().kind + ": treated as breaking");
}

ShiftOutcome unknownShift(const ShiftInput& in) {
  return ShiftOutcome::unsafe("no rule for " + in.graph.node(in.node).kind +
                              ": it is assumed to see the changed value");
}

std::vector<Rule> makeRegistry() {
  std::vector<Rule> r;
  auto add = [&](std::string name, RuleFamily family, std::vector<std::string> ops, std::string why,
                 std::function<void(MeanZeroContext&)> mz, std::function<ShiftOutcome(const ShiftInput&)> sh) {
    r.push_back(Rule{std::move(name), family, std::move(ops), std::move(why), std::move(mz), std::move(sh)});
  };
  using F = RuleFamily;
  // ---- leaves ----
  add("linear", F::Leaf, {"aten::linear"},
      "y = x W^T + b with W [out,in]: centering W over dim 0 (per input column) and b makes y "
      "mean-zero along its last axis for every x", linearMz, unsafeShift);
  add("addmm", F::Leaf, {"aten::addmm"},
      "y = b + x W with W [in,out] (GPT-2 Conv1D): centering W over dim 1 and b makes y mean-zero "
      "along its last axis", addmmMz, unsafeShift);
  add("matmul-parameter", F::Leaf, {"aten::matmul", "aten::mm", "aten::bmm"},
      "x @ W where W is a parameter (through t/transpose/permute): center W along the axis that "
      "becomes the output's last axis (or W @ x: along the rows)", matmulParamMz, unsafeShift);
  add("convolution", F::Leaf,
      {"aten::conv1d", "aten::conv2d", "aten::conv3d", "aten::_convolution", "aten::convolution",
       "aten::conv_transpose1d", "aten::conv_transpose2d", "aten::conv_transpose3d"},
      "a convolution is linear in its input: centering the weight over output channels within "
      "each group, and the bias, makes the output mean-zero along the channel axis; depthwise "
      "convolutions (one output per group) cannot be centered", convMz, unsafeShift);
  add("multi-head-attention", F::Leaf, {"aten::_native_multi_head_attention"},
      "nn.MultiheadAttention's fused inference op ends in its output projection (proj_weight "
      "[E,E], proj_bias): centering them like a linear makes the output mean-zero", nativeMhaMz,
      unsafeShift);
  add("embedding", F::Leaf, {"aten::embedding"},
      "a lookup is a linear map of a one-hot vector: centering each row of the table over its "
      "features makes every looked-up row mean-zero", embeddingMz, unsafeShift);
  add("parameter", F::Leaf, {"prim::GetAttr", "prim::Constant"},
      "a parameter or constant tensor entering the sum directly (class token, position table, "
      "bias added on its own) is centered along its last non-broadcast axis", parameterMz, ignoreShift);
  add("mean-subtraction", F::Leaf, {"aten::sub"},
      "x - x.mean(dims, keepdim=True) is mean-zero along dims by construction; nothing to center",
      meanSubtractionMz, addSubShift);
  // ---- preserving ----
  add("add-sub", F::Preserving, {"aten::add", "aten::sub", "aten::add_", "aten::sub_", "aten::rsub"},
      "a sum or difference of tensors that are each mean-zero (along the same axes after "
      "broadcasting) is mean-zero; adding a non-zero scalar breaks it", addSubMz, addSubShift);
  add("scale", F::Preserving,
      {"aten::mul", "aten::div", "aten::mul_", "aten::div_", "aten::true_divide"},
      "multiplying or dividing a mean-zero tensor by a scalar, or by a tensor constant along the "
      "mean-zero axes (per-row scale), keeps the zero mean; a per-feature factor breaks it",
      scaleMz, scaleShift);
  add("identity", F::Preserving,
      {"aten::neg", "aten::contiguous", "aten::clone", "aten::detach", "aten::alias",
       "aten::dropout", "aten::dropout_", "aten::feature_dropout", "aten::alpha_dropout",
       "aten::feature_alpha_dropout", "aten::to", "aten::type_as", "aten::lift_fresh",
       "aten::positive", "aten::identity"},
      "value-preserving ops (copies, eval-mode dropout, float casts, negation) keep the zero mean",
      identityMz, identityShift);
  // ---- axis mapping ----
  add("view", F::Axis,
      {"aten::view", "aten::reshape", "aten::_unsafe_view", "aten::flatten", "aten::unflatten",
       "aten::squeeze", "aten::unsqueeze", "aten::view_as", "aten::reshape_as",
       "aten::_reshape_alias", "aten::squeeze_", "aten::unsqueeze_"},
      "a reshape regroups dims: mean-zero along some dims of a group of equal element count "
      "implies mean-zero along the whole group on the other side (shapes from the recording run)",
      viewMz, viewShift);
  add("permute", F::Axis, {"aten::permute", "aten::transpose", "aten::t", "aten::numpy_T", "aten::swapaxes"},
      "permutes and transposes move the mean-zero axes with them", permuteMz, permuteShift);
  add("expand", F::Axis, {"aten::expand", "aten::expand_as", "aten::broadcast_to", "aten::repeat"},
      "broadcasting or repeating copies whole rows, which stay mean-zero", expandMz, expandShift);
  add("slice", F::Axis,
      {"aten::slice", "aten::narrow", "aten::select", "aten::index_select", "aten::split",
       "aten::split_with_sizes", "aten::chunk", "aten::unsafe_chunk", "aten::unsafe_split",
       "aten::tensor_split", "aten::unbind"},
      "taking parts along another axis keeps whole rows; a part along a mean-zero axis is not "
      "mean-zero", sliceMz, sliceShift);
  add("index", F::Axis, {"aten::index"},
      "advanced indexing on leading axes (before the mean-zero axes) keeps whole rows", indexMz, indexShift);
  add("list", F::Axis,
      {"prim::ListConstruct", "prim::ListUnpack", "aten::__getitem__", "prim::TupleConstruct",
       "prim::TupleUnpack", "prim::TupleIndex"},
      "lists and tuples carry their elements' facts", listMz, listShift);
  add("cat", F::Axis, {"aten::cat", "aten::concat", "aten::concatenate", "aten::stack"},
      "concatenating parts that are each mean-zero is mean-zero, along other axes and along the "
      "mean-zero axis itself (each part's row sums to zero); parts shifted by different amounts "
      "are not shift-constant along the cat axis", catMz, catShift);
  add("pad", F::Axis,
      {"aten::pad", "aten::_pad_enum", "aten::constant_pad_nd", "aten::reflection_pad1d",
       "aten::reflection_pad2d", "aten::replication_pad1d", "aten::replication_pad2d"},
      "zero padding adds zeros, which keep every row sum at zero; reflect/replicate padding is "
      "fine along other axes only", padMz, padShift);
  add("roll-flip", F::Axis, {"aten::roll", "aten::flip", "aten::fliplr", "aten::flipud"},
      "rolling or flipping permutes elements within rows, so the row mean is unchanged", rollMz, identityShift);
  add("reduce", F::Axis, {"aten::mean", "aten::sum"},
      "averaging or summing over other axes averages mean-zero rows, which stay mean-zero",
      reduceMz, reduceShift);
  add("attention-weighted-sum", F::Axis, {"aten::matmul", "aten::mm", "aten::bmm"},
      "P @ V with V mean-zero along its last axis is mean-zero along the output's last axis "
      "(a weighted sum of mean-zero rows)", attentionMz, attentionShift);
  add("scaled-dot-product-attention", F::Axis, {"aten::scaled_dot_product_attention"},
      "softmax(q k^T) v is a weighted sum of rows of v: mean-zero when v is mean-zero along its "
      "last axis (no attention dropout)", sdpaMz, sdpaShift);
  // ---- absorbers ----
  add("layer-norm", F::Absorber, {"aten::layer_norm"},
      "LayerNorm subtracts the mean over its normalized axes, so it absorbs a shift constant along "
      "them; its own output is affine and not mean-zero", layerNormMz, layerNormShift);
  add("softmax", F::Absorber, {"aten::softmax", "aten::_softmax", "aten::log_softmax", "aten::_log_softmax"},
      "softmax is invariant to a shift constant along its axis; its output is positive",
      softmaxMz, softmaxShift);
  // ---- shape-only ----
  add("shape-only", F::ShapeOnly,
      {"aten::size", "aten::dim", "prim::shape", "aten::numel", "prim::device", "prim::dtype",
       "prim::layout", "aten::len", "prim::NumToTensor", "aten::Int", "aten::Float",
       "aten::ScalarImplicit", "aten::zeros_like", "aten::ones_like", "aten::empty_like",
       "aten::full_like", "aten::new_zeros", "aten::new_ones", "aten::new_full", "aten::new_empty",
       "aten::floordiv", "aten::sym_size", "aten::is_floating_point"},
      "these read only shapes, dtypes or devices: a change of values never reaches them",
      shapeOnlyMz, ignoreShift);
  // ---- explicit breakers ----
  add("nonlinearity", F::Breaker,
      {"aten::relu", "aten::relu_", "aten::gelu", "aten::gelu_", "aten::tanh", "aten::tanh_",
       "aten::sigmoid", "aten::silu", "aten::elu", "aten::leaky_relu", "aten::hardswish",
       "aten::hardtanh", "aten::hardsigmoid", "aten::mish", "aten::softplus", "aten::exp",
       "aten::log", "aten::pow", "aten::sqrt", "aten::rsqrt", "aten::abs", "aten::square",
       "aten::erf", "aten::clamp", "aten::clamp_min", "aten::clamp_max", "aten::sin", "aten::cos",
       "aten::where", "aten::masked_fill", "aten::masked_fill_", "aten::maximum", "aten::minimum",
       "aten::reciprocal", "aten::sign", "aten::baddbmm", "aten::einsum",
       "aten::max_pool2d", "aten::adaptive_avg_pool2d", "aten::avg_pool2d", "aten::max", "aten::min"},
      "nonlinear (or not yet proven linear) ops do not preserve a zero mean and see any change "
      "of their input", breakMz, unsafeShift);
  add("normalization", F::Breaker,
      {"aten::batch_norm", "aten::group_norm", "aten::instance_norm", "aten::rms_norm",
       "aten::_fused_rms_norm", "foldnorm::rms_norm", "aten::native_layer_norm"},
      "normalizations other than LayerNorm neither output nor (in general) absorb a zero mean",
      breakMz, unsafeShift);
  add("creation", F::Breaker,
      {"aten::zeros", "aten::ones", "aten::full", "aten::arange", "aten::tril", "aten::triu",
       "aten::empty", "aten::tensor", "aten::rand", "aten::randn", "aten::eye", "aten::linspace"},
      "tensors created in the graph are not mean-zero", breakMz, unsafeShift);
  add("model-input", F::Breaker, {"prim::Param"}, "model inputs are arbitrary", modelInputMz, ignoreShift);
  add("model-output", F::Breaker, {"prim::Return"},
      "the caller sees every model output: a changed value there changes the function",
      [](MeanZeroContext&) {}, modelOutputShift);
  return r;
}

const std::map<std::string, std::vector<std::size_t>>& rulesByOp() {
  static const auto map = [] {
    std::map<std::string, std::vector<std::size_t>> m;
    const auto& reg = ruleRegistry();
    for (std::size_t i = 0; i < reg.size(); ++i)
      for (const auto& op : reg[i].ops) m[op].push_back(i);
    return m;
  }();
  return map;
}

/// Rules that share an op decide by the node: mean subtraction before add/sub, a parameter
/// operand before the attention-weighted sum, module/int GetAttr reads are no parameter leaf.
bool ruleMatches(const Rule& rule, const Graph& g, NodeId node) {
  if (rule.name == "mean-subtraction") return isMeanSubtraction(g, node);
  if (rule.name == "matmul-parameter") {
    const auto& n = g.node(node);
    return n.inputs.size() >= 2 && (isParamOperand(g, n.inputs[1]) || isParamOperand(g, n.inputs[0]));
  }
  return true;
}

}  // namespace

const std::vector<Rule>& ruleRegistry() {
  static const std::vector<Rule> registry = makeRegistry();
  return registry;
}

const Rule& fallbackRule() {
  static const Rule fallback{"unknown-op", RuleFamily::Breaker, {},
                             "an op without a rule is assumed to break the zero mean and to see "
                             "any change of its input; the reason names it",
                             unknownMz, unknownShift};
  return fallback;
}

const Rule& ruleFor(const Graph& graph, NodeId node) {
  const auto& byOp = rulesByOp();
  auto it = byOp.find(graph.node(node).kind);
  if (it == byOp.end()) return fallbackRule();
  for (auto i : it->second)
    if (ruleMatches(ruleRegistry()[i], graph, node)) return ruleRegistry()[i];
  return fallbackRule();
}

std::string rulesMarkdown() {
  std::ostringstream os;
  os << "# Mean-zero rules\n\n"
     << "Generated from the rule registry (`src/analysis/rules.cpp`) by `foldnorm rules "
        "--markdown`;\na test fails when this file and the registry disagree.\n\n"
     << "Each rule says how an op transforms the two facts of the analysis: whether its output\n"
     << "can be made mean-zero (and along which axes), and what a constant shift arriving at one\n"
     << "of its inputs (from a centered leaf) does: absorbed, passed on, ignored, or seen\n"
     << "(unsafe). See docs/design.md for the lattice and the solver.\n\n";
  const RuleFamily order[] = {RuleFamily::Leaf, RuleFamily::Preserving, RuleFamily::Axis,
                              RuleFamily::Absorber, RuleFamily::ShapeOnly, RuleFamily::Breaker};
  for (auto family : order) {
    os << "## " << toString(family) << "\n\n| rule | ops | rationale |\n|---|---|---|\n";
    for (const auto& rule : ruleRegistry()) {
      if (rule.family != family) continue;
      std::string ops;
      for (const auto& o : rule.ops) ops += (ops.empty() ? "" : ", ") + ("`" + o + "`");
      os << "| " << rule.name << " | " << ops << " | " << rule.rationale << " |\n";
    }
    if (family == RuleFamily::Breaker) {
      const auto& f = fallbackRule();
      os << "| " << f.name << " | (any other op) | " << f.rationale << " |\n";
    }
    os << "\n";
  }
  return os.str();
}

}  // namespace foldnorm
