// No input may crash the analysis (issue 13: HF SwinModel made `foldnorm analyze` die with
// SIGSEGV in the scale rule). Every rule of the registry, for every op it claims, runs on
// degenerate nodes built directly as a Graph: too few or too many operands, rank-0 tensors,
// unrecorded shapes, broadcast ranks that do not match the output, dims out of range or
// negative, non-permutations, facts with axes past the rank. Nothing may throw or crash; every
// broken fact and every seen shift is named.
#include <catch2/catch.hpp>

#include <functional>
#include <optional>

#include "foldnorm/analysis/analysis.h"
#include "foldnorm/analysis/rules.h"

using namespace foldnorm;

namespace {

/// One operand of a degenerate node.
struct Operand {
  ValueKind kind = ValueKind::Tensor;
  std::optional<std::vector<int64_t>> shape;  // tensors: nullopt = not recorded
  std::optional<ConstantValue> constant;
};

Operand tensor(std::optional<std::vector<int64_t>> shape) { return {ValueKind::Tensor, std::move(shape), {}}; }
Operand intConst(int64_t v) { return {ValueKind::Int, {}, ConstantValue(v)}; }
Operand intList(std::vector<int64_t> v) { return {ValueKind::IntList, {}, ConstantValue(std::move(v))}; }
Operand none() { return {ValueKind::None, {}, ConstantValue(std::monostate{})}; }
Operand boolConst(bool v) { return {ValueKind::Bool, {}, ConstantValue(v)}; }
Operand floatConst(double v) { return {ValueKind::Float, {}, ConstantValue(v)}; }

/// A graph holding one node of `op` whose operands come from a prim::Param node (tensors) or
/// prim::Constant nodes (constants); its outputs get `outputs` shapes.
struct Degenerate {
  Graph g;
  NodeId node = kNone;
};

std::unique_ptr<Degenerate> build(const std::string& op, const std::vector<Operand>& operands,
                                  const std::vector<std::optional<std::vector<int64_t>>>& outputs) {
  auto d = std::make_unique<Degenerate>();
  auto& g = d->g;
  auto param = g.addNode("prim::Param");
  g.setGraphInputNode(param);
  std::vector<ValueId> ins;
  for (std::size_t i = 0; i < operands.size(); ++i) {
    const auto& o = operands[i];
    NodeId producer = o.constant ? g.addNode("prim::Constant") : param;
    auto v = g.addOutput(producer, "in" + std::to_string(i), o.kind);
    if (o.shape) g.value(v).tensor = TensorInfo{*o.shape, "float32"};
    g.value(v).constant = o.constant;
    ins.push_back(v);
  }
  d->node = g.addNode(op);
  for (auto v : ins) g.addInput(d->node, v);
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    auto v = g.addOutput(d->node, "out" + std::to_string(i), ValueKind::Tensor);
    if (outputs[i]) g.value(v).tensor = TensorInfo{*outputs[i], "float32"};
  }
  auto ret = g.addNode("prim::Return");
  g.setReturnNode(ret);
  if (!outputs.empty()) g.addInput(ret, g.node(d->node).outputs.at(0));
  return d;
}

/// The operand lists every op is tried with: each slot filled from one palette entry, then
/// mixed lists. Short lists miss operands, long ones have extra.
std::vector<std::vector<Operand>> operandLists() {
  const std::vector<Operand> palette = {
      tensor(std::vector<int64_t>{}),          // rank 0
      tensor(std::nullopt),                    // shape not recorded
      tensor(std::vector<int64_t>{2, 1, 3, 5}), // rank 4 (higher than some outputs)
      tensor(std::vector<int64_t>{7}),         // rank 1
      intConst(99), intConst(-99), intConst(0),
      intList({99, -7}), intList({}), intList({0, 0, 1}), intList({5, 4, 3, 2, 1, 0, -1}),
      none(), boolConst(true), floatConst(0.5)};
  std::vector<std::vector<Operand>> lists;
  for (std::size_t count = 0; count <= 9; ++count)
    for (const auto& p : palette) lists.emplace_back(count, p);
  // Mixed: a tensor first, then dims and lists of every kind.
  for (const auto& first : {palette[0], palette[1], palette[2]})
    for (std::size_t k = 4; k < palette.size(); ++k) {
      std::vector<Operand> l{first, palette[k], palette[(k + 1) % palette.size()], palette[2], palette[k]};
      for (std::size_t extra = 0; extra < 5; ++extra) l.push_back(palette[(k + extra) % palette.size()]);
      lists.push_back(l);
    }
  return lists;
}

