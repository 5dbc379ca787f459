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
         "aten::max_pool2d", "aten::max", "aten::min",
         // in-place forms and the rest of torch.nn's activations: the same functions
         "aten::silu_", "aten::sigmoid_", "aten::hardswish_", "aten::hardsigmoid_", "aten::hardtanh_",
         "aten::elu_", "aten::leaky_relu_", "aten::clamp_", "aten::clamp_min_", "aten::clamp_max_",
         "aten::mish_", "aten::exp_", "aten::sqrt_", "aten::pow_", "aten::prelu", "aten::selu",
         "aten::celu", "aten::glu", "aten::log_sigmoid", "aten::log1p", "aten::expm1", "aten::atan",
         "aten::amax", "aten::amin", "aten::max_pool1d", "aten::max_pool3d", "aten::adaptive_max_pool1d", "aten::adaptive_max_pool2d",
         // rounding and integer arithmetic on values
         "aten::ceil", "aten::floor", "aten::round", "aten::trunc", "aten::floor_divide",
         "aten::remainder", "aten::fmod",
         // weight normalization (g * v / ||v||) and recurrent layers: nonlinear in their inputs
         "aten::_weight_norm", "aten::lstm", "aten::gru", "aten::rnn_tanh", "aten::rnn_relu"},
        "nonlinear (or not yet proven linear) ops do not preserve a zero mean and see any change "
        "of their input", breaksAs("nonlinear"), unsafeShift);
  // Normalizations other than LayerNorm.
  //   mean-zero: broken (an affine output). shift: seen (they do not absorb in general).
  t.add("normalization",
        {"aten::batch_norm", "aten::instance_norm", "aten::rms_norm", "aten::_fused_rms_norm",
         "foldnorm::rms_norm"},
        "normalizations other than LayerNorm neither output nor (in general) absorb a zero mean",
        breaksAs("a normalization with an affine output"), unsafeShift);
  // Norms and spreads of a tensor (torch.linalg.vector_norm, F.normalize's divisor, std, var).
  //   mean-zero: broken (a norm is positive). shift: seen (||x + c|| != ||x||).
  //   (x / ||x|| along the mean-zero axes keeps the zero mean by the scale rule: the norm has
  //   size 1 there.)
  t.add("vector-norm",
        {"aten::linalg_vector_norm", "aten::norm", "aten::linalg_norm", "aten::frobenius_norm",
         "aten::std", "aten::var", "aten::std_mean", "aten::var_mean"},
        "norms and spreads are nonlinear reductions: not mean-zero, and changed by a shift",
        breaksAs("a norm of its input (nonlinear)"), unsafeShift);
  // Comparisons and logic (masks from values: padding masks, causal masks built with ge/lt).
  //   mean-zero: broken (booleans). shift: seen (a shift moves values across the threshold).
  t.add("comparison",
        {"aten::eq", "aten::ne", "aten::lt", "aten::le", "aten::gt", "aten::ge", "aten::__and__",
         "aten::__or__", "aten::__xor__", "aten::bitwise_not", "aten::bitwise_and", "aten::bitwise_or",
         "aten::logical_not", "aten::logical_and", "aten::logical_or", "aten::isnan", "aten::isinf",
         "aten::any", "aten::all"},
        "comparisons and logical ops give booleans, which are not mean-zero; a shift of their input "
        "changes which side of the threshold a value is on", breaksAs("a comparison"), unsafeShift);
  // In-place writes into a tensor (x[idx] = y traces as a view then copy_; zero_, fill_,
  // index_put_). The graph keeps reading the written tensor's base as the value from before the
  // write, so no fact about it can be trusted.
  //   mean-zero: broken. shift: seen.
  t.add("in-place-write",
        {"aten::copy_", "aten::fill_", "aten::zero_", "aten::index_put_",
         "aten::masked_scatter_", "aten::scatter_", "aten::index_fill_", "aten::index_copy_"},
        "a write into a tensor (or a view of one) changes values other readers of its base see "
        "without a data edge to them; the analysis does not follow that aliasing",
        breaksAs("an in-place write (aliasing is not followed)"), unsafeShift);
  // Tensors created in the graph.
  //   mean-zero: broken. shift: seen (a shape argument computed from a changed value).
  t.add("creation",
        {"aten::zeros", "aten::ones", "aten::full", "aten::arange", "aten::tril", "aten::triu",
         "aten::empty", "aten::tensor", "aten::rand", "aten::randn", "aten::eye", "aten::linspace",
         "aten::meshgrid", "aten::randint", "aten::randperm", "aten::scalar_tensor"},
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
