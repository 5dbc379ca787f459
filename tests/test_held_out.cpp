// Forms the held-out sweeps (docs/held-out.md) met in models traced from code not written here:
// a LayerNorm whose normalized_shape is built at run time from aten::size (F.layer_norm(h,
// (h.shape[-1],))), which used to refuse the import, analysed, folded and verified in float64;
// dead code (a linear whose result nothing reads), which used to count as a reader of the stream.
#include <catch2/catch.hpp>

#include "foldnorm/fold/fold.h"
#include "foldnorm/graph/summary.h"
#include "foldnorm/torch/torch_model.h"
#include "helpers.h"

using namespace foldnorm;
using foldnorm::test::analyzeIr;

namespace {

InputSpec spec(const char* s) { return parseInputSpec(s); }

/// x -> fc -> LN(shape from fc's size) -> head, the LN's shape list built from `sizeExpr`
/// (IR lines defining %n, the normalized size).
IrModel sizeShapedLn(const std::string& sizeExpr) {
  std::string ir =
      "graph(%x : Tensor, %fc__weight : Tensor, %fc__bias : Tensor, %ln__weight : Tensor, %ln__bias : Tensor,"
      " %head__weight : Tensor):\n"
      "  %none : NoneType = prim::Constant()\n"
      "  %m1 : int = prim::Constant[value=-1]()\n"
      "  %two : int = prim::Constant[value=2]()\n"
      "  %t : bool = prim::Constant[value=1]()\n"
      "  %eps : float = prim::Constant[value=1.0000000000000001e-05]()\n"
      "  %y : Tensor = aten::linear(%x, %fc__weight, %fc__bias)\n" +
      sizeExpr +
      "  %shape : int[] = prim::ListConstruct(%n)\n"
      "  %h : Tensor = aten::layer_norm(%y, %shape, %ln__weight, %ln__bias, %eps, %t)\n"
      "  %o : Tensor = aten::linear(%h, %head__weight, %none)\n"
      "  return (%o)\n";
  return {ir,
          {spec("2x3x4")},
          {{"fc__weight", spec("8x4")}, {"fc__bias", spec("8")}, {"ln__weight", spec("8:float32[0.5,1.5)")},
           {"ln__bias", spec("8")}, {"head__weight", spec("5x8")}}};
}

}  // namespace

TEST_CASE("a LayerNorm shaped at run time by aten::size folds and verifies in float64", "[held-out][fold]") {
  // h.shape[-1] traces as aten::size(h, -1); older traces box it through NumToTensor and Int;
  // x.dim()-style arithmetic gives the same number.
  const std::vector<std::pair<const char*, std::string>> forms = {
      {"size", "  %n : int = aten::size(%y, %m1)\n"},
      {"boxed size", "  %s : int = aten::size(%y, %two)\n  %st : Tensor = prim::NumToTensor(%s)\n"
                     "  %n : int = aten::Int(%st)\n"},
      {"size arithmetic", "  %s : int = aten::size(%y, %two)\n  %one : int = prim::Constant[value=1]()\n"
                          "  %s2 : int = aten::mul(%s, %two)\n  %n : int = aten::floordiv(%s2, %two)\n"},
  };
  for (const auto& [name, expr] : forms) {
    INFO(name);
    auto a = analyzeIr(sizeShapedLn(expr));
    auto lns = findLayerNorms(a.model.graph);
    REQUIRE(lns.size() == 1);
    CHECK(lns[0].normalizedShape == std::vector<int64_t>{8});
    REQUIRE(a.result.foldableCount() == 1);
    FoldOptions o;
    o.randomInputs = 2;
    auto folded = foldModel(a.model, a.result, o);
    const auto& v = folded.report.verification;
    REQUIRE(v.ran);
    CHECK(v.float64Equivalent);
    CHECK(v.worstRelative64 < 1e-10);
    CHECK(folded.report.folded.size() == 1);
  }
}