const std::vector<std::vector<std::optional<std::vector<int64_t>>>> kOutputShapes = {
    {}, {std::nullopt}, {std::vector<int64_t>{}}, {std::vector<int64_t>{2, 3, 5}},
    {std::vector<int64_t>{2, 3, 5}, std::nullopt}};

/// Input facts: mean-zero along the last axis (or along axes past every rank), or broken.
std::vector<MeanZeroFact> factsFor(const Graph& g, int variant) {
  std::vector<MeanZeroFact> facts(g.valueCount());
  for (const auto& v : g.values()) {
    if (v.kind != ValueKind::Tensor || v.producer == kNone || g.node(v.producer).kind == "prim::Return") continue;
    auto rank = v.tensor ? v.tensor->rank() : -1;
    if (variant == 0 && rank >= 1) facts[v.id] = MeanZeroFact::meanZero(AxisSet::of({rank - 1}), {0}, "test");
    else if (variant == 1) facts[v.id] = MeanZeroFact::meanZero(AxisSet::of({0, 3, 9, 63}), {0}, "test");
    else facts[v.id] = MeanZeroFact::broken(v.producer, "given", "test");
  }
  return facts;
}

/// Runs both transfer functions of `rule` on the node; returns a failure description or "".
std::string exercise(const Rule& rule, const Degenerate& d) {
  const auto& g = d.g;
  for (int variant = 0; variant < 3; ++variant) {
    auto facts = factsFor(g, variant);
    std::vector<Leaf> leaves(1);
    MeanZeroContext ctx(g, d.node, facts, leaves, rule.name);
    try {
      rule.meanZero(ctx);
    } catch (const std::exception& e) {
      return "meanZero threw: " + std::string(e.what());
    }
    for (auto o : g.node(d.node).outputs)
      if (facts[o].state == MeanZeroFact::State::Broken && facts[o].reason.empty()) return "a broken fact without a reason";
    for (std::size_t slot = 0; slot < g.node(d.node).inputs.size(); ++slot)
      for (auto axes : {AxisSet::of({0}), AxisSet::of({2}), AxisSet::of({0, 1, 2, 3, 40})}) {
        ShiftOutcome outcome;
        try {
          outcome = rule.shift(ShiftInput{g, d.node, slot, axes});
        } catch (const std::exception& e) {
          return "shift threw: " + std::string(e.what());
        }
        if (outcome.kind == ShiftOutcome::Kind::Unsafe && outcome.why.empty()) return "an unsafe shift without a reason";
        for (const auto& [v, outAxes] : outcome.outputs) {
          const auto& outs = g.node(d.node).outputs;
          if (std::find(outs.begin(), outs.end(), v) == outs.end()) return "a shift passed to a value that is no output";
        }
      }
    try {
      (void)rule.appliesTo(g, d.node);
    } catch (const std::exception& e) {
      return "matches threw: " + std::string(e.what());
    }
  }
  return "";
}

}  // namespace

