// Rule-table tests: small models written as TorchScript IR, each with the arithmetic reason for
// the expected verdict written above it. Parameters are graph inputs named in IrModel::parameters.
#include <catch2/catch.hpp>

#include "foldnorm/analysis/rules.h"
#include "helpers.h"

using namespace foldnorm;
using foldnorm::test::analyzeIr;

namespace {

using foldnorm::test::layerNorm;

InputSpec spec(const char* s) { return parseInputSpec(s); }


const std::pair<std::string, InputSpec> kLnW{"ln_w", spec("8")};
const std::pair<std::string, InputSpec> kLnB{"ln_b", spec("8")};

}  // namespace

// ------------------------------------------------------------------------------------------
// Leaves
// ------------------------------------------------------------------------------------------

TEST_CASE("a linear layer feeding a LayerNorm is a leaf centered over its output rows", "[analysis][leaf]") {
  // y = x W^T + b; centering W over dim 0 and b makes sum_j y_j = 0 for every x.
  auto a = analyzeIr({"graph(%x : Tensor, %fc__weight : Tensor, %fc__bias : Tensor, %ln_w : Tensor, %ln_b : Tensor):\n"
                      "  %y : Tensor = aten::linear(%x, %fc__weight, %fc__bias)\n" +
                          layerNorm("y", "z", 8) + "  return (%z)\n",
                      {spec("2x3x4")},
                      {{"fc__weight", spec("8x4")}, {"fc__bias", spec("8")}, kLnW, kLnB}});
  REQUIRE(a.result.layerNorms.size() == 1);
  CHECK(a.ln(0).foldable);
  CHECK(a.centered() == std::vector<std::string>{"fc.bias", "fc.weight"});
  CHECK(a.planFor("fc.weight")->actions.at(0).axis == 0);
  CHECK(a.planFor("fc.bias")->actions.at(0).axis == 0);
  CHECK_FALSE(a.planFor("fc.weight")->untie);
}

TEST_CASE("addmm (GPT-2 Conv1D) centers its [in,out] weight along dim 1", "[analysis][leaf]") {
  // y = b + x W with W [in, out]: the output axis is W's dim 1.
  auto a = analyzeIr({"graph(%x : Tensor, %w : Tensor, %b : Tensor, %ln_w : Tensor, %ln_b : Tensor):\n"
                      "  %flat : int[] = prim::Constant[value=[-1, 4]]()\n"
                      "  %x2 : Tensor = aten::view(%x, %flat)\n"
                      "  %one : int = prim::Constant[value=1]()\n"
                      "  %y2 : Tensor = aten::addmm(%b, %x2, %w, %one, %one)\n"
                      "  %shape : int[] = prim::Constant[value=[2, 3, 8]]()\n"
                      "  %y : Tensor = aten::view(%y2, %shape)\n" +
                          layerNorm("y", "z", 8) + "  return (%z)\n",
                      {spec("2x3x4")},
                      {{"w", spec("4x8")}, {"b", spec("8")}, kLnW, kLnB}});
  CHECK(a.ln(0).foldable);
  CHECK(a.planFor("w")->actions.at(0).axis == 1);
}

TEST_CASE("matmul with a transposed parameter maps the axis back through t", "[analysis][leaf][axis]") {
  // x @ W.t() with W [out, in]: output axis = W's dim 0.
  auto a = analyzeIr({"graph(%x : Tensor, %w : Tensor, %ln_w : Tensor, %ln_b : Tensor):\n"
                      "  %wt : Tensor = aten::t(%w)\n"
                      "  %y : Tensor = aten::matmul(%x, %wt)\n" +
                          layerNorm("y", "z", 8) + "  return (%z)\n",
                      {spec("2x3x4")},
                      {{"w", spec("8x4")}, kLnW, kLnB}});
  CHECK(a.ln(0).foldable);
  CHECK(a.planFor("w")->actions.at(0).axis == 0);
}

