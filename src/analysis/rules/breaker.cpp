// Breaker rules: ops that neither keep a zero mean nor let a shift through, listed explicitly so
// the report names them; and the fallback for any op without a rule.
#include "rule_helpers.h"

namespace foldnorm {
namespace rules {
namespace {

/// Every output broken: "<op> is <what>".
MeanZeroFn breaksAs(std::string what) {
  return [what = std::move(what)](MeanZeroContext& ctx) { ctx.breakHere(ctx.node().kind + " is " + what); };
}

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

}  // namespace

void addBreakerRules(std::vector<Rule>& rules) {
  FamilyTable t(rules, RuleFamily::Breaker);
  // Nonlinear ops, and ops not (yet) proven linear.
  //   mean-zero: broken ("<op> is nonlinear").
  //   shift:     seen.
  t.add("nonlinearity",
        {"aten::relu", "aten::relu_", "aten::gelu", "aten::gelu_", "aten::tanh", "aten::tanh_",
         "aten::sigmoid", "aten::silu", "aten::elu", "aten::leaky_relu", "aten::hardswish",
         "aten::hardtanh", "aten::hardsigmoid", "aten::mish", "aten::softplus", "aten::exp",
         "aten::log", "aten::pow", "aten::sqrt", "aten::rsqrt", "aten::abs", "aten::square",
         "aten::erf", "aten::clamp", "aten::clamp_min", "aten::clamp_max", "aten::sin", "aten::cos",
         "aten::maximum", "aten::minimum",
         "aten::reciprocal", "aten::sign",
         "aten::max_pool2d", "aten::max", "aten::min"},
        "nonlinear (or not yet proven linear) ops do not preserve a zero mean and see any change "
        "of their input", breaksAs("nonlinear"), unsafeShift);
  // Normalizations other than LayerNorm.
  //   mean-zero: broken (an affine output). shift: seen (they do not absorb in general).
  t.add("normalization",
        {"aten::batch_norm", "aten::instance_norm", "aten::rms_norm", "aten::_fused_rms_norm",
         "foldnorm::rms_norm"},
        "normalizations other than LayerNorm neither output nor (in general) absorb a zero mean",
        breaksAs("a normalization with an affine output"), unsafeShift);
  // Tensors created in the graph.
  //   mean-zero: broken. shift: seen (a shape argument computed from a changed value).
  t.add("creation",
        {"aten::zeros", "aten::ones", "aten::full", "aten::arange", "aten::tril", "aten::triu",
         "aten::empty", "aten::tensor", "aten::rand", "aten::randn", "aten::eye", "aten::linspace"},
        "tensors created in the graph are not mean-zero", breaksAs("a tensor created in the graph"),
        unsafeShift);
  // Graph inputs.
  //   mean-zero: broken (arbitrary). shift: ignored (nothing flows into them).
  t.add("model-input", {"prim::Param"}, "model inputs are arbitrary", modelInputMz, ignoreShift);
  // The graph's return.
  //   mean-zero: no outputs. shift: seen: the caller reads every returned value.
  t.add("model-output", {"prim::Return"},
        "the caller sees every model output: a changed value there changes the function",
        [](MeanZeroContext&) {}, modelOutputShift);
}

}  // namespace rules

// Any op without a rule.
//   mean-zero: broken, the reason naming the op. shift: seen, named.
const Rule& fallbackRule() {
  static const Rule fallback{"unknown-op", RuleFamily::Breaker, {},
                             "an op without a rule is assumed to break the zero mean and to see "
                             "any change of its input; the reason names it",
                             rules::unknownMz, rules::unknownShift, {}};
  return fallback;
}

}  // namespace foldnorm