TEST_CASE("a LayerNorm shaped by a size of an unrecorded value is refused in one line", "[held-out][graph]") {
  // The list's ints cannot be read (no recorded shape behind them): findLayerNorms must say so,
  // not guess; the graph is built by hand so the size's input has no shape.
  Graph g;
  auto param = g.addNode("prim::Param");
  g.setGraphInputNode(param);
  auto x = g.addOutput(param, "x", ValueKind::Tensor);
  auto other = g.addOutput(param, "unrecorded", ValueKind::Tensor);
  g.value(x).tensor = TensorInfo{{2, 8}, "float32"};
  auto dimNode = g.addNode("prim::Constant");
  auto dim = g.addOutput(dimNode, "dim", ValueKind::Int);
  g.value(dim).constant = ConstantValue(int64_t{-1});
  auto sizeNode = g.addNode("aten::size");
  g.addInput(sizeNode, other);
  g.addInput(sizeNode, dim);
  auto n = g.addOutput(sizeNode, "n", ValueKind::Int);
  auto listNode = g.addNode("prim::ListConstruct");
  g.addInput(listNode, n);
  auto shape = g.addOutput(listNode, "shape", ValueKind::IntList);
  auto epsNode = g.addNode("prim::Constant");
  auto eps = g.addOutput(epsNode, "eps", ValueKind::Float);
  g.value(eps).constant = ConstantValue(1e-5);
  auto noneNode = g.addNode("prim::Constant");
  auto none = g.addOutput(noneNode, "none", ValueKind::None);
  auto ln = g.addNode("aten::layer_norm");
  for (auto v : {x, shape, none, none, eps}) g.addInput(ln, v);
  g.addOutput(ln, "y", ValueKind::Tensor);
  CHECK_THROWS_WITH(findLayerNorms(g), Catch::Contains("normalized_shape or eps that is not a constant"));
}

TEST_CASE("a linear whose result nothing reads is not imported but a LayerNorm nobody reads is", "[held-out][graph]") {
  // Inlined, a call whose result the caller ignores is dead code (an export keeps it whole).
  // Counted as a reader of the stream it made fc's centering look unsafe.
  std::string ir =
      "graph(%x : Tensor, %fc__weight : Tensor, %fc__bias : Tensor, %probe__weight : Tensor,"
      " %probe__bias : Tensor, %ln_w : Tensor, %ln_b : Tensor, %head__weight : Tensor):\n"
      "  %none : NoneType = prim::Constant()\n"
      "  %y : Tensor = aten::linear(%x, %fc__weight, %fc__bias)\n"
      "  %dead : Tensor = aten::linear(%y, %probe__weight, %probe__bias)\n" +
      test::layerNorm("y", "unread", 8) + test::layerNorm("y", "h", 8) +
      "  %o : Tensor = aten::linear(%h, %head__weight, %none)\n"
      "  return (%o)\n";
  IrModel model{ir,
                {spec("2x3x4")},
                {{"fc__weight", spec("8x4")}, {"fc__bias", spec("8")}, {"probe__weight", spec("5x8")},
                 {"probe__bias", spec("5")}, {"ln_w", spec("8:float32[0.5,1.5)")}, {"ln_b", spec("8")},
                 {"head__weight", spec("5x8")}}};
  auto a = analyzeIr(model);
  const auto& g = a.model.graph;
  for (std::size_t n = 0; n < g.nodeCount(); ++n)
    for (auto in : g.node(n).inputs)
      if (auto p = g.value(in).param; p != kNone) CHECK(g.parameter(p).path.rfind("probe", 0) != 0);
  REQUIRE(a.result.layerNorms.size() == 2);  // the unread LN stays and gets its verdict
  REQUIRE(a.result.foldableCount() == 2);
  // The fold's own float64 check is the oracle; the output depends on the input.
  FoldOptions o;
  o.randomInputs = 2;
  auto folded = foldModel(a.model, a.result, o);
  const auto& v = folded.report.verification;
  REQUIRE(v.ran);
  CHECK(v.float64Equivalent);
  CHECK(v.worstRelative64 < 1e-10);
  auto module = a.model.torch->module;
  auto x1 = makeInputs({spec("2x3x4")}, 1).at(0), x2 = makeInputs({spec("2x3x4")}, 2).at(0);
  auto o1 = module.forward({x1}).toTensor(), o2 = module.forward({x2}).toTensor();
  CHECK((o1 - o2).abs().max().item<double>() > 1e-3);
}