TEST_CASE("every rule survives degenerate nodes: no throw, no crash, every break named", "[analysis][rules][robust]") {
  auto lists = operandLists();
  std::vector<const Rule*> rules;
  for (const auto& r : ruleRegistry()) rules.push_back(&r);
  rules.push_back(&fallbackRule());
  std::size_t runs = 0;
  for (const auto* rule : rules) {
    auto ops = rule->ops.empty() ? std::vector<std::string>{"aten::frobnicate"} : rule->ops;
    for (const auto& op : ops)
      for (const auto& operands : lists)
        for (const auto& outputs : kOutputShapes) {
          auto d = build(op, operands, outputs);
          auto failure = exercise(*rule, *d);
          ++runs;
          if (!failure.empty()) FAIL(rule->name << " on " << op << " with " << operands.size() << " operands, "
                                                << outputs.size() << " outputs: " << failure);
        }
  }
  CHECK(runs > 10000);
}

TEST_CASE("the scale rule on a value of unrecorded rank times a rank-4 mask breaks, named (HF Swin SIGSEGV)",
          "[analysis][rules][robust]") {
  // x has a mean-zero fact but no recorded shape, so aligning its axes into the output went past
  // every rank, and constantAlong read the mask's shape out of range.
  auto d = build("aten::mul", {tensor(std::nullopt), tensor(std::vector<int64_t>{1, 4, 1, 6})},
                 {std::vector<int64_t>{2, 4, 6, 6}});
  std::vector<MeanZeroFact> facts(d->g.valueCount());
  const auto& n = d->g.node(d->node);
  facts[n.inputs[0]] = MeanZeroFact::meanZero(AxisSet::of({3}), {0}, "test");
  facts[n.inputs[1]] = MeanZeroFact::broken(kNone, "given", "test");
  std::vector<Leaf> leaves(1);
  const auto& rule = ruleFor(d->g, d->node);
  REQUIRE(rule.name == "scale");
  MeanZeroContext ctx(d->g, d->node, facts, leaves, rule.name);
  rule.meanZero(ctx);
  const auto& out = facts[n.outputs[0]];
  CHECK(out.state == MeanZeroFact::State::Broken);
  CHECK_THAT(out.reason, Catch::Contains("varies along the mean-zero axes"));
  auto shift = rule.shift(ShiftInput{d->g, d->node, 0, AxisSet::of({3})});
  CHECK(shift.kind == ShiftOutcome::Kind::Unsafe);
}

TEST_CASE("the solver on a graph of degenerate nodes answers with named reasons", "[analysis][robust]") {
  // An LN whose input comes from a reshape with no recorded shapes, after a mul with a mask of
  // another rank: analysed end to end without a crash, not foldable, and the reason says why.
  Graph g;
  auto param = g.addNode("prim::Param");
  g.setGraphInputNode(param);
  auto x = g.addOutput(param, "x", ValueKind::Tensor);
  g.value(x).tensor = TensorInfo{{2, 3, 8}, "float32"};
  auto mask = g.addOutput(param, "mask", ValueKind::Tensor);
  g.value(mask).tensor = TensorInfo{{1, 1, 2, 3, 8}, "float32"};
  auto mul = g.addNode("aten::mul");
  g.addInput(mul, x);
  g.addInput(mul, mask);
  auto m = g.addOutput(mul, "m", ValueKind::Tensor);  // shape not recorded
  auto shapeNode = g.addNode("prim::Constant");
  auto shape = g.addOutput(shapeNode, "shape", ValueKind::IntList);
  g.value(shape).constant = ConstantValue(std::vector<int64_t>{8});
  auto noneValue = g.addOutput(shapeNode, "none", ValueKind::None);
  g.value(noneValue).constant = ConstantValue(std::monostate{});
  auto epsValue = g.addOutput(shapeNode, "eps", ValueKind::Float);
  g.value(epsValue).constant = ConstantValue(1e-5);
  auto flag = g.addOutput(shapeNode, "cudnn", ValueKind::Bool);
  g.value(flag).constant = ConstantValue(false);
  auto ln = g.addNode("aten::layer_norm");
  for (auto v : {m, shape, noneValue, noneValue, epsValue, flag}) g.addInput(ln, v);
  auto out = g.addOutput(ln, "out", ValueKind::Tensor);
  auto ret = g.addNode("prim::Return");
  g.setReturnNode(ret);
  g.addInput(ret, out);
  AnalysisResult r;
  REQUIRE_NOTHROW(r = analyzeFoldability(g));
  REQUIRE(r.layerNorms.size() == 1);
  for (const auto& v : r.layerNorms) {
    CHECK_FALSE(v.foldable);
    CHECK_FALSE(v.explanation.empty());
  }
}

