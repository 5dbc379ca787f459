// The scaled leaf (docs/method.md section 7, issue 14): a weight leaf followed by a per-channel scale,
// y = gamma * (W h + b) (LayerScale in BEiT, DINOv2, DeiT-III, CaiT, ConvNeXt). Centering W and b
// alone leaves gamma * (W h + b) with a non-zero mean; centering the scaled map instead,
//   W'[c,:] = W[c,:] - mean_k(gamma_k W[k,:]) / gamma_c,   b'_c = b_c - mean_k(gamma_k b_k) / gamma_c,
// gives gamma * (W' h + b') = y - mean_c(y): mean-zero along the channel axis, and changed by a
// per-row constant, which the shift walk follows exactly as for a plain leaf.
//
// The bias may be its own op, before or after the scale, as traces show it:
//  - gamma * ((W h) + b), b a separate parameter added by aten::add (a linear without bias or a
//    matmul, then + b; a conv without bias, then + b of shape [C,1,1]): b is centered like the
//    weight op's own bias, with the scale (b'_c = b_c - mean_k(gamma_k b_k) / gamma_c): this
//    rule's leaf covers both, and the plan names both;
//  - (W h) * gamma + b: the product is this rule's leaf (W scaled-centered), and b, entering the
//    sum after it, is the parameter rule's leaf (b' = b - mean(b)).
//
// It belongs to the leaf family (it is a leaf: its output is made mean-zero by centering
// parameters) and lives in its own file so the plain leaves and this pattern change apart.
#include <algorithm>
#include <cmath>
#include <set>

#include "foldnorm/common/dtype.h"
#include "rule_helpers.h"

