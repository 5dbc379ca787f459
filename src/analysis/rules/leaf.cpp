// Leaf rules: ops whose output can be made mean-zero by centering parameters. A leaf's shift
// transfer is "unsafe" (it sees a change of its input) except where noted: the change a leaf
// itself causes is followed by the solver from the leaf's output.
#include "rule_helpers.h"

namespace foldnorm::rules {
namespace {

void linearMz(MeanZeroContext& ctx) {
  const auto& n = ctx.node();
  auto r = rankOf(ctx.graph(), n.outputs.at(0));
  std::optional<ValueId> bias;
  if (n.inputs.size() > 2) bias = n.inputs.at(2);
  weightLeaf(ctx, LeafKind::Linear, n.inputs.at(1), 0, bias, r - 1);
}

void addmmMz(MeanZeroContext& ctx) {
  const auto& n = ctx.node();
  const auto& g = ctx.graph();
  auto bias = n.inputs.at(0);
  if (!isTensor(g, bias)) { ctx.breakHere("addmm without a tensor bias"); return; }
  weightLeaf(ctx, LeafKind::Addmm, n.inputs.at(2), 1, bias, 1);
}


void matmulParamMz(MeanZeroContext& ctx) {
  const auto& n = ctx.node();
  const auto& g = ctx.graph();
  auto out = rankOf(g, n.outputs.at(0));
  auto rb = rankOf(g, n.inputs.at(1));
  if (isParamOperand(g, n.inputs.at(1))) {
    weightLeaf(ctx, LeafKind::Matmul, n.inputs.at(1), rb - 1, std::nullopt, out - 1);
  } else {
    auto ra = rankOf(g, n.inputs.at(0));
    if (ra < 2 || out < 2) { ctx.breakHere("a vector-matrix product cannot be centered"); return; }
    weightLeaf(ctx, LeafKind::Matmul, n.inputs.at(0), ra - 2, std::nullopt, out - 2);
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
  int64_t outPerGroup = transposed ? w->at(1) : w->at(0) / *groups;
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
  auto r = rankOf(ctx.graph(), n.outputs.at(0));
  weightLeaf(ctx, LeafKind::Embedding, n.inputs.at(0), 1, std::nullopt, r - 1);
}


void parameterMz(MeanZeroContext& ctx) {
  const auto& g = ctx.graph();
  const auto& n = ctx.node();
  if (n.outputs.size() != 1) return;
  const auto& v = g.value(n.outputs.at(0));
  if (v.kind != ValueKind::Tensor) return;  // modules, ints, lists: not tensors
  if (v.param == kNone) {
    ctx.breakHere("a constant that is not a tensor parameter");
    return;
  }
  const auto* shape = shapeOf(g, v.id);
  if (!shape) shape = &g.parameter(v.param).shape;
  int64_t axis = -1;
  for (int64_t a = int64_t(shape->size()) - 1; a >= 0; --a)
    if (shape->at(a) > 1) { axis = a; break; }
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
  if (n.inputs.size() < 2 || !isTensor(g, n.inputs.at(1))) return false;
  auto m = g.value(n.inputs.at(1)).producer;
  if (m == kNone || g.node(m).kind != "aten::mean") return false;
  const auto& mean = g.node(m);
  if (mean.inputs.size() < 3 || mean.inputs.at(0) != n.inputs.at(0)) return false;
  if (!g.constantBool(mean.inputs.at(2)).value_or(false)) return false;
  if (n.inputs.size() > 2 && g.constantDouble(n.inputs.at(2)).value_or(0) != 1.0) return false;
  return g.constantIntList(mean.inputs.at(1)).has_value();
}

void meanSubtractionMz(MeanZeroContext& ctx) {
  const auto& g = ctx.graph();
  const auto& mean = g.node(g.value(ctx.node().inputs.at(1)).producer);
  auto rank = rankOf(g, ctx.node().inputs.at(0));
  auto dims = dimListArg(g, mean.inputs.at(1), rank);
  if (!dims || dims->empty()) { ctx.breakHere("its mean's dims are not dims of the input"); return; }
  AxisSet axes = *dims;
  Leaf leaf;
  leaf.kind = LeafKind::MeanSubtraction;
  leaf.output = ctx.node().outputs.at(0);
  leaf.axes = axes;
  auto id = ctx.addLeaf(std::move(leaf));
  ctx.set(0, MeanZeroFact::meanZero(axes, {id}, ctx.rule()));
}


void nativeMhaMz(MeanZeroContext& ctx) {
  // aten::_native_multi_head_attention(q, k, v, embed_dim, num_head, qkv_weight, qkv_bias,
  // proj_weight, proj_bias, mask, ...) -> (out, weights): out ends in the output projection.
  const auto& n = ctx.node();
  auto r = rankOf(ctx.graph(), n.outputs.at(0));
  weightLeaf(ctx, LeafKind::Linear, n.inputs.at(7), 0, n.inputs.at(8), r - 1);
  if (n.outputs.size() > 1 && ctx.graph().value(n.outputs.at(1)).kind == ValueKind::Tensor)
    ctx.set(1, MeanZeroFact::broken(ctx.nodeId(), "attention weights are positive", ctx.rule()));
}


/// The parameter operand of a two-operand einsum and an output letter it alone carries.
struct EinsumLeaf {
  std::size_t operand;
  char letter;
};

std::optional<EinsumLeaf> einsumLeaf(const Graph& g, const Node& n) {
  auto form = einsumForm(g, n);
  if (!form || form->tensors.size() != 2) return std::nullopt;
  for (std::size_t i = 0; i < 2; ++i) {
    if (!isParamOperand(g, form->tensors[i]) || isParamOperand(g, form->tensors[1 - i])) continue;
    // Prefer the output's last axis (where a LayerNorm normalizes).
    for (auto it = form->output.rbegin(); it != form->output.rend(); ++it)
      if (carriedAxis(*form, i, *it) >= 0) return EinsumLeaf{i, *it};
  }
  return std::nullopt;
}

void einsumParameterMz(MeanZeroContext& ctx) {
  const auto& g = ctx.graph();
  auto form = einsumForm(g, ctx.node());
  auto leafForm = einsumLeaf(g, ctx.node());
  if (!form || !leafForm) { ctx.breakHere("no output axis is carried by the parameter alone"); return; }
  ValueId weight = form->tensors.at(leafForm->operand);
  auto p = paramOperand(g, weight, int64_t(form->operands.at(leafForm->operand).find(leafForm->letter)));
  if (!p) { ctx.breakHere("its parameter operand cannot be traced to a parameter"); return; }
  auto outAxis = carriedAxis(*form, leafForm->operand, leafForm->letter);
  Leaf leaf;
  leaf.kind = LeafKind::Matmul;
  leaf.output = ctx.node().outputs.at(0);
  leaf.axes = AxisSet::of({outAxis});
  leaf.actions.push_back({p->param, p->paramAxis, 1});
  // The parameter reaches einsum through its operand list: the list is part of the leaf, so
  // that read belongs to it (and is not taken for another reader of the parameter).
  leaf.chain = p->chain;
  leaf.chain.push_back(form->list);
  auto id = ctx.addLeaf(std::move(leaf));
  ctx.set(0, MeanZeroFact::meanZero(AxisSet::of({outAxis}), {id}, ctx.rule()));
}

bool einsumHasParameterLeaf(const Graph& g, NodeId node) { return einsumLeaf(g, g.node(node)).has_value(); }

bool matmulHasParameterOperand(const Graph& g, NodeId node) {
  const auto& n = g.node(node);
  return n.inputs.size() >= 2 && (isParamOperand(g, n.inputs.at(1)) || isParamOperand(g, n.inputs.at(0)));
}

}  // namespace

void addLeafRules(std::vector<Rule>& rules) {
  FamilyTable t(rules, RuleFamily::Leaf);
  // linear(x, W, b), W [out, in].
  //   mean-zero: a leaf, mean-zero along the last axis once W is centered over dim 0 and b over
  //              its only axis (sum_j y_j = sum_j (x W_j + b_j) = 0 for every x).
  //   shift:     unsafe: a change of x changes y by x' W^T, not a constant.
  t.add("linear", {"aten::linear"},
        "y = x W^T + b with W [out,in]: centering W over dim 0 (per input column) and b makes y "
        "mean-zero along its last axis for every x", linearMz, unsafeShift);
  // addmm(b, x, W), W [in, out] (GPT-2 Conv1D).
  //   mean-zero: a leaf along axis 1 once W is centered over dim 1 and b too; no tensor bias breaks.
  //   shift:     unsafe.
  t.add("addmm", {"aten::addmm"},
        "y = b + x W with W [in,out] (GPT-2 Conv1D): centering W over dim 1 and b makes y mean-zero "
        "along its last axis", addmmMz, unsafeShift);
  // matmul/mm/bmm with a parameter operand (through t/transpose/permute/casts).
  //   mean-zero: x @ W: a leaf along the last axis (W centered along the axis that becomes it);
  //              W @ x: a leaf along the second-to-last axis (W centered along its rows).
  //   shift:     unsafe. Applies only when an operand is a parameter (else attention-weighted-sum).
  t.add("matmul-parameter", {"aten::matmul", "aten::mm", "aten::bmm"},
        "x @ W where W is a parameter (through t/transpose/permute): center W along the axis that "
        "becomes the output's last axis (or W @ x: along the rows)", matmulParamMz, unsafeShift,
        matmulHasParameterOperand);
  // conv*/convolution/conv_transpose*, _convolution_mode (a string padding such as "same":
  // ConvMixer; its groups are at the same slot as conv2d's).
  //   mean-zero: a leaf along the channel axis 1 (weight centered over output channels within each
  //              group, and the bias); depthwise convolutions (one output per group) break.
  //   shift:     unsafe.
  t.add("convolution",
        {"aten::conv1d", "aten::conv2d", "aten::conv3d", "aten::_convolution", "aten::convolution",
         "aten::conv_transpose1d", "aten::conv_transpose2d", "aten::conv_transpose3d",
         "aten::_convolution_mode"},
        "a convolution is linear in its input: centering the weight over output channels within "
        "each group, and the bias, makes the output mean-zero along the channel axis; depthwise "
        "convolutions (one output per group) cannot be centered", convMz, unsafeShift);
  // _native_multi_head_attention(q, k, v, E, H, qkv_w, qkv_b, proj_w, proj_b, ...).
  //   mean-zero: output 0 is a leaf like a linear through (proj_w, proj_b); output 1 (attention
  //              weights) is broken: positive.
  //   shift:     unsafe.
  t.add("multi-head-attention", {"aten::_native_multi_head_attention"},
        "nn.MultiheadAttention's fused inference op ends in its output projection (proj_weight "
        "[E,E], proj_bias): centering them like a linear makes the output mean-zero", nativeMhaMz,
        unsafeShift);
  // einsum(eq, [x, W]) with W a parameter (through t/transpose/permute/casts).
  //   mean-zero: a leaf along an output axis whose subscript only W carries (not summed, not in
  //              x): W centered along that axis makes every output row along it sum to zero.
  //   shift:     unsafe. Applies only to that form (else the einsum rule).
  t.add("einsum-parameter", {"aten::einsum"},
        "einsum with one parameter operand is a linear map of the other: centering the parameter "
        "along an axis only it carries into the output makes the output mean-zero along that axis",
        einsumParameterMz, unsafeShift, einsumHasParameterLeaf);
  // embedding(table, ids).
  //   mean-zero: a leaf along the last axis once every row of the table is centered over dim 1.
  //   shift:     unsafe (a change of the ids would be seen; ids are integers in practice).
  t.add("embedding", {"aten::embedding"},
        "a lookup is a linear map of a one-hot vector: centering each row of the table over its "
        "features makes every looked-up row mean-zero", embeddingMz, unsafeShift);
  // A parameter read (GetAttr) or tensor constant.
  //   mean-zero: a leaf along its last axis of size > 1 (centered along it); a non-parameter
  //              constant tensor is broken; non-tensors get no fact.
  //   shift:     ignored: it has no tensor input.
  t.add("parameter", {"prim::GetAttr", "prim::Constant"},
        "a parameter or constant tensor entering the sum directly (class token, position table, "
        "bias added on its own) is centered along its last non-broadcast axis", parameterMz, ignoreShift);
  // x - x.mean(dims, keepdim=True) (alpha 1).
  //   mean-zero: a leaf along dims with nothing to center.
  //   shift:     as add/sub (a shift of x passes, widened along broadcast axes). Applies only to
  //              that pattern (else add-sub).
  t.add("mean-subtraction", {"aten::sub"},
        "x - x.mean(dims, keepdim=True) is mean-zero along dims by construction; nothing to center",
        meanSubtractionMz, addSubShift, isMeanSubtraction);
}

}  // namespace foldnorm::rules