TEST_CASE("an embedding is centered row by row, and a position table entering the sum directly too",
          "[analysis][leaf]") {
  // tok[ids] + pos: each row of both tables sums to zero after centering along dim 1.
  auto a = analyzeIr({"graph(%ids : Tensor, %wte : Tensor, %wpe : Tensor, %ln_w : Tensor, %ln_b : Tensor):\n"
                      "  %pad : int = prim::Constant[value=-1]()\n"
                      "  %f : bool = prim::Constant[value=0]()\n"
                      "  %e : Tensor = aten::embedding(%wte, %ids, %pad, %f, %f)\n"
                      "  %one : int = prim::Constant[value=1]()\n"
                      "  %h : Tensor = aten::add(%e, %wpe, %one)\n" +
                          layerNorm("h", "z", 8) + "  return (%z)\n",
                      {spec("2x3:int64[0,10)")},
                      {{"wte", spec("10x8")}, {"wpe", spec("3x8")}, kLnW, kLnB}});
  CHECK(a.ln(0).foldable);
  CHECK(a.centered() == std::vector<std::string>{"wpe", "wte"});
  CHECK(a.planFor("wte")->actions.at(0).axis == 1);
  CHECK(a.planFor("wpe")->actions.at(0).axis == 1);
}

TEST_CASE("x - x.mean(-1, keepdim) is mean-zero with nothing to center", "[analysis][leaf]") {
  auto a = analyzeIr({"graph(%x : Tensor, %ln_w : Tensor, %ln_b : Tensor):\n"
                      "  %dims : int[] = prim::Constant[value=[-1]]()\n"
                      "  %t : bool = prim::Constant[value=1]()\n"
                      "  %none : NoneType = prim::Constant()\n"
                      "  %m : Tensor = aten::mean(%x, %dims, %t, %none)\n"
                      "  %one : int = prim::Constant[value=1]()\n"
                      "  %c : Tensor = aten::sub(%x, %m, %one)\n" +
                          layerNorm("c", "z", 8) + "  return (%z)\n",
                      {spec("2x8")},
                      {kLnW, kLnB}});
  CHECK(a.ln(0).foldable);
  CHECK(a.result.plan.empty());
}

TEST_CASE("grouped convolutions center per group but shift per group, depthwise ones cannot be centered", "[analysis][leaf]") {
  auto ir = [](int groups) {
    return "graph(%x : Tensor, %w : Tensor, %b : Tensor, %ln_w : Tensor, %ln_b : Tensor):\n"
           "  %s : int[] = prim::Constant[value=[1, 1]]()\n"
           "  %p : int[] = prim::Constant[value=[0, 0]]()\n"
           "  %g : int = prim::Constant[value=" + std::to_string(groups) + "]()\n"
           "  %y : Tensor = aten::conv2d(%x, %w, %b, %s, %p, %s, %g)\n"
           "  %perm : int[] = prim::Constant[value=[0, 2, 3, 1]]()\n"
           "  %yp : Tensor = aten::permute(%y, %perm)\n" +
           layerNorm("yp", "z", 8) + "  return (%z)\n";
  };
  SECTION("groups = 2: centered within each group of 4 outputs the input is mean-zero, but each "
          "group changes by its own amount, which the LN does not absorb: not foldable") {
    // y' = y - d with d constant within a group only: LN(y) subtracts mean(y), not d.
    // tests/test_grouped_leaf.cpp checks both halves in float64.
    auto a = analyzeIr({ir(2), {spec("1x8x3x3")}, {{"w", spec("8x4x1x1")}, {"b", spec("8")}, kLnW, kLnB}});
    CHECK_FALSE(a.ln(0).foldable);
    CHECK(a.ln(0).reason == VerdictReason::UnsafeShift);
    CHECK_THAT(a.ln(0).explanation, Catch::Contains("convolution"));
  }
  SECTION("groups = 8 (depthwise): one output per group, so the LN is not foldable") {
    auto a = analyzeIr({ir(8), {spec("1x8x3x3")}, {{"w", spec("8x1x1x1")}, {"b", spec("8")}, kLnW, kLnB}});
    CHECK_FALSE(a.ln(0).foldable);
    CHECK(a.ln(0).reason == VerdictReason::Breaker);
    CHECK_THAT(a.ln(0).explanation, Catch::Contains("depthwise"));
  }
}

// ------------------------------------------------------------------------------------------
// Axis mapping
// ------------------------------------------------------------------------------------------