namespace foldnorm::rules {
namespace {

const char* kScaledLeaf = "scaled-leaf";

/// The rule the node would get without this one (the next applicable rule of its op).
const Rule& nextRule(const Graph& g, NodeId node) {
  bool after = false;
  for (const auto& r : ruleRegistry()) {
    if (r.name == kScaledLeaf) { after = true; continue; }
    if (!after) continue;
    const auto& kind = g.node(node).kind;
    if (std::find(r.ops.begin(), r.ops.end(), kind) != r.ops.end() && r.appliesTo(g, node)) return r;
  }
  return fallbackRule();
}

/// A parameter read through reshapes and casts (gamma.reshape(1, -1, 1, 1)), with the nodes on
/// the way; tensor constants only when `constants` (a bias may be one: the plan centers it; a
/// scale must be an attribute, which the fold reads from the model).
struct ReshapedParameter {
  ParamId param = kNone;
  std::vector<NodeId> chain;  // from the reader back towards the parameter read
};

std::optional<ReshapedParameter> reshapedParameter(const Graph& g, ValueId v, bool constants) {
  static const std::set<std::string> pass{"aten::view", "aten::reshape", "aten::unsqueeze", "aten::to",
                                          "aten::contiguous", "aten::detach", "aten::type_as"};
  ReshapedParameter out;
  for (int guard = 0; guard < 8; ++guard) {
    const auto& val = g.value(v);
    if (val.kind != ValueKind::Tensor) return std::nullopt;
    if (val.param != kNone) {
      if (g.parameter(val.param).isConstant && !constants) return std::nullopt;
      out.param = val.param;
      return out;
    }
    if (val.producer == kNone) return std::nullopt;
    const auto& n = g.node(val.producer);
    if (!pass.count(n.kind) || n.inputs.empty()) return std::nullopt;
    out.chain.push_back(n.id);
    v = n.inputs.at(0);
  }
  return std::nullopt;
}

std::optional<ParamId> scaleParameter(const Graph& g, ValueId v) {
  auto p = reshapedParameter(g, v, false);
  return p ? std::optional(p->param) : std::nullopt;
}

/// The weight op whose output reaches the product, and the separate biases added on the way.
struct ScaledChain {
  NodeId producer = kNone;
  std::vector<NodeId> biasNodes;  // the adds of separate biases and the reshapes of their operands
  std::vector<ParamId> biases;
};

/// The weight op whose output reaches `v` through layout ops, eval dropout and additions of a
/// parameter (a bias as its own op), each value on the way read only there: scaled centering
/// changes those values by a per-channel amount, so nothing else may read them.
std::optional<ScaledChain> scaledProducer(const Graph& g, ValueId v) {
  static const std::set<std::string> pass{"aten::dropout", "aten::feature_dropout", "aten::view", "aten::reshape",
                                          "aten::permute", "aten::transpose", "aten::contiguous", "aten::clone",
                                          "aten::to", "aten::flatten", "aten::unflatten", "aten::detach"};
  static const std::set<std::string> weightOps{
      "aten::linear", "aten::addmm", "aten::matmul", "aten::mm", "aten::bmm", "aten::conv1d", "aten::conv2d",
      "aten::conv3d", "aten::_convolution", "aten::convolution", "aten::_native_multi_head_attention"};
  static const std::set<std::string> sums{"aten::add", "aten::sub"};
  ScaledChain chain;
  for (int guard = 0; guard < 16; ++guard) {
    const auto& val = g.value(v);
    if (val.producer == kNone || val.uses.size() != 1) return std::nullopt;
    const auto& n = g.node(val.producer);
    if (weightOps.count(n.kind)) {
      chain.producer = n.id;
      return chain;
    }
    if (sums.count(n.kind) && n.inputs.size() >= 2 && isTensor(g, n.inputs[0]) && isTensor(g, n.inputs[1]) &&
        (n.inputs.size() < 3 || g.constantDouble(n.inputs[2]))) {
      // (W h) + b or (W h) - b: one operand a parameter, the other the way on.
      std::optional<std::size_t> slot;
      for (std::size_t s = 0; s < 2 && !slot; ++s)
        if (auto b = reshapedParameter(g, n.inputs[1 - s], true); b && !isParamOperand(g, n.inputs[s])) {
          chain.biases.push_back(b->param);
          chain.biasNodes.push_back(n.id);
          chain.biasNodes.insert(chain.biasNodes.end(), b->chain.begin(), b->chain.end());
          slot = s;
        }
      if (!slot) return std::nullopt;
      v = n.inputs.at(*slot);
      continue;
    }
    if (!pass.count(n.kind) || n.inputs.empty()) return std::nullopt;
    v = n.inputs.at(0);
  }
  return std::nullopt;
}

/// Operand slot of the scaled value (the other is the scale), when the node has the pattern.
std::optional<std::size_t> scaledSlot(const Graph& g, NodeId node) {
  const auto& n = g.node(node);
  if (n.inputs.size() != 2 || !isTensor(g, n.inputs[0]) || !isTensor(g, n.inputs[1])) return std::nullopt;
  for (std::size_t s = 0; s < 2; ++s)
    if (scaleParameter(g, n.inputs[1 - s]) && scaledProducer(g, n.inputs[s])) return s;
  return std::nullopt;
}

bool isScaledLeaf(const Graph& g, NodeId node) { return scaledSlot(g, node).has_value(); }

void scaledLeafMz(MeanZeroContext& ctx) {
  const auto& g = ctx.graph();
  const auto& n = ctx.node();
  // Called for nodes its predicate accepted; a caller that did not ask (a robustness test) gets
  // the next rule's answer rather than a read of an empty optional.
  auto slot = scaledSlot(g, ctx.nodeId());
  auto found = slot ? scaledProducer(g, n.inputs.at(*slot)) : std::nullopt;
  if (!found) { ctx.delegateTo(nextRule(g, ctx.nodeId())); return; }
  ValueId x = n.inputs.at(*slot), scaleOperand = n.inputs.at(1 - *slot);
  const auto& f = ctx.fact(x);
  const auto& chain = *found;
  auto producer = chain.producer;
  auto out = rankOf(g, n.outputs.at(0));
  // The product must be of the weight leaf and its separate biases alone, mean-zero along one
  // axis the scale varies along, with one scale per output channel of that leaf; otherwise the
  // product is an ordinary one (the preserving rule decides).
  if (!f.isMeanZero() || f.factor || out < 0) { ctx.delegateTo(nextRule(g, ctx.nodeId())); return; }
  const Leaf* weight = nullptr;
  std::vector<const Leaf*> biasLeaves;
  bool onlyChain = true;
  for (auto id : f.leaves) {
    const Leaf& l = ctx.leaf(id);
    if (l.node == producer && l.kind != LeafKind::Parameter && !weight) weight = &l;
    else if (l.kind == LeafKind::Parameter && l.actions.size() == 1 &&
             std::count(chain.biases.begin(), chain.biases.end(), l.actions[0].param))
      biasLeaves.push_back(&l);
    else onlyChain = false;
  }
  if (!weight || !onlyChain || biasLeaves.size() != chain.biases.size()) {
    ctx.delegateTo(nextRule(g, ctx.nodeId()));
    return;
  }
  const Leaf& base = *weight;
  auto axes = alignAxes(f.axes, rankOf(g, x), out);
  const auto* outShape = shapeOf(g, n.outputs.at(0));
  const auto* scaleShape = shapeOf(g, scaleOperand);
  bool fits = axes.size() == 1 && outShape && scaleShape && !base.actions.empty();
  int64_t axis = fits ? axes.axes()[0] : -1;
  int64_t channels = fits ? outShape->at(axis) : 0;
  if (fits) {
    // The scale, right-aligned to the output, varies along `axis` only, one entry per channel.
    auto offset = out - int64_t(scaleShape->size());
    for (int64_t i = 0; i < int64_t(scaleShape->size()); ++i)
      if (scaleShape->at(i) != 1 && i + offset != axis) fits = false;
    if (offset < 0 || (axis - offset >= 0 && scaleShape->at(axis - offset) != channels)) fits = false;
    for (const auto* l : biasLeaves)  // a separate bias: one entry per channel
      for (const auto& a : l->actions) {
        int64_t entries = 1;
        for (auto d : g.parameter(a.param).shape) entries *= d;
        if (entries != channels) fits = false;
      }
    for (const auto* l : biasLeaves)
      for (const auto& a : l->actions) {
        const auto& shape = g.parameter(a.param).shape;
        if (a.groups != 1 || a.axis >= int64_t(shape.size()) || shape[a.axis] != channels) fits = false;
      }
    for (const auto& a : base.actions) {
      const auto& shape = g.parameter(a.param).shape;
      if (a.groups != 1 || a.axis >= int64_t(shape.size()) || shape[a.axis] != channels) fits = false;
    }
  }
  auto gamma = *scaleParameter(g, scaleOperand);
  const auto& gp = g.parameter(gamma);
  int64_t numel = 1;
  for (auto d : gp.shape) numel *= d;
  if (!fits || numel != channels) { ctx.delegateTo(nextRule(g, ctx.nodeId())); return; }
  // Refusals, with the numbers: a zero entry cannot be divided by; a wide range makes the
  // subtracted mean / gamma_c large for small gamma_c, and rounding W' back to the model dtype
  // loses up to u * max|gamma| / min|gamma| of that channel's relative precision (u the unit
  // roundoff): refused past 1/sqrt(u), where half the dtype's digits would be gone
  // (float32: ratio 4096, float16: 45, bfloat16: 16; docs/design.md, "Beyond the paper").
  std::string what = "the per-channel scale " + gp.path + " after " + g.describeNode(producer);
  if (gp.absMin < 0) { ctx.breakHere(what + " has no recorded values, so it cannot be absorbed"); return; }
  if (gp.absMin == 0) {
    ctx.breakHere(what + " has a zero entry: the scaled centering divides by every gamma_c, so it "
                  "cannot be absorbed (the product breaks the zero mean)");
    return;
  }
  double u = unitRoundoff(gp.dtype);
  double ratio = gp.absMax / gp.absMin, bound = u > 0 ? 1.0 / std::sqrt(u) : 0;
  if (u == 0 || ratio > bound) {
    ctx.breakHere(what + ": max|gamma|/min|gamma| = " + std::to_string(ratio) + " exceeds the bound " +
                  std::to_string(bound) + " (1/sqrt(unit roundoff) of " + gp.dtype +
                  "): absorbing it would round the small channels' weights past half their precision");
    return;
  }
  Leaf leaf = base;
  leaf.output = n.outputs.at(0);
  leaf.axes = AxisSet::of({axis});
  // A separate bias is centered with the scale like the weight op's own (its add and reshapes
  // join the chain: the reads there are the leaf's, see leafParameterUses).
  for (const auto* l : biasLeaves) leaf.actions.insert(leaf.actions.end(), l->actions.begin(), l->actions.end());
  leaf.chain.insert(leaf.chain.end(), chain.biasNodes.begin(), chain.biasNodes.end());
  for (auto& a : leaf.actions) a.scale = gamma;
  leaf.scale = gamma;
  leaf.scaleNode = ctx.nodeId();
  leaf.scaledFrom = base.id;
  auto id = ctx.addLeaf(std::move(leaf));
  ctx.set(0, MeanZeroFact::meanZero(AxisSet::of({axis}), {id}, ctx.rule()));
}

ShiftOutcome scaledLeafShift(const ShiftInput& in) { return nextRule(in.graph, in.node).shift(in); }

}  // namespace

void addScaledLeafRules(std::vector<Rule>& rules) {
  FamilyTable t(rules, RuleFamily::Leaf);
  // mul(W h + b, gamma) (either operand order; gamma a parameter through reshapes, varying only
  // along the leaf's axis; the weight op's output reaching the product through layout ops, eval
  // dropout or the addition of a separate bias parameter, read nowhere else).
  //   mean-zero: a leaf along that axis once W and b are scaled-centered (every gamma_c != 0 and
  //              max|gamma|/min|gamma| within 1/sqrt(u) of gamma's dtype; otherwise broken with
  //              the numbers); a product whose facts do not fit is the next rule's (scale).
  //   shift:     the next rule's (a shift reaching the product from upstream is an ordinary one).
  t.add(kScaledLeaf, {"aten::mul", "aten::mul_"},
        "gamma * (W h + b) with a per-channel parameter gamma (b the op's own bias or added on its "
        "own): centering the scaled map (W'[c] = W[c] - mean_k(gamma_k W[k]) / gamma_c, b likewise) "
        "makes the product mean-zero along the channels; refused when some gamma_c is 0 or "
        "max|gamma|/min|gamma| exceeds 1/sqrt(u) of its dtype",
        scaledLeafMz, scaledLeafShift, isScaledLeaf);
}

}  // namespace foldnorm::rules