TEST_CASE("shuffles, fold and gather on shapes that do not fit their definition break, named", "[analysis][rules][robust]") {
  // Each node has an input mean-zero along its channels but recorded shapes (or arguments) that
  // the op could not have produced: the rule must not guess a frame from them.
  struct Case {
    std::string op;
    std::vector<Operand> operands;
    std::vector<int64_t> out;
  };
  const std::vector<Case> cases = {
      {"aten::pixel_shuffle", {tensor(std::vector<int64_t>{1, 6, 4, 4}), intConst(2)}, {1, 1, 8, 8}},  // 6 % 4
      {"aten::pixel_shuffle", {tensor(std::vector<int64_t>{1, 8, 4, 4}), intConst(2)}, {1, 2, 8, 8, 1}},  // rank
      {"aten::pixel_unshuffle", {tensor(std::vector<int64_t>{1, 8, 5, 4}), intConst(2)}, {1, 32, 2, 2}},  // 5 % 2
      {"aten::channel_shuffle", {tensor(std::vector<int64_t>{1, 9, 4}), intConst(2)}, {1, 9, 4}},  // 9 % 2
      {"aten::pixel_shuffle", {tensor(std::vector<int64_t>{1, 8, 4, 4}), intConst(0)}, {1, 8, 4, 4}},  // r = 0
      {"aten::col2im", {tensor(std::vector<int64_t>{1, 30, 9}), intList({4, 4}), intList({2, 2}), intList({1, 1}),
                        intList({0, 0}), intList({1, 1})}, {1, 8, 4, 4}},  // 30 != 8 * 4
      {"aten::col2im", {tensor(std::vector<int64_t>{1, 32, 9}), intList({4, 4}), intList({2}), intList({1, 1}),
                        intList({0, 0}), intList({1, 1})}, {1, 8, 4, 4}},  // one kernel dim
      {"aten::im2col", {tensor(std::vector<int64_t>{1, 8, 4, 4}), intList({2, 2}), intList({1, 1}), intList({0, 0}),
                        intList({1, 1})}, {1, 30, 9}},
      {"aten::gather", {tensor(std::vector<int64_t>{10, 8}), intConst(5), tensor(std::vector<int64_t>{3, 8}), boolConst(false)}, {3, 8}},
      {"aten::take_along_dim", {tensor(std::vector<int64_t>{10, 8}), tensor(std::vector<int64_t>{3, 1, 1}), intConst(0)}, {3, 8, 1}},
  };
  for (const auto& c : cases) {
    INFO(c.op << " -> " << c.out.size() << " dims");
    auto d = build(c.op, c.operands, {c.out});
    const auto& n = d->g.node(d->node);
    std::vector<MeanZeroFact> facts(d->g.valueCount());
    facts[n.inputs[0]] = MeanZeroFact::meanZero(AxisSet::of({1}), {0}, "test");
    std::vector<Leaf> leaves(1);
    const auto& rule = ruleFor(d->g, d->node);
    MeanZeroContext ctx(d->g, d->node, facts, leaves, rule.name);
    rule.meanZero(ctx);
    const auto& out = facts[n.outputs[0]];
    CHECK(out.state == MeanZeroFact::State::Broken);
    CHECK_FALSE(out.reason.empty());
    auto shift = rule.shift(ShiftInput{d->g, d->node, 0, AxisSet::of({1})});
    CHECK(shift.kind == ShiftOutcome::Kind::Unsafe);
    CHECK_FALSE(shift.why.empty());
  }
}