TEST_CASE("axes follow permutes and reshapes (ViT patch embedding)", "[analysis][axis]") {
  // conv [1,8,2,2] -> flatten(2) [1,8,4] -> transpose(1,2) [1,4,8]: channel axis 1 -> 2 = last.
  auto a = analyzeIr({"graph(%x : Tensor, %w : Tensor, %b : Tensor, %cls : Tensor, %ln_w : Tensor, %ln_b : Tensor):\n"
                      "  %s : int[] = prim::Constant[value=[2, 2]]()\n"
                      "  %p : int[] = prim::Constant[value=[0, 0]]()\n"
                      "  %d : int[] = prim::Constant[value=[1, 1]]()\n"
                      "  %g : int = prim::Constant[value=1]()\n"
                      "  %y : Tensor = aten::conv2d(%x, %w, %b, %s, %p, %d, %g)\n"
                      "  %two : int = prim::Constant[value=2]()\n"
                      "  %m1 : int = prim::Constant[value=-1]()\n"
                      "  %f : Tensor = aten::flatten(%y, %two, %m1)\n"
                      "  %one : int = prim::Constant[value=1]()\n"
                      "  %t : Tensor = aten::transpose(%f, %one, %two)\n"
                      "  %l : Tensor[] = prim::ListConstruct(%cls, %t)\n"
                      "  %c : Tensor = aten::cat(%l, %one)\n" +
                          layerNorm("c", "z", 8) + "  return (%z)\n",
                      {spec("1x3x4x4")},
                      {{"w", spec("8x3x2x2")}, {"b", spec("8")}, {"cls", spec("1x1x8")}, kLnW, kLnB}});
  CHECK(a.ln(0).foldable);
  CHECK(a.centered() == std::vector<std::string>{"b", "cls", "w"});
  CHECK(a.planFor("cls")->actions.at(0).axis == 2);
}

TEST_CASE("a permute that moves the mean-zero axis away from the normalized one is reported", "[analysis][axis]") {
  // linear output [2,3,8] mean-zero along 2; permute(0,2,1) -> [2,8,3]: mean-zero along 1, LN over 2.
  auto a = analyzeIr({"graph(%x : Tensor, %w : Tensor, %ln_w : Tensor, %ln_b : Tensor):\n"
                      "  %none : NoneType = prim::Constant()\n"
                      "  %y : Tensor = aten::linear(%x, %w, %none)\n"
                      "  %perm : int[] = prim::Constant[value=[0, 2, 1]]()\n"
                      "  %yp : Tensor = aten::permute(%y, %perm)\n" +
                          layerNorm("yp", "z", 3) + "  return (%z)\n",
                      {spec("2x3x4")},
                      {{"w", spec("8x4")}, {"ln_w", spec("3")}, {"ln_b", spec("3")}}});
  CHECK_FALSE(a.ln(0).foldable);
  CHECK(a.ln(0).reason == VerdictReason::Axes);
}

TEST_CASE("a reshape that splits the normalized axis into heads is not foldable per head", "[analysis][axis]") {
  // [2,3,8] -> [2,3,2,4]: mean-zero over all 8 does not make each group of 4 mean-zero.
  auto a = analyzeIr({"graph(%x : Tensor, %w : Tensor, %ln_w : Tensor, %ln_b : Tensor):\n"
                      "  %none : NoneType = prim::Constant()\n"
                      "  %y : Tensor = aten::linear(%x, %w, %none)\n"
                      "  %shape : int[] = prim::Constant[value=[2, 3, 2, 4]]()\n"
                      "  %h : Tensor = aten::view(%y, %shape)\n" +
                          layerNorm("h", "z", 4) + "  return (%z)\n",
                      {spec("2x3x4")},
                      {{"w", spec("8x4")}, {"ln_w", spec("4")}, {"ln_b", spec("4")}}});
  CHECK_FALSE(a.ln(0).foldable);
  CHECK(a.ln(0).reason == VerdictReason::Axes);
  CHECK_THAT(a.ln(0).explanation, Catch::Contains("{2,3}"));
}

