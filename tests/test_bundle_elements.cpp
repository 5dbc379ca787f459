// Tuples and lists built in the graph and taken apart again (issue 13): timm's XCiT patch
// embedding returns (x, (Hp, Wp)) and HF Swin's embeddings return (x, width, height, ...). An
// element taken out of such a bundle is that element: the facts of x reach x, those of a shape
// reach the shape, and a shift of x reaches x alone, not the size arithmetic next to it.
#include <catch2/catch.hpp>

#include "foldnorm/analysis/rules.h"
#include "helpers.h"
#include "rule_oracle.h"

using namespace foldnorm;
using foldnorm::test::analyzeIr;
using foldnorm::test::layerNorm;

namespace {

InputSpec spec(const char* s) { return parseInputSpec(s); }

// y = linear(x) [2,3,8] bundled with its size (a tensor, as traces record sizes) and an int;
// the LN reads y out of the bundle, the size goes through remainder (Swin's padding arithmetic)
// into a second model output.
const char* kSwinLike =
    "graph(%x : Tensor, %w : Tensor, %b : Tensor, %ln_w : Tensor, %ln_b : Tensor):\n"
    "  %one : int = prim::Constant[value=1]()\n"
    "  %four : int = prim::Constant[value=4]()\n"
    "  %y : Tensor = aten::linear(%x, %w, %b)\n"
    "  %n : int = aten::size(%y, %one)\n"
    "  %nt : Tensor = prim::NumToTensor(%n)\n"
    "  %tp : (Tensor, Tensor, int) = prim::TupleConstruct(%y, %nt, %n)\n"
    "  %a : Tensor, %s : Tensor, %k : int = prim::TupleUnpack(%tp)\n"
    "  %r : Tensor = aten::remainder(%s, %four)\n";

test::Analyzed swinLike() {
  return analyzeIr({std::string(kSwinLike) + layerNorm("a", "z", 8) + "  return (%z, %r)\n",
                    {spec("2x3x4")},
                    {{"w", spec("8x4")}, {"b", spec("8")}, {"ln_w", spec("8")}, {"ln_b", spec("8")}}});
}

NodeId firstOf(const Graph& g, const std::string& kind) {
  for (const auto& n : g.nodes())
    if (n.kind == kind) return n.id;
  return kNone;
}

}  // namespace

TEST_CASE("an element unpacked from a tuple built in the graph has that element's facts",
          "[analysis][rules][bundle]") {
  auto a = swinLike();
  const auto& g = a.model.graph;
  auto unpack = firstOf(g, "prim::TupleUnpack");
  REQUIRE(unpack != kNone);
  const auto& x = a.result.facts.at(g.node(unpack).outputs.at(0));
  const auto& size = a.result.facts.at(g.node(unpack).outputs.at(1));
  REQUIRE(x.isMeanZero());
  CHECK(x.axes == AxisSet::of({2}));
  CHECK(size.state == MeanZeroFact::State::Broken);
  // In float64: with the linear centered, the unpacked x is mean-zero along its rows.
  auto value = test::value64(a, g.node(unpack).outputs.at(0), x.leaves);
  CHECK(test::relativeMean(value, x.axes) < 1e-12);
  CHECK(value.abs().max().item<double>() > 1e-3);
}

TEST_CASE("a shift of one bundled element reaches that element only, not the size next to it",
          "[analysis][rules][bundle]") {
  auto a = swinLike();
  const auto& g = a.model.graph;
  REQUIRE(a.result.layerNorms.size() == 1);
  INFO(a.ln(0).explanation);
  CHECK(a.ln(0).foldable);
  auto construct = firstOf(g, "prim::TupleConstruct");
  auto unpack = firstOf(g, "prim::TupleUnpack");
  const auto& rule = ruleFor(g, construct);
  auto outcome = rule.shift(ShiftInput{g, construct, 0, AxisSet::of({2})});
  REQUIRE(outcome.kind == ShiftOutcome::Kind::Passed);
  REQUIRE(outcome.outputs.size() == 1);
  CHECK(outcome.outputs[0].first == g.node(unpack).outputs.at(0));
  // In float64: centering the plan's leaves leaves the remainder output exactly as it was, and
  // the LN's input (the unpacked x) mean-zero.
  auto remainder = g.node(firstOf(g, "aten::remainder")).outputs.at(0);
  auto leaves = a.ln(0).leaves;
  REQUIRE_FALSE(leaves.empty());
  CHECK(test::value64(a, remainder, leaves).equal(test::value64(a, remainder, {})));
  auto lnInput = g.node(unpack).outputs.at(0);
  CHECK(test::relativeMean(test::value64(a, lnInput, leaves), AxisSet::of({2})) < 1e-12);
  // The model's output depends on its input.
  CHECK(test::value64(a, g.modelOutputs().at(0), {}).abs().max().item<double>() > 1e-3);
}

TEST_CASE("a bundle used whole (returned, passed on) carries the shift to all of it",
          "[analysis][rules][bundle]") {
  // The tuple itself is returned: the caller sees every element, so the shift goes to the tuple.
  auto a = analyzeIr({"graph(%x : Tensor, %w : Tensor, %b : Tensor):\n"
                      "  %one : int = prim::Constant[value=1]()\n"
                      "  %y : Tensor = aten::linear(%x, %w, %b)\n"
                      "  %n : int = aten::size(%y, %one)\n"
                      "  %nt : Tensor = prim::NumToTensor(%n)\n"
                      "  %inner : (Tensor, Tensor) = prim::TupleConstruct(%nt, %nt)\n"
                      "  %tp : (Tensor, (Tensor, Tensor)) = prim::TupleConstruct(%y, %inner)\n"
                      "  return (%tp)\n",
                      {spec("2x3x4")},
                      {{"w", spec("8x4")}, {"b", spec("8")}}});
  const auto& g = a.model.graph;
  NodeId outer = kNone;
  for (const auto& n : g.nodes())
    if (n.kind == "prim::TupleConstruct" && n.inputs.size() == 2 &&
        g.value(n.inputs.at(1)).kind == ValueKind::Tuple)
      outer = n.id;
  REQUIRE(outer != kNone);
  auto outcome = ruleFor(g, outer).shift(ShiftInput{g, outer, 0, AxisSet::of({2})});
  REQUIRE(outcome.kind == ShiftOutcome::Kind::Passed);
  REQUIRE(outcome.outputs.size() == 1);
  CHECK(outcome.outputs[0].first == g.node(outer).outputs.at(0));
}
