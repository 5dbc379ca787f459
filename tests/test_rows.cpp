// Facts of row ranges (src/analysis/rows.h, issue 31 item 4): a slice that takes the rows of one
// concatenated part is as mean-zero as that part, and a slice that drops the rows a centering
// changed does not see the change. Each positive case is folded and verified in float64 (the
// fold's own check is the oracle); each negative one takes rows it must not claim.
#include <catch2/catch.hpp>

#include "foldnorm/fold/fold.h"
#include "foldnorm/torch/torch_model.h"
#include "helpers.h"

using namespace foldnorm;
using foldnorm::test::analyzeIr;

namespace {

InputSpec spec(const char* s) { return parseInputSpec(s); }

void checkFoldVerifies(const test::Analyzed& a) {
  FoldOptions o;
  o.randomInputs = 2;
  auto folded = foldModel(a.model, a.result, o);
  const auto& v = folded.report.verification;
  REQUIRE(v.ran);
  CHECK(v.float64Equivalent);
  CHECK(v.worstRelative64 < 1e-10);
}

/// Every output moves when the inputs do (a fold check on a constant output proves nothing).
void checkOutputsDependOnInputs(const test::Analyzed& a, const std::vector<InputSpec>& specs) {
  auto run = [&](uint64_t seed) {
    std::vector<torch::jit::IValue> in;
    for (const auto& t : makeInputs(specs, seed)) in.emplace_back(t);
    return a.model.torch->module.forward(in).toTuple()->elements();
  };
  auto o1 = run(1), o2 = run(2);
  for (std::size_t i = 0; i < o1.size(); ++i)
    CHECK((o1[i].toTensor() - o2[i].toTensor()).abs().max().item<double>() > 1e-3);
}

/// A class row written by a linear, cat'ed before rows that a GELU broke; LN `first` reads rows
/// [0, end) of the concatenation (PiT's final LayerNorm reads the class row).
IrModel classRow(int end) {
  std::string ir =
      "graph(%c : Tensor, %x : Tensor, %cls__weight : Tensor, %cls__bias : Tensor, %sp__weight : Tensor,"
      " %sp__bias : Tensor, %ln_w : Tensor, %ln_b : Tensor, %head__weight : Tensor):\n"
      "  %none : NoneType = prim::Constant()\n"
      "  %zero : int = prim::Constant[value=0]()\n"
      "  %one : int = prim::Constant[value=1]()\n"
      "  %end : int = prim::Constant[value=" + std::to_string(end) + "]()\n"
      "  %approx : str = prim::Constant[value=\"none\"]()\n"
      "  %cls : Tensor = aten::linear(%c, %cls__weight, %cls__bias)\n"
      "  %sp0 : Tensor = aten::linear(%x, %sp__weight, %sp__bias)\n"
      "  %sp : Tensor = aten::gelu(%sp0, %approx)\n"
      "  %l : Tensor[] = prim::ListConstruct(%cls, %sp)\n"
      "  %s : Tensor = aten::cat(%l, %one)\n"
      "  %y : Tensor = aten::slice(%s, %one, %zero, %end, %one)\n" +
      test::layerNorm("y", "first", 8) +
      "  %o : Tensor = aten::linear(%first, %head__weight, %none)\n"
      "  %out : (Tensor, Tensor) = prim::TupleConstruct(%o, %sp)\n"
      "  return (%out)\n";
  return {ir,
          {spec("2x1x4"), spec("2x3x4")},
          {{"cls__weight", spec("8x4")}, {"cls__bias", spec("8")}, {"sp__weight", spec("8x4")},
           {"sp__bias", spec("8")}, {"ln_w", spec("8:float32[0.5,1.5)")}, {"ln_b", spec("8")},
           {"head__weight", spec("5x8")}}};
}

/// A token made by a linear (read by LN `tok` and tanh) cat'ed after the sequence %h, then the
/// rows [start, end) of the concatenation returned (X-CLIP's message token, h[:, :-1]).
IrModel tokenAfterSequence(int start, int end) {
  std::string ir =
      "graph(%x : Tensor, %h : Tensor, %tok__weight : Tensor, %tok__bias : Tensor, %ln_w : Tensor,"
      " %ln_b : Tensor):\n"
      "  %one : int = prim::Constant[value=1]()\n"
      "  %start : int = prim::Constant[value=" + std::to_string(start) + "]()\n"
      "  %end : int = prim::Constant[value=" + std::to_string(end) + "]()\n"
      "  %t : Tensor = aten::linear(%x, %tok__weight, %tok__bias)\n" +
      test::layerNorm("t", "tok", 8) +
      "  %g : Tensor = aten::tanh(%tok)\n"
      "  %l : Tensor[] = prim::ListConstruct(%h, %t)\n"
      "  %s : Tensor = aten::cat(%l, %one)\n"
      "  %kept : Tensor = aten::slice(%s, %one, %start, %end, %one)\n"
      "  %out : (Tensor, Tensor) = prim::TupleConstruct(%g, %kept)\n"
      "  return (%out)\n";
  return {ir,
          {spec("2x1x4"), spec("2x3x8")},
          {{"tok__weight", spec("8x4")}, {"tok__bias", spec("8")}, {"ln_w", spec("8:float32[0.5,1.5)")},
           {"ln_b", spec("8")}}};
}

}  // namespace

TEST_CASE("a slice of a class row cat'ed before broken rows is as mean-zero as that row", "[analysis][rows]") {
  auto a = analyzeIr(classRow(1));
  REQUIRE(a.result.layerNorms.size() == 1);
  REQUIRE(a.ln(0).foldable);
  CHECK(a.centered() == std::vector<std::string>{"cls.bias", "cls.weight"});
  checkFoldVerifies(a);
  checkOutputsDependOnInputs(a, {spec("2x1x4"), spec("2x3x4")});
  // Rows [0, 2) take a GELU row too: nothing to claim.
  auto b = analyzeIr(classRow(2));
  REQUIRE(b.result.layerNorms.size() == 1);
  CHECK_FALSE(b.ln(0).foldable);
  CHECK(b.ln(0).reason == VerdictReason::Breaker);
}

TEST_CASE("a slice that drops the rows a centering changed does not see the change", "[analysis][rows]") {
  // h[:, :-1] of [h (3 rows), token]: the token's row is gone before the output.
  auto a = analyzeIr(tokenAfterSequence(0, -1));
  REQUIRE(a.result.layerNorms.size() == 1);
  REQUIRE(a.ln(0).foldable);
  checkFoldVerifies(a);
  checkOutputsDependOnInputs(a, {spec("2x1x4"), spec("2x3x8")});
  // Rows [1, 4) keep the token's row: the output sees the change.
  auto b = analyzeIr(tokenAfterSequence(1, 4));
  REQUIRE(b.result.layerNorms.size() == 1);
  CHECK_FALSE(b.ln(0).foldable);
  CHECK(b.ln(0).reason == VerdictReason::UnsafeShift);
}