TEST_CASE("a per-head weight: mean-zero through the head merge, but its shift differs per head", "[analysis][axis]") {
  // v [2,3,2,4] mean-zero along 3 (per head) -> view [2,3,8]: every row of 8 sums to zero.
  // A second LN normalizes over the last two dims [2,4] of the per-head tensor directly.
  auto a = analyzeIr({"graph(%x : Tensor, %w : Tensor, %ln_w : Tensor, %ln_b : Tensor, %ln2_w : Tensor, %ln2_b : Tensor):\n"
                      "  %none : NoneType = prim::Constant()\n"
                      "  %wt : Tensor = aten::t(%w)\n"
                      "  %y : Tensor = aten::matmul(%x, %wt)\n"
                      "  %shape : int[] = prim::Constant[value=[2, 3, 8]]()\n"
                      "  %m : Tensor = aten::reshape(%y, %shape)\n" +
                          layerNorm("m", "z", 8) +
                          "  %s2 : int[] = prim::Constant[value=[2, 4]]()\n"
                          "  %eps2 : float = prim::Constant[value=1e-06]()\n"
                          "  %c2 : bool = prim::Constant[value=0]()\n"
                          "  %z2 : Tensor = aten::layer_norm(%y, %s2, %ln2_w, %ln2_b, %eps2, %c2)\n"
                          "  %out : (Tensor, Tensor) = prim::TupleConstruct(%z, %z2)\n"
                          "  return (%out)\n",
                      {spec("2x3x2x3")},
                      {{"w", spec("4x3")}, kLnW, kLnB, {"ln2_w", spec("2x4")}, {"ln2_b", spec("2x4")}}});
  REQUIRE(a.result.layerNorms.size() == 2);
  // Both inputs can be made mean-zero (the facts map through the reshape and over [2,4]), but
  // the weight is shared by the heads: centering shifts each head by its own amount, constant
  // along dim 3 only, so neither LN sees a shift constant along its normalized axes.
  for (std::size_t i = 0; i < 2; ++i) {
    CHECK_FALSE(a.ln(i).foldable);
    CHECK(a.ln(i).reason == VerdictReason::UnsafeShift);
    CHECK(a.ln(i).leaves.size() == 1);
  }
}

// ------------------------------------------------------------------------------------------
// Preserving and breaking
// ------------------------------------------------------------------------------------------

TEST_CASE("ops that break the zero mean are named with the path back to them", "[analysis][breaker]") {
  struct Case {
    const char* name;
    const char* body;  // from %y (linear output, mean-zero along -1) to %h
    const char* breaker;
  };
  auto [name, body, breakerOp] = GENERATE(values<Case>({
      {"nonlinearity", "  %app : str = prim::Constant[value=\"none\"]()\n  %h : Tensor = aten::gelu(%y, %app)\n", "aten::gelu"},
      // A computed per-feature scale (a parameter one is absorbed: test_beyond_paper.cpp).
      {"per-feature scale", "  %g : Tensor = aten::exp(%ln_w)\n  %h : Tensor = aten::mul(%y, %g)\n", "aten::mul"},
      {"scalar added", "  %c : float = prim::Constant[value=0.5]()\n  %one : int = prim::Constant[value=1]()\n"
                       "  %h : Tensor = aten::add(%y, %c, %one)\n", "aten::add"},
      {"slice along the axis", "  %d : int = prim::Constant[value=-1]()\n  %s : int = prim::Constant[value=0]()\n"
                               "  %e : int = prim::Constant[value=4]()\n  %st : int = prim::Constant[value=1]()\n"
                               "  %h0 : Tensor = aten::slice(%y, %d, %s, %e, %st)\n  %pad : int[] = prim::Constant[value=[0, 4]]()\n"
                               "  %z0 : float = prim::Constant[value=0.]()\n  %h : Tensor = aten::constant_pad_nd(%h0, %pad, %z0)\n", "aten::slice"},
      {"reflect padding along the axis (C++ F::pad)",
       "  %pad : int[] = prim::Constant[value=[1, 1]]()\n  %mode : int = prim::Constant[value=0]()\n"
       "  %none3 : NoneType = prim::Constant()\n  %h0 : Tensor = aten::_pad_enum(%y, %pad, %mode, %none3)\n"
       "  %d : int = prim::Constant[value=-1]()\n  %s : int = prim::Constant[value=1]()\n"
       "  %e : int = prim::Constant[value=9]()\n  %st : int = prim::Constant[value=1]()\n"
       "  %h : Tensor = aten::slice(%h0, %d, %s, %e, %st)\n", "aten::_pad_enum"},
      {"unknown op", "  %d : int = prim::Constant[value=-1]()\n"
                     "  %h : Tensor = aten::logcumsumexp(%y, %d)\n", "aten::logcumsumexp"},
      {"training dropout", "  %p : float = prim::Constant[value=0.1]()\n  %t : bool = prim::Constant[value=1]()\n"
                           "  %h : Tensor = aten::dropout(%y, %p, %t)\n", "aten::dropout"},
      {"softmax", "  %d : int = prim::Constant[value=-1]()\n  %none2 : NoneType = prim::Constant()\n"
                  "  %h : Tensor = aten::softmax(%y, %d, %none2)\n", "aten::softmax"},
  }));
  INFO(name);
  auto a = analyzeIr({std::string("graph(%x : Tensor, %w : Tensor, %ln_w : Tensor, %ln_b : Tensor):\n"
                                  "  %none : NoneType = prim::Constant()\n"
                                  "  %y : Tensor = aten::linear(%x, %w, %none)\n") +
                          body + layerNorm("h", "z", 8) + "  return (%z)\n",
                      {spec("2x8")},
                      {{"w", spec("8x8")}, kLnW, kLnB}});
  CHECK_FALSE(a.ln(0).foldable);
  CHECK(a.ln(0).reason == VerdictReason::Breaker);
  REQUIRE(a.ln(0).breaker != kNone);
  CHECK(a.model.graph.node(a.ln(0).breaker).kind == breakerOp);
  CHECK(a.model.graph.node(a.ln(0).path.front()).kind == "aten::layer_norm");
  CHECK(a.model.graph.node(a.ln(0).path.back()).kind == breakerOp);
}

