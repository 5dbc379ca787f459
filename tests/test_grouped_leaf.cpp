// A grouped conv centered within its groups (issue 13, timm's PiT pooling) makes its output
// mean-zero over the channels, but changes each group by its own amount: a LayerNorm over the
// channels does not absorb that change, so the LN must be kept, blamed on the grouped conv.
#include <catch2/catch.hpp>

#include "helpers.h"
#include "rule_oracle.h"

using namespace foldnorm;
using foldnorm::test::analyzeIr;
using foldnorm::test::layerNorm;

TEST_CASE("a LayerNorm after a conv centered within groups is kept: each group shifts differently",
          "[analysis][leaf][grouped]") {
  // conv2d(img [1,4,3,3], w [8,2,1,1], groups 2) -> [1,8,3,3] -> channels last -> LN(8).
  auto a = analyzeIr({"graph(%img : Tensor, %w : Tensor, %b : Tensor, %ln_w : Tensor, %ln_b : Tensor):\n"
                      "  %two : int = prim::Constant[value=2]()\n"
                      "  %s : int[] = prim::Constant[value=[1, 1]]()\n"
                      "  %p : int[] = prim::Constant[value=[0, 0]]()\n"
                      "  %cv : Tensor = aten::conv2d(%img, %w, %b, %s, %p, %s, %two)\n"
                      "  %perm : int[] = prim::Constant[value=[0, 2, 3, 1]]()\n"
                      "  %y : Tensor = aten::permute(%cv, %perm)\n" +
                          layerNorm("y", "z", 8) + "  return (%z)\n",
                      {parseInputSpec("1x4x3x3")},
                      {{"w", parseInputSpec("8x2x1x1")}, {"b", parseInputSpec("8")},
                       {"ln_w", parseInputSpec("8")}, {"ln_b", parseInputSpec("8")}}});
  const auto& g = a.model.graph;
  REQUIRE(a.result.layerNorms.size() == 1);
  INFO(a.ln(0).explanation);
  CHECK_FALSE(a.ln(0).foldable);
  CHECK(a.ln(0).explanation.find("convolution") != std::string::npos);
  // The LN's input is mean-zero once the conv is centered within its groups ...
  ValueId lnIn = g.node(a.ln(0).info.node).inputs.at(0);
  const auto& fact = a.result.facts.at(lnIn);
  REQUIRE(fact.isMeanZero());
  CHECK(test::relativeMean(test::value64(a, lnIn, fact.leaves), AxisSet::of({3})) < 1e-12);
  // ... but centering changes the LN's output (the per-group change is not absorbed), in float64.
  auto out = g.modelOutputs().at(0);
  auto before = test::value64(a, out, {});
  auto after = test::value64(a, out, fact.leaves);
  CHECK((before - after).abs().max().item<double>() > 1e-3 * before.abs().max().item<double>());
}
