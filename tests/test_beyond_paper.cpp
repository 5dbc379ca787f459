// The two folds beyond the paper (method.md sections 7 and 8, issue 14): a per-channel scale
// after a leaf absorbed by centering the scaled map, and one inserted centering where a stream
// starts at a non-leaf. Unit tests on IR models (the refusals with their numbers, the settings
// that turn each off) and fixture tests on the hand-written models of
// tests/fixtures/edge_beyond_paper.py, whose expectations the fixture oracle confirmed in float64.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include "foldnorm/fold/fold.h"
#include "helpers.h"

using namespace foldnorm;
using foldnorm::test::analyzeIr;

namespace {

const char* kHeader =
    "  %s : int[] = prim::Constant[value=[8]]()\n"
    "  %eps : float = prim::Constant[value=1.0000000000000001e-05]()\n"
    "  %f : bool = prim::Constant[value=0]()\n"
    "  %one : int = prim::Constant[value=1]()\n";

/// x -> linear -> * g -> + x0 (a parameter) -> LN: foldable only by absorbing g.
IrModel scaledModel() {
  auto spec = [](const char* s) { return parseInputSpec(s); };
  std::string ir = std::string("graph(%x : Tensor, %w : Tensor, %b : Tensor, %g : Tensor, %t : Tensor, %lnw : Tensor, %lnb : Tensor):\n") +
                   kHeader +
                   "  %y : Tensor = aten::linear(%x, %w, %b)\n"
                   "  %h : Tensor = aten::mul(%y, %g)\n"
                   "  %r : Tensor = aten::add(%h, %t, %one)\n"
                   "  %z : Tensor = aten::layer_norm(%r, %s, %lnw, %lnb, %eps, %f)\n"
                   "  return (%z)\n";
  return {ir, {spec("2x3x4")},
          {{"w", spec("8x4")}, {"b", spec("8")}, {"g", spec("8:float32[0.5,2)")}, {"t", spec("8")},
           {"lnw", spec("8")}, {"lnb", spec("8")}}};
}

/// e = LN0(x); r = e + linear(LN1(e)); LN2(r) [and e returned too]: the stream starts at LN0's output.
IrModel streamModel(bool returnsStream) {
  auto spec = [](const char* s) { return parseInputSpec(s); };
  std::string ir = std::string("graph(%x : Tensor, %w : Tensor, %b : Tensor, %lnw : Tensor, %lnb : Tensor):\n") +
                   kHeader +
                   "  %e : Tensor = aten::layer_norm(%x, %s, %lnw, %lnb, %eps, %f)\n"
                   "  %n1 : Tensor = aten::layer_norm(%e, %s, %lnw, %lnb, %eps, %f)\n"
                   "  %a : Tensor = aten::linear(%n1, %w, %b)\n"
                   "  %r : Tensor = aten::add(%e, %a, %one)\n"
                   "  %z : Tensor = aten::layer_norm(%r, %s, %lnw, %lnb, %eps, %f)\n" +
                   (returnsStream ? "  %out : (Tensor, Tensor) = prim::TupleConstruct(%z, %e)\n  return (%out)\n"
                                  : "  return (%z)\n");
  return {ir, {spec("2x3x8")}, {{"w", spec("8x8")}, {"b", spec("8")}, {"lnw", spec("8")}, {"lnb", spec("8")}}};
}

ParamId paramNamed(const Graph& g, const std::string& path) {
  for (const auto& p : g.parameters())
    if (p.path == path) return p.id;
  FAIL("no parameter " << path);
  return kNone;
}

FoldReport foldAndVerify(const test::Analyzed& a) {
  FoldOptions o;
  o.randomInputs = 1;
  auto folded = foldModel(a.model, a.result, o);
  INFO(toText(folded.report));
  CHECK(folded.report.verification.float64Equivalent);
  CHECK(folded.report.verification.worstRelative64 < 1e-10);
  return folded.report;
}

}  // namespace