TEST_CASE("an LN over a model input is not foldable: inputs are arbitrary", "[analysis][breaker]") {
  auto a = analyzeIr({"graph(%x : Tensor, %ln_w : Tensor, %ln_b : Tensor):\n" + layerNorm("x", "z", 8) +
                          "  return (%z)\n",
                      {spec("2x8")}, {kLnW, kLnB}});
  CHECK_FALSE(a.ln(0).foldable);
  CHECK(a.model.graph.node(a.ln(0).breaker).kind == "prim::Param");
}

TEST_CASE("value-preserving ops keep the zero mean", "[analysis][preserving]") {
  auto body = GENERATE(as<std::string>{},
      "  %c : float = prim::Constant[value=0.125]()\n  %h : Tensor = aten::mul(%y, %c)\n",
      "  %c : float = prim::Constant[value=3.]()\n  %h : Tensor = aten::div(%y, %c)\n",
      "  %p : float = prim::Constant[value=0.1]()\n  %f : bool = prim::Constant[value=0]()\n  %h : Tensor = aten::dropout(%y, %p, %f)\n",
      "  %h : Tensor = aten::neg(%y)\n",
      // a per-row scale [2, 1] is constant along the mean-zero axis
      "  %d : int[] = prim::Constant[value=[-1]]()\n  %t : bool = prim::Constant[value=1]()\n  %none2 : NoneType = prim::Constant()\n"
      "  %r : Tensor = aten::sum(%x, %d, %t, %none2)\n  %h : Tensor = aten::mul(%y, %r)\n",
      // zero padding along another axis adds rows of zeros, which are mean-zero
      "  %pad : int[] = prim::Constant[value=[0, 0, 0, 2]]()\n  %z0 : float = prim::Constant[value=0.]()\n"
      "  %h : Tensor = aten::constant_pad_nd(%y, %pad, %z0)\n",
      // the same through LibTorch's C++ F::pad (aten::_pad_enum, mode 3 = constant, value None)
      "  %pad : int[] = prim::Constant[value=[0, 0, 0, 2]]()\n  %mode : int = prim::Constant[value=3]()\n"
      "  %none3 : NoneType = prim::Constant()\n  %h : Tensor = aten::_pad_enum(%y, %pad, %mode, %none3)\n",
      "  %sh : int[] = prim::Constant[value=[1]]()\n  %dm : int[] = prim::Constant[value=[0]]()\n  %h : Tensor = aten::roll(%y, %sh, %dm)\n",
      // x[..., :] (Swin's unpadding) slices the whole normalized axis: nothing is taken away
      "  %d : int = prim::Constant[value=-1]()\n  %s : int = prim::Constant[value=0]()\n"
      "  %e : int = prim::Constant[value=9223372036854775807]()\n  %st : int = prim::Constant[value=1]()\n"
      "  %h : Tensor = aten::slice(%y, %d, %s, %e, %st)\n");
  INFO(body);
  auto a = analyzeIr({"graph(%x : Tensor, %w : Tensor, %ln_w : Tensor, %ln_b : Tensor):\n"
                      "  %none : NoneType = prim::Constant()\n"
                      "  %y : Tensor = aten::linear(%x, %w, %none)\n" +
                          body + layerNorm("h", "z", 8) + "  return (%z)\n",
                      {spec("2x8")},
                      {{"w", spec("8x8")}, kLnW, kLnB}});
  INFO(a.ln(0).explanation);
  CHECK(a.ln(0).foldable);
}

