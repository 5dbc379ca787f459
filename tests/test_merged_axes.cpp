// Merged and split axes (issue 13): MobileViT's unfold merges the channel axis with the batch and
// patch rows ([B,C,H,W] -> [B*C*nh, ph, nw, pw]), transposes, and splits it out again as the
// last axis of [B*P, N, C], where the LayerNorms normalize. The mean-zero fact (and the shift of
// the centered convolution) must survive as a factor of the merged dim; the fold is checked in
// float64 by the fold's own verification, and a reshape that splits C over two dims must not
// be claimed.
#include <catch2/catch.hpp>

#include "foldnorm/analysis/axes.h"
#include "foldnorm/fold/fold.h"
#include "rule_oracle.h"

using namespace foldnorm;
using foldnorm::test::Analyzed;
using foldnorm::test::analyzeIr;
using foldnorm::test::layerNorm;

namespace {

InputSpec spec(const char* s) { return parseInputSpec(s); }

// A 1x1 convolution to C = 4 channels of an 8x8 image, [1,4,8,8], mean-zero along the channels
// once its weight and bias are centered.
const char* kHead =
    "graph(%img : Tensor, %cw : Tensor, %cb : Tensor, %fc__weight : Tensor, %fc__bias : Tensor,\n"
    "      %ln_w : Tensor, %ln_b : Tensor):\n"
    "  %one : int = prim::Constant[value=1]()\n"
    "  %two : int = prim::Constant[value=2]()\n"
    "  %three : int = prim::Constant[value=3]()\n"
    "  %cs : int[] = prim::Constant[value=[1, 1]]()\n"
    "  %cp : int[] = prim::Constant[value=[0, 0]]()\n"
    "  %c : Tensor = aten::conv2d(%img, %cw, %cb, %cs, %cp, %cs, %one)\n";

IrModel model(const std::string& body, int lnDim) {
  return {std::string(kHead) + body,
          {spec("1x3x8x8")},
          {{"cw", spec("4x3x1x1")}, {"cb", spec("4")}, {"fc__weight", spec("4x4")}, {"fc__bias", spec("4")},
           {"ln_w", spec(lnDim == 4 ? "4:float32[0.5,1.5)" : "128:float32[0.5,1.5)")},
           {"ln_b", spec(lnDim == 4 ? "4" : "128")}}};
}

// MobileViT's unfold with 2x2 patches (nh = nw = 4, N = 16, P = 4), then a pre-LN block:
// x -> LN -> linear -> + x -> LN.
const std::string kUnfold =
    "  %s1 : int[] = prim::Constant[value=[16, 2, 4, 2]]()\n"
    "  %p1 : Tensor = aten::reshape(%c, %s1)\n"
    "  %p2 : Tensor = aten::transpose(%p1, %one, %two)\n"
    "  %s2 : int[] = prim::Constant[value=[1, 4, 16, 4]]()\n"
    "  %p3 : Tensor = aten::reshape(%p2, %s2)\n"
    "  %p4 : Tensor = aten::transpose(%p3, %one, %three)\n"
    "  %s3 : int[] = prim::Constant[value=[4, 16, -1]]()\n"
    "  %x : Tensor = aten::reshape(%p4, %s3)\n" +
    layerNorm("x", "z", 4) +
    "  %u : Tensor = aten::linear(%z, %fc__weight, %fc__bias)\n"
    "  %h : Tensor = aten::add(%x, %u, %one)\n" +
    layerNorm("h", "out", 4) + "  return (%out)\n";

ValueId lnInput(const Analyzed& a, std::size_t i) {
  std::size_t seen = 0;
  for (const auto& n : a.model.graph.nodes())
    if (n.kind == "aten::layer_norm" && seen++ == i) return n.inputs.at(0);
  FAIL("no LayerNorm " << i);
  return kNone;
}

}  // namespace

TEST_CASE("MobileViT's unfold keeps the channel mean-zero fact through merge, transpose and split",
          "[analysis][axis][merged]") {
  auto a = analyzeIr(model(kUnfold, 4));
  REQUIRE(a.result.layerNorms.size() == 2);
  CHECK(a.ln(0).foldable);
  CHECK(a.ln(1).foldable);
  CHECK(a.centered() == std::vector<std::string>{"cb", "cw", "fc.bias", "fc.weight"});

  // Between the reshapes C is the factor (i / nh) % C of the merged dim B*C*nh.
  const auto& g = a.model.graph;
  for (const auto& n : g.nodes()) {
    if (n.kind != "aten::transpose" || rankOf(g, n.outputs.at(0)) != 4 || shapeOf(g, n.outputs.at(0))->at(0) != 16)
      continue;
    const auto& f = a.result.facts.at(n.outputs.at(0));
    REQUIRE(f.factor);
    const AxisFactor channels{0, 4, 4};
    CHECK(*f.factor == channels);
  }

  // The claims in float64: both LN inputs are mean-zero along C with the plan's leaves centered ...
  for (std::size_t i = 0; i < 2; ++i) {
    auto v = test::value64(a, lnInput(a, i), a.ln(i).leaves);
    CHECK(test::relativeMean(v, AxisSet::of({2})) < 1e-12);
    CHECK(v.abs().max().item<double>() > 1e-3);
  }
  // ... and the whole fold is exact in float64 (the shifts of the centered convolution are
  // absorbed by the LayerNorms after the split).
  FoldOptions o;
  o.randomInputs = 2;
  auto folded = foldModel(a.model, a.result, o);
  REQUIRE(folded.report.verification.ran);
  CHECK(folded.report.verification.float64Equivalent);
  CHECK(folded.report.verification.worstRelative64 < 1e-10);
  CHECK(folded.report.folded.size() == 2);
}

TEST_CASE("a reshape that splits the channels over two dims is no factor: the LN is kept",
          "[analysis][axis][merged]") {
  // [1,4,8,8] -> [2,128]: each row holds two of the four channels, so a row's mean is not the
  // channel mean; the LN over the 128 must not fold.
  auto a = analyzeIr(model("  %s : int[] = prim::Constant[value=[2, 128]]()\n"
                           "  %x : Tensor = aten::reshape(%c, %s)\n" +
                               layerNorm("x", "out", 128) + "  return (%out)\n",
                           128));
  REQUIRE(a.result.layerNorms.size() == 1);
  CHECK_FALSE(a.ln(0).foldable);
  // Confirmed in float64: with the convolution centered the LN input's rows are not mean-zero.
  std::vector<LeafId> conv;
  for (const auto& l : a.result.leaves)
    if (l.kind == LeafKind::Convolution) conv.push_back(l.id);
  REQUIRE(conv.size() == 1);
  auto v = test::value64(a, lnInput(a, 0), conv);
  CHECK(test::relativeMean(v, AxisSet::of({1})) > 1e-3);
}
