// The two folds beyond the paper (docs/method.md sections 7 and 8, issue 14): a per-channel scale
// after a leaf absorbed by centering the scaled map, and one inserted centering where a stream
// starts at a non-leaf. Unit tests on IR models (the refusals with their numbers, the settings
// that turn each off) and fixture tests on the hand-written models of
// tests/fixtures/edge_beyond_paper.py, whose expectations the fixture oracle confirmed in float64.
#include <catch2/catch.hpp>

#include <map>

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

/// The bias as its own op (the forms traces show), then a table t and an LN over 8 channels:
///  "linear":  g * (linear(x, w, None) + b)
///  "matmul":  g * (b + x @ w^T)
///  "conv":    g.view(8,1,1) * (conv2d(img, cw, None) + b.view(8,1,1)), channels last
///  "scale-then-bias":  linear(x, w, None) * g + b
///  "bias-read-elsewhere": the same, and the LN output is multiplied by b too (b has another reader)
IrModel separateBiasModel(const std::string& form) {
  auto spec = [](const char* s) { return parseInputSpec(s); };
  std::string ir = std::string("graph(%x : Tensor, %w : Tensor, %cw : Tensor, %b : Tensor, %g : Tensor, %t : Tensor,"
                               " %lnw : Tensor, %lnb : Tensor):\n") +
                   kHeader + "  %none : NoneType = prim::Constant()\n";
  if (form == "linear") {
    ir += "  %y : Tensor = aten::linear(%x, %w, %none)\n  %yb : Tensor = aten::add(%y, %b, %one)\n"
          "  %h : Tensor = aten::mul(%g, %yb)\n";
  } else if (form == "matmul") {
    ir += "  %wt : Tensor = aten::t(%w)\n  %y : Tensor = aten::matmul(%x, %wt)\n"
          "  %yb : Tensor = aten::add(%b, %y, %one)\n  %h : Tensor = aten::mul(%yb, %g)\n";
  } else if (form == "conv") {
    ir += "  %cs : int[] = prim::Constant[value=[1, 1]]()\n  %cp : int[] = prim::Constant[value=[0, 0]]()\n"
          "  %c : Tensor = aten::conv2d(%x, %cw, %none, %cs, %cp, %cs, %one)\n"
          "  %gs : int[] = prim::Constant[value=[8, 1, 1]]()\n  %bc : Tensor = aten::view(%b, %gs)\n"
          "  %cb : Tensor = aten::add(%c, %bc, %one)\n  %gc : Tensor = aten::view(%g, %gs)\n"
          "  %hc : Tensor = aten::mul(%cb, %gc)\n  %pm : int[] = prim::Constant[value=[0, 2, 3, 1]]()\n"
          "  %h : Tensor = aten::permute(%hc, %pm)\n";
  } else {
    ir += "  %y : Tensor = aten::linear(%x, %w, %none)\n  %ys : Tensor = aten::mul(%y, %g)\n"
          "  %h : Tensor = aten::add(%ys, %b, %one)\n";
  }
  ir += "  %r : Tensor = aten::add(%h, %t, %one)\n"
        "  %z : Tensor = aten::layer_norm(%r, %s, %lnw, %lnb, %eps, %f)\n";
  ir += form == "bias-read-elsewhere" ? "  %zb : Tensor = aten::mul(%z, %b)\n  return (%zb)\n" : "  return (%z)\n";
  return {ir, {spec(form == "conv" ? "2x4x3x3" : "2x3x4")},
          {{"w", spec("8x4")}, {"cw", spec("8x4x1x1")}, {"b", spec("8")}, {"g", spec("8:float32[0.5,2)")},
           {"t", spec("8")}, {"lnw", spec("8")}, {"lnb", spec("8")}}};
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

/// MLP-Mixer in small: e = linear(x) (the stem, mean-zero along channels); ln0; a token-mixing
/// linear on the transposed LN output, transposed back (mean-zero along tokens, not channels);
/// r1 = e + tok; ln1; a channel linear; r2 = r1 + c; ln2. Tokens 4, channels 8. With
/// `sideReader`, a linear also reads the token-mixing output (its result joins the stream).
IrModel mixerModel(bool sideReader) {
  auto spec = [](const char* s) { return parseInputSpec(s); };
  std::string ir =
      std::string("graph(%x : Tensor, %we : Tensor, %be : Tensor, %wt : Tensor, %bt : Tensor, %wc : Tensor,"
                  " %bc : Tensor, %ws : Tensor, %bs : Tensor, %lnw : Tensor, %lnb : Tensor):\n") +
      kHeader +
      "  %two : int = prim::Constant[value=2]()\n"
      "  %e : Tensor = aten::linear(%x, %we, %be)\n"
      "  %n0 : Tensor = aten::layer_norm(%e, %s, %lnw, %lnb, %eps, %f)\n"
      "  %t : Tensor = aten::transpose(%n0, %one, %two)\n"
      "  %a : Tensor = aten::linear(%t, %wt, %bt)\n"
      "  %tok : Tensor = aten::transpose(%a, %one, %two)\n"
      "  %r1 : Tensor = aten::add(%e, %tok, %one)\n"
      "  %n1 : Tensor = aten::layer_norm(%r1, %s, %lnw, %lnb, %eps, %f)\n"
      "  %c : Tensor = aten::linear(%n1, %wc, %bc)\n" +
      (sideReader ? "  %side : Tensor = aten::linear(%tok, %ws, %bs)\n"
                    "  %c2 : Tensor = aten::add(%c, %side, %one)\n"
                    "  %r2 : Tensor = aten::add(%r1, %c2, %one)\n"
                  : "  %r2 : Tensor = aten::add(%r1, %c, %one)\n") +
      "  %z : Tensor = aten::layer_norm(%r2, %s, %lnw, %lnb, %eps, %f)\n"
      "  return (%z)\n";
  return {ir, {spec("2x4x6")},
          {{"we", spec("8x6")}, {"be", spec("8")}, {"wt", spec("4x4")}, {"bt", spec("4")}, {"wc", spec("8x8")},
           {"bc", spec("8")}, {"ws", spec("8x8")}, {"bs", spec("8")}, {"lnw", spec("8")}, {"lnb", spec("8")}}};
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

TEST_CASE("a token-mixing output mean-zero along the wrong axis is an insertion point", "[analysis][insert]") {
  AnalysisOptions off;
  off.insertCentering = false;
  auto before = analyzeIr(mixerModel(false), off);
  REQUIRE(before.result.layerNorms.size() == 3);
  CHECK(before.ln(0).foldable);  // reads the stem linear
  CHECK(before.ln(1).reason == VerdictReason::Axes);
  CHECK(before.ln(2).reason == VerdictReason::Axes);

  auto a = analyzeIr(mixerModel(false));
  const auto& g = a.model.graph;
  CHECK(a.result.foldableCount() == 3);
  REQUIRE(a.result.insertions.size() == 1);
  const auto& ic = a.result.insertions[0];
  CHECK(ic.inserted);
  // Moved back through the transpose to the token linear, centered along its channel axis 1.
  CHECK(g.node(ic.after).kind == "aten::linear");
  CHECK(ic.axes == AxisSet::of({1}));
  CHECK(ic.frees.size() == 2);
  // Executed and verified in float64 (the folded model against the original, a second input set too).
  auto report = foldAndVerify(a);
  CHECK(report.inserted.size() == 1);
  CHECK(report.folded.size() == 3);

  SECTION("refused where a linear also reads the token-mixing output, naming it") {
    auto r = analyzeIr(mixerModel(true));
    const auto& rg = r.model.graph;
    CHECK(r.ln(0).foldable);
    CHECK(r.ln(1).reason == VerdictReason::Axes);
    CHECK(r.ln(2).reason == VerdictReason::Axes);
    REQUIRE(r.result.insertions.size() == 1);
    const auto& refused = r.result.insertions[0];
    CHECK_FALSE(refused.inserted);
    REQUIRE(refused.consumer != kNone);
    CHECK(rg.node(refused.consumer).kind == "aten::linear");
    CHECK(rg.value(rg.node(refused.consumer).inputs.at(1)).param == paramNamed(rg, "ws"));
    CHECK(refused.why.find("aten::linear") != std::string::npos);
    CHECK(describeInsertion(rg, refused).find("no centering inserted") != std::string::npos);
  }
}

TEST_CASE("a bias added as its own op is centered with the scale, before or after it", "[analysis][scale]") {
  auto form = GENERATE(as<std::string>{}, "linear", "matmul", "conv", "scale-then-bias");
  INFO(form);
  auto a = analyzeIr(separateBiasModel(form));
  const auto& g = a.model.graph;
  REQUIRE(a.result.layerNorms.size() == 1);
  CHECK(a.ln(0).foldable);
  CHECK(a.result.insertions.empty());  // folded by centering parameters alone
  // The plan names both: w scaled-centered by g; b scaled-centered by g when it is added before
  // the scale, plainly centered when after it. t plainly; g itself never.
  auto gamma = paramNamed(g, "g");
  auto bias = paramNamed(g, "b");
  auto weight = paramNamed(g, form == "conv" ? "cw" : "w");
  std::map<ParamId, std::vector<CenterAction>> planned;
  for (const auto& p : a.result.plan) planned[p.param] = p.actions;
  CHECK(planned.count(gamma) == 0);
  REQUIRE(planned[weight].size() == 1);
  CHECK(planned[weight][0].scale == gamma);
  REQUIRE(planned[bias].size() == 1);
  CHECK(planned[bias][0].scale == (form == "scale-then-bias" ? kNone : gamma));
  REQUIRE(planned[paramNamed(g, "t")].size() == 1);
  CHECK(planned[paramNamed(g, "t")][0].scale == kNone);
  if (form != "scale-then-bias") {
    // One leaf of the plan covers the weight op and the separate bias (the JSON lists both).
    auto j = toJson(g, a.result, "m.pt");
    REQUIRE(j["scale_absorptions"].size() == 1);
    CHECK(j["scale_absorptions"][0]["scale"] == "g");
  }
  auto report = foldAndVerify(a);
  CHECK(report.folded.size() == 1);
}

TEST_CASE("a separate bias: a zero gamma entry and a bias read elsewhere", "[analysis][scale]") {
  SECTION("gamma * ((W h) + b) with a zero entry of gamma keeps, saying so") {
    AnalysisOptions o;
    o.insertCentering = false;  // otherwise one centering after the product frees the LN (exact)
    auto m = importIrModel(separateBiasModel("linear"));
    m.graph.parameter(paramNamed(m.graph, "g")).absMin = 0;
    auto r = analyzeFoldability(m.graph, o);
    CHECK_FALSE(r.layerNorms[0].foldable);
    CHECK(r.layerNorms[0].reason == VerdictReason::Breaker);
    CHECK(r.layerNorms[0].explanation.find("zero entry") != std::string::npos);
  }
  SECTION("(W h) * gamma + b with the bias's read also used elsewhere keeps, naming that reader") {
    // Here one read of b feeds both the sum and a product with the LN output (an IR model reads
    // each parameter once): centering b would change that product, so the leaf b is unsafe. (Two
    // reads of one storage, as traces have them, untie instead: test_fold.cpp's tied weights.)
    auto a = analyzeIr(separateBiasModel("bias-read-elsewhere"));
    const auto& g = a.model.graph;
    INFO(toString(a.ln(0).reason) << ": " << a.ln(0).explanation);
    CHECK_FALSE(a.ln(0).foldable);
    CHECK(a.ln(0).reason == VerdictReason::UnsafeShift);
    REQUIRE(a.ln(0).consumer != kNone);
    const auto& reader = g.node(a.ln(0).consumer);
    CHECK(reader.kind == "aten::mul");
    CHECK(g.value(reader.inputs.at(1)).param == paramNamed(g, "b"));
    CHECK(a.ln(0).explanation.find("aten::mul") != std::string::npos);
  }
}