TEST_CASE("attention-weighted sums of mean-zero rows stay mean-zero", "[analysis][axis]") {
  // out = softmax(q k^T) @ v, v = linear(x): every output row is a convex combination of rows of v.
  auto a = analyzeIr({"graph(%x : Tensor, %w : Tensor, %ln_w : Tensor, %ln_b : Tensor):\n"
                      "  %none : NoneType = prim::Constant()\n"
                      "  %v : Tensor = aten::linear(%x, %w, %none)\n"
                      "  %one : int = prim::Constant[value=1]()\n"
                      "  %two : int = prim::Constant[value=2]()\n"
                      "  %xt : Tensor = aten::transpose(%x, %one, %two)\n"
                      "  %s : Tensor = aten::matmul(%x, %xt)\n"
                      "  %m1 : int = prim::Constant[value=-1]()\n"
                      "  %p : Tensor = aten::softmax(%s, %m1, %none)\n"
                      "  %o : Tensor = aten::matmul(%p, %v)\n" +
                          layerNorm("o", "z", 8) + "  return (%z)\n",
                      {spec("2x3x4")},
                      {{"w", spec("8x4")}, kLnW, kLnB}});
  INFO(a.ln(0).explanation);
  CHECK(a.ln(0).foldable);
}

// ------------------------------------------------------------------------------------------
// Safety: where the shift of a centered leaf goes
// ------------------------------------------------------------------------------------------

TEST_CASE("post-LN (BERT-like): only the embedding LN folds", "[analysis][safety]") {
  // h1 = LN1(emb); h2 = LN2(h1 + linear(h1)): LN2's input carries LN1's affine output.
  auto a = analyzeIr({"graph(%ids : Tensor, %emb : Tensor, %fc__weight : Tensor, %fc__bias : Tensor, %ln_w : Tensor, %ln_b : Tensor):\n"
                      "  %pad : int = prim::Constant[value=-1]()\n"
                      "  %f : bool = prim::Constant[value=0]()\n"
                      "  %e : Tensor = aten::embedding(%emb, %ids, %pad, %f, %f)\n" +
                          layerNorm("e", "h1", 8) +
                          "  %y : Tensor = aten::linear(%h1, %fc__weight, %fc__bias)\n"
                          "  %one : int = prim::Constant[value=1]()\n"
                          "  %r : Tensor = aten::add(%h1, %y, %one)\n" +
                          layerNorm("r", "h2", 8) + "  return (%h2)\n",
                      {spec("2x3:int64[0,10)")},
                      {{"emb", spec("10x8")}, {"fc__weight", spec("8x8")}, {"fc__bias", spec("8")}, kLnW, kLnB}});
  REQUIRE(a.result.layerNorms.size() == 2);
  CHECK(a.ln(0).foldable);
  CHECK_FALSE(a.ln(1).foldable);
  CHECK(a.ln(1).reason == VerdictReason::Breaker);
  CHECK(a.model.graph.node(a.ln(1).breaker).kind == "aten::layer_norm");
  CHECK(a.centered() == std::vector<std::string>{"emb"});
}