TEST_CASE("a per-channel scale after a linear is absorbed by centering the scaled map", "[analysis][scale]") {
  auto a = analyzeIr(scaledModel());
  const auto& g = a.model.graph;
  REQUIRE(a.result.layerNorms.size() == 1);
  CHECK(a.ln(0).foldable);
  auto gamma = paramNamed(g, "g");
  int scaled = 0;
  for (const auto& p : a.result.plan)
    for (const auto& act : p.actions) scaled += act.scale == gamma;
  CHECK(scaled == 2);  // w and b, both scaled by g
  auto j = toJson(g, a.result, "m.pt");
  REQUIRE(j["scale_absorptions"].size() == 1);
  CHECK(j["scale_absorptions"][0]["scale"] == "g");
  CHECK(j["scale_absorptions"][0]["action"] == "scaled centering");
  CHECK(toText(g, a.result).find("absorb g into") != std::string::npos);
  // The fold executes it: float64-equivalent, and g*(W'x+b') + t' is what the RMSNorm sees.
  auto report = foldAndVerify(a);
  CHECK(report.folded.size() == 1);

  SECTION("a zero entry refuses, saying so") {
    auto m = importIrModel(scaledModel());
    m.graph.parameter(paramNamed(m.graph, "g")).absMin = 0;
    auto r = analyzeFoldability(m.graph);
    CHECK_FALSE(r.layerNorms[0].foldable);
    CHECK(r.layerNorms[0].reason == VerdictReason::Breaker);
    CHECK(r.layerNorms[0].explanation.find("g") != std::string::npos);
    CHECK(r.layerNorms[0].explanation.find("zero entry") != std::string::npos);
  }
  SECTION("a range past 1/sqrt(u) of float32 refuses, with the ratio and the bound") {
    auto m = importIrModel(scaledModel());
    auto& p = m.graph.parameter(paramNamed(m.graph, "g"));
    p.absMin = p.absMax / 5000;  // the bound for float32 is 4096
    auto r = analyzeFoldability(m.graph);
    CHECK_FALSE(r.layerNorms[0].foldable);
    CHECK(r.layerNorms[0].explanation.find("5000") != std::string::npos);
    CHECK(r.layerNorms[0].explanation.find("4096") != std::string::npos);
    p.absMin = p.absMax / 4000;  // within the bound
    CHECK(analyzeFoldability(m.graph).layerNorms[0].foldable);
  }
  SECTION("the setting scaleAbsorb turns it off") {
    AnalysisOptions o;
    o.scaleAbsorb = false;
    auto off = analyzeIr(scaledModel(), o);
    CHECK_FALSE(off.ln(0).foldable);
    CHECK(off.ln(0).reason == VerdictReason::TurnedOff);
    CHECK(off.ln(0).explanation.find("scaleAbsorb") != std::string::npos);
  }
}

TEST_CASE("one inserted centering frees the LNs of a stream that starts at an LN output", "[analysis][insert]") {
  auto a = analyzeIr(streamModel(false));
  const auto& g = a.model.graph;
  REQUIRE(a.result.layerNorms.size() == 3);
  CHECK_FALSE(a.ln(0).foldable);  // its input is the model input
  CHECK(a.ln(1).foldable);
  CHECK(a.ln(2).foldable);
  REQUIRE(a.result.insertions.size() == 1);
  const auto& ic = a.result.insertions[0];
  CHECK(ic.inserted);
  CHECK(ic.after == a.ln(0).info.node);
  CHECK(ic.frees.size() == 2);
  CHECK(describeInsertion(g, ic).find("frees 2 LNs, saves 1 mean subtractions") != std::string::npos);
  auto j = toJson(g, a.result, "m.pt");
  CHECK(j["insertions"][0]["inserted"] == true);
  CHECK(j["summary"]["centerings_inserted"] == 1);
  auto report = foldAndVerify(a);
  CHECK(report.inserted.size() == 1);
  CHECK(report.folded.size() == 2);

  SECTION("the setting insertCentering turns it off") {
    AnalysisOptions o;
    o.insertCentering = false;
    auto off = analyzeIr(streamModel(false), o);
    CHECK(off.result.foldableCount() == 0);
    CHECK(off.result.insertions.empty());
  }
  SECTION("refused where the stream is also a model output, naming it") {
    auto r = analyzeIr(streamModel(true));
    CHECK(r.result.foldableCount() == 0);
    REQUIRE(r.result.insertions.size() == 1);
    CHECK_FALSE(r.result.insertions[0].inserted);
    CHECK(r.result.insertions[0].consumer == r.model.graph.returnNode());
    CHECK(r.result.insertions[0].why.find("model output") != std::string::npos);
  }
}