TEST_CASE("a pre-LN model that returns its hidden states cannot fold: the caller sees the shift",
          "[analysis][safety]") {
  // h = emb + linear(LN1(emb)); outputs (LNf(h), h). Centering emb changes h itself.
  std::string ir =
      "graph(%ids : Tensor, %emb : Tensor, %fc__weight : Tensor, %fc__bias : Tensor, %ln_w : Tensor, %ln_b : Tensor):\n"
      "  %pad : int = prim::Constant[value=-1]()\n"
      "  %f : bool = prim::Constant[value=0]()\n"
      "  %e : Tensor = aten::embedding(%emb, %ids, %pad, %f, %f)\n" +
      layerNorm("e", "h1", 8) +
      "  %y : Tensor = aten::linear(%h1, %fc__weight, %fc__bias)\n"
      "  %one : int = prim::Constant[value=1]()\n"
      "  %h : Tensor = aten::add(%e, %y, %one)\n" +
      layerNorm("h", "out", 8);
  SECTION("returning the hidden state makes every LN unsafe") {
    auto a = analyzeIr({ir + "  %t : (Tensor, Tensor) = prim::TupleConstruct(%out, %h)\n  return (%t)\n",
                        {spec("2x3:int64[0,10)")},
                        {{"emb", spec("10x8")}, {"fc__weight", spec("8x8")}, {"fc__bias", spec("8")}, kLnW, kLnB}});
    CHECK_FALSE(a.ln(0).foldable);
    CHECK_FALSE(a.ln(1).foldable);
    CHECK(a.ln(1).reason == VerdictReason::UnsafeShift);
    CHECK(a.model.graph.node(a.ln(1).consumer).kind == "prim::Return");
    // Named as the caller indexes it: element 1 of the returned tuple, not "output 0".
    CHECK_THAT(a.ln(1).explanation, Catch::Contains("model output 0.1:"));
    CHECK(a.result.plan.empty());
  }
  SECTION("returning only the final LN output folds both") {
    auto a = analyzeIr({ir + "  return (%out)\n",
                        {spec("2x3:int64[0,10)")},
                        {{"emb", spec("10x8")}, {"fc__weight", spec("8x8")}, {"fc__bias", spec("8")}, kLnW, kLnB}});
    CHECK(a.ln(0).foldable);
    CHECK(a.ln(1).foldable);
    CHECK(a.centered() == std::vector<std::string>{"emb", "fc.bias", "fc.weight"});
  }
}

TEST_CASE("a residual stream read directly by a linear (post-LN OPT style) is unsafe", "[analysis][safety]") {
  // x = linear0(inp); z = LN(x); also head = linear1(x): centering linear0 changes head.
  auto a = analyzeIr({"graph(%inp : Tensor, %l0 : Tensor, %l1 : Tensor, %ln_w : Tensor, %ln_b : Tensor):\n"
                      "  %none : NoneType = prim::Constant()\n"
                      "  %x : Tensor = aten::linear(%inp, %l0, %none)\n" +
                          layerNorm("x", "z", 8) +
                          "  %head : Tensor = aten::linear(%x, %l1, %none)\n"
                          "  %t : (Tensor, Tensor) = prim::TupleConstruct(%z, %head)\n"
                          "  return (%t)\n",
                      {spec("2x4")},
                      {{"l0", spec("8x4")}, {"l1", spec("3x8")}, kLnW, kLnB}});
  CHECK_FALSE(a.ln(0).foldable);
  CHECK(a.ln(0).reason == VerdictReason::UnsafeShift);
  CHECK(a.model.graph.node(a.ln(0).consumer).kind == "aten::linear");
}

TEST_CASE("tied embedding and head: foldable with an untie, not with --no-untie", "[analysis][safety][tied]") {
  // The same table is the embedding (centered per row) and the head (x @ W^T): the head must keep
  // the original, so the embedding gets a copy.
  IrModel ir{"graph(%ids : Tensor, %emb : Tensor, %ln_w : Tensor, %ln_b : Tensor):\n"
             "  %pad : int = prim::Constant[value=-1]()\n"
             "  %f : bool = prim::Constant[value=0]()\n"
             "  %e : Tensor = aten::embedding(%emb, %ids, %pad, %f, %f)\n" +
                 layerNorm("e", "h", 8) +
                 "  %wt : Tensor = aten::t(%emb)\n"
                 "  %logits : Tensor = aten::matmul(%h, %wt)\n"
                 "  return (%logits)\n",
             {spec("2x3:int64[0,10)")},
             {{"emb", spec("10x8")}, kLnW, kLnB}};
  SECTION("untie allowed") {
    auto a = analyzeIr(ir);
    CHECK(a.ln(0).foldable);
    REQUIRE(a.planFor("emb"));
    CHECK(a.planFor("emb")->untie);
    CHECK(a.planFor("emb")->untieBytes == 10 * 8 * 4);
  }
  SECTION("--no-untie") {
    AnalysisOptions o;
    o.allowUntie = false;
    auto a = analyzeIr(ir, o);
    CHECK_FALSE(a.ln(0).foldable);
    CHECK(a.ln(0).reason == VerdictReason::SharedParameter);
    CHECK(a.result.plan.empty());
  }
}

TEST_CASE("concatenation along the normalized axis", "[analysis][safety][axis]") {
  SECTION("parts that are mean-zero by construction fold") {
    // [x - mean(x), y - mean(y)]: each half sums to zero, nothing is centered, nothing shifts.
    auto a = analyzeIr({"graph(%x : Tensor, %y : Tensor, %ln_w : Tensor, %ln_b : Tensor):\n"
                        "  %dims : int[] = prim::Constant[value=[-1]]()\n"
                        "  %t : bool = prim::Constant[value=1]()\n"
                        "  %none : NoneType = prim::Constant()\n"
                        "  %one : int = prim::Constant[value=1]()\n"
                        "  %mx : Tensor = aten::mean(%x, %dims, %t, %none)\n"
                        "  %cx : Tensor = aten::sub(%x, %mx, %one)\n"
                        "  %my : Tensor = aten::mean(%y, %dims, %t, %none)\n"
                        "  %cy : Tensor = aten::sub(%y, %my, %one)\n"
                        "  %l : Tensor[] = prim::ListConstruct(%cx, %cy)\n"
                        "  %m1 : int = prim::Constant[value=-1]()\n"
                        "  %c : Tensor = aten::cat(%l, %m1)\n" +
                            layerNorm("c", "z", 8) + "  return (%z)\n",
                        {spec("2x4"), spec("2x4")}, {kLnW, kLnB}});
    CHECK(a.ln(0).foldable);
  }
  SECTION("separately centered linear outputs do not: their shifts differ along the row") {
    // LN([a - mean(a), b - mean(b)]) != LN([a, b]): the original row is not shifted uniformly.
    auto a = analyzeIr({"graph(%x : Tensor, %wa : Tensor, %wb : Tensor, %ln_w : Tensor, %ln_b : Tensor):\n"
                        "  %none : NoneType = prim::Constant()\n"
                        "  %a : Tensor = aten::linear(%x, %wa, %none)\n"
                        "  %b : Tensor = aten::linear(%x, %wb, %none)\n"
                        "  %l : Tensor[] = prim::ListConstruct(%a, %b)\n"
                        "  %m1 : int = prim::Constant[value=-1]()\n"
                        "  %c : Tensor = aten::cat(%l, %m1)\n" +
                            layerNorm("c", "z", 8) + "  return (%z)\n",
                        {spec("2x4")}, {{"wa", spec("4x4")}, {"wb", spec("4x4")}, kLnW, kLnB}});
    CHECK_FALSE(a.ln(0).foldable);
    CHECK(a.ln(0).reason == VerdictReason::UnsafeShift);
  }
  SECTION("patch merging: slices of one tensor at different positions, cat along features") {
    // x [1,4,4,2] -> x[:,0::2], x[:,1::2] (rows) -> cat(-1) [1,2,4,4] -> LN(4).
    auto a = analyzeIr({"graph(%inp : Tensor, %w : Tensor, %ln_w : Tensor, %ln_b : Tensor):\n"
                        "  %none : NoneType = prim::Constant()\n"
                        "  %x : Tensor = aten::linear(%inp, %w, %none)\n"
                        "  %one : int = prim::Constant[value=1]()\n"
                        "  %zero : int = prim::Constant[value=0]()\n"
                        "  %two : int = prim::Constant[value=2]()\n"
                        "  %end : int = prim::Constant[value=9223372036854775807]()\n"
                        "  %x0 : Tensor = aten::slice(%x, %one, %zero, %end, %two)\n"
                        "  %x1 : Tensor = aten::slice(%x, %one, %one, %end, %two)\n"
                        "  %l : Tensor[] = prim::ListConstruct(%x0, %x1)\n"
                        "  %m1 : int = prim::Constant[value=-1]()\n"
                        "  %c : Tensor = aten::cat(%l, %m1)\n" +
                            layerNorm("c", "z", 4) + "  return (%z)\n",
                        {spec("1x4x4x3")}, {{"w", spec("2x3")}, {"ln_w", spec("4")}, {"ln_b", spec("4")}}});
    CHECK_FALSE(a.ln(0).foldable);
    CHECK(a.ln(0).reason == VerdictReason::UnsafeShift);
  }
}

TEST_CASE("every registered rule has a rationale and known ops", "[analysis][rules]") {
  for (const auto& rule : ruleRegistry()) {
    INFO(rule.name);
    CHECK_FALSE(rule.rationale.empty());
    CHECK_FALSE(rule.ops.empty());
    CHECK(rule.meanZero);
    CHECK(rule.shift);
  }
}
