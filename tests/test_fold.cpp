// The fold: rewrite, verification in float32 and float64, untie, refusal, atomic output.
#include <catch2/catch.hpp>
#include <torch/csrc/jit/serialization/import.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "foldnorm/common/error.h"
#include "foldnorm/fold/fold.h"
#include "foldnorm/torch/torch_model.h"
#include "foldnorm/zoo/zoo.h"
#include "helpers.h"

using namespace foldnorm;
using foldnorm::test::analyzeIr;

namespace {

using foldnorm::test::layerNorm;

InputSpec spec(const char* s) { return parseInputSpec(s); }


/// A small pre-LN transformer-like stream: embedding + position table, two residual blocks of
/// linear-gelu-linear, final LN, tied head (x @ emb^T).
IrModel preLnModel(bool returnHidden) {
  std::string ir =
      "graph(%ids : Tensor, %emb : Tensor, %pos : Tensor, %b0__fc__weight : Tensor, %b0__fc__bias : Tensor,"
      " %b0__proj__weight : Tensor, %b0__proj__bias : Tensor, %b1__fc__weight : Tensor, %b1__fc__bias : Tensor,"
      " %b1__proj__weight : Tensor, %b1__proj__bias : Tensor, %ln_w : Tensor, %ln_b : Tensor):\n"
      "  %pad : int = prim::Constant[value=-1]()\n"
      "  %f : bool = prim::Constant[value=0]()\n"
      "  %one : int = prim::Constant[value=1]()\n"
      "  %app : str = prim::Constant[value=\"tanh\"]()\n"
      "  %e : Tensor = aten::embedding(%emb, %ids, %pad, %f, %f)\n"
      "  %h0 : Tensor = aten::add(%e, %pos, %one)\n";
  for (int b = 0; b < 2; ++b) {
    auto B = "b" + std::to_string(b);
    auto in = "h" + std::to_string(b), out = "h" + std::to_string(b + 1);
    ir += layerNorm(in, B + "_ln", 8) +
          "  %" + B + "_u : Tensor = aten::linear(%" + B + "_ln, %" + B + "__fc__weight, %" + B + "__fc__bias)\n" +
          "  %" + B + "_g : Tensor = aten::gelu(%" + B + "_u, %app)\n" +
          "  %" + B + "_v : Tensor = aten::linear(%" + B + "_g, %" + B + "__proj__weight, %" + B + "__proj__bias)\n" +
          "  %" + out + " : Tensor = aten::add(%" + in + ", %" + B + "_v, %one)\n";
  }
  ir += layerNorm("h2", "final", 8) +
        "  %wt : Tensor = aten::t(%emb)\n"
        "  %logits : Tensor = aten::matmul(%final, %wt)\n";
  ir += returnHidden ? "  %out : (Tensor, Tensor) = prim::TupleConstruct(%logits, %h2)\n  return (%out)\n"
                     : "  return (%logits)\n";
  std::vector<std::pair<std::string, InputSpec>> params{{"emb", spec("20x8")}, {"pos", spec("5x8")}};
  for (int b = 0; b < 2; ++b) {
    auto B = "b" + std::to_string(b);
    params.push_back({B + "__fc__weight", spec("16x8")});
    params.push_back({B + "__fc__bias", spec("16")});
    params.push_back({B + "__proj__weight", spec("8x16")});
    params.push_back({B + "__proj__bias", spec("8")});
  }
  params.push_back({"ln_w", spec("8:float32[0.5,1.5)")});
  params.push_back({"ln_b", spec("8")});
  return {ir, {spec("2x5:int64[0,20)")}, params};
}

std::string tempDir() {
  auto dir = std::filesystem::temp_directory_path() / ("foldnorm-test-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  return dir.string();
}

}  // namespace

TEST_CASE("folding a pre-LN stream with a tied head verifies in float64 and float32", "[fold]") {
  auto a = analyzeIr(preLnModel(false));
  REQUIRE(a.result.foldableCount() == 3);
  REQUIRE(a.planFor("emb"));
  CHECK(a.planFor("emb")->untie);  // the head reads the same attribute: the embedding gets a copy

  FoldOptions o;
  o.randomInputs = 2;
  auto folded = foldModel(a.model, a.result, o);
  const auto& v = folded.report.verification;
  REQUIRE(v.ran);
  CHECK(v.runs == 3);
  CHECK(v.float64Equivalent);
  CHECK(v.worstRelative64 < 1e-10);
  CHECK(v.worstRelative32 < 1e-4);
  CHECK(v.predictionsUnchanged);
  CHECK(folded.report.folded.size() == 3);
  CHECK(folded.report.untied == std::vector<std::string>{"emb"});

  SECTION("the folded graph has RMSNorms and no LayerNorm; the original is untouched") {
    int rms = 0, fused = 0, ln = 0;
    for (auto* n : folded.torch->graph->nodes()) {
      rms += n->kind().toQualString() == std::string("foldnorm::rms_norm");
      fused += n->kind().toQualString() == std::string("foldnorm::add_rms_norm");
      ln += n->kind() == c10::aten::layer_norm;
    }
    // The two LNs reading a residual add [2,5,8] + [2,5,8] run fused with it; the first reads
    // embedding [2,5,8] + position table [5,8], a broadcast, and stays a plain rms_norm.
    CHECK(rms == 1);
    CHECK(fused == 2);
    CHECK(folded.report.fusedAddNorms == 2);
    CHECK(ln == 0);
    int originalLn = 0;
    for (auto* n : a.model.torch->graph->nodes()) originalLn += n->kind() == c10::aten::layer_norm;
    CHECK(originalLn == 3);
    // The untied copy is centered per row; the original table (read by the head) is not.
    auto emb = a.model.torch->module.attr("emb").toTensor();
    CHECK(emb.mean(1).abs().max().item<double>() > 1e-3);
  }
}

TEST_CASE("the fold report names the RMSNorm op the folded LNs became, in text and JSON", "[fold]") {
  auto a = analyzeIr(preLnModel(false));
  for (auto op : {RmsOp::Foldnorm, RmsOp::Aten}) {
    INFO(toString(op));
    FoldOptions o;
    o.rmsOp = op;
    o.randomInputs = 1;
    auto folded = foldModel(a.model, a.result, o);
    CHECK(folded.report.verification.passed());
    CHECK(folded.report.rmsOp == op);
    int atenRms = 0;
    for (auto* n : folded.torch->graph->nodes()) atenRms += n->kind() == c10::aten::rms_norm;
    const auto text = toText(folded.report);
    if (op == RmsOp::Aten) {
      CHECK(atenRms == 3);
      CHECK_THAT(text, Catch::Contains("folded 3 LayerNorm(s) into aten::rms_norm (+ a bias add"));
      CHECK_THAT(text, !Catch::Contains("foldnorm::"));
    } else {
      CHECK(atenRms == 0);
      CHECK_THAT(text, Catch::Contains("folded 3 LayerNorm(s) into foldnorm::rms_norm;"));
    }
    CHECK(toJson(folded.report)["rms_op"] == toString(op));
  }
}

TEST_CASE("a model that returns its hidden states is left as it is, and says so", "[fold]") {
  auto a = analyzeIr(preLnModel(true));
  CHECK(a.result.foldableCount() == 0);
  auto folded = foldModel(a.model, a.result);
  CHECK(folded.report.folded.empty());
  CHECK(folded.report.kept.size() == 3);
  CHECK(folded.report.verification.worstRelative32 == 0.0);
  CHECK(folded.report.verification.worstRelative64 == 0.0);
  CHECK_THAT(toText(folded.report), Catch::Contains("nothing was folded"));
}

TEST_CASE("no untie (--no-untie) keeps a tied model unchanged and explains why", "[fold][tied]") {
  AnalysisOptions ao;
  ao.allowUntie = false;
  auto a = analyzeIr(preLnModel(false), ao);
  CHECK(a.result.foldableCount() == 0);
  for (const auto& v : a.result.layerNorms) CHECK(v.reason == VerdictReason::SharedParameter);
  auto folded = foldModel(a.model, a.result);
  CHECK(folded.report.centered.empty());
  CHECK(folded.report.verification.worstRelative64 == 0.0);
}

TEST_CASE("only (--only) folds just the named LayerNorm, and a name that matches none is an error", "[fold]") {
  auto dir = tempDir();
  auto modelPath = dir + "/gpt2-only.pt";
  ZooBuildOptions zo;
  zo.preset = "tiny";
  buildZooModel("gpt2", modelPath, zo);
  auto model = importTorchScript(modelPath);
  AnalysisOptions ao;
  ao.only = {"no.such.norm"};
  CHECK_THROWS_WITH(analyzeFoldability(model.graph, ao), Catch::Contains("no LayerNorm has module path no.such.norm"));
  ao.only = {"transformer.ln_f"};
  auto result = analyzeFoldability(model.graph, ao);
  REQUIRE(result.layerNorms.size() == 5);
  for (const auto& v : result.layerNorms) {
    INFO(v.info.modulePath);
    CHECK(v.foldable == (v.info.modulePath == "transformer.ln_f"));
    if (!v.foldable) CHECK(v.reason == VerdictReason::NotSelected);
  }
  auto folded = foldModel(model, result);
  CHECK(folded.report.folded.size() == 1);
  CHECK(folded.report.verification.float64Equivalent);
  test::removeFlatDir(dir);
}

TEST_CASE("float64 verification re-types every baked float32 dtype, even one constant used many times",
          "[fold]") {
  // Traces share one `6` (float32) constant between casts and softmax dtypes (OPT's attention does
  // this). Each use must become float64, or the float64 run mixes dtypes and fails.
  std::string ir =
      "graph(%x : Tensor, %fc__weight : Tensor, %fc__bias : Tensor, %ln_w : Tensor, %ln_b : Tensor,"
      " %head__weight : Tensor, %head__bias : Tensor):\n"
      "  %f32 : int = prim::Constant[value=6]()\n"
      "  %last : int = prim::Constant[value=-1]()\n"
      "  %f : bool = prim::Constant[value=0]()\n"
      "  %none : NoneType = prim::Constant()\n"
      "  %y : Tensor = aten::linear(%x, %fc__weight, %fc__bias)\n" +
      layerNorm("y", "z", 8) +
      "  %a : Tensor = aten::to(%z, %f32, %f, %f, %none)\n"
      "  %s : Tensor = aten::softmax(%a, %last, %f32)\n"
      "  %logits : Tensor = aten::linear(%s, %head__weight, %head__bias)\n"
      "  %xc : Tensor = aten::to(%x, %f32, %f, %f, %none)\n"
      "  %out : (Tensor, Tensor) = prim::TupleConstruct(%logits, %xc)\n"
      "  return (%out)\n";
  IrModel m{ir,
            {spec("2x3x4")},
            {{"fc__weight", spec("8x4")},
             {"fc__bias", spec("8")},
             {"ln_w", spec("8")},
             {"ln_b", spec("8")},
             {"head__weight", spec("5x8")},
             {"head__bias", spec("5")}}};
  auto a = analyzeIr(m);
  REQUIRE(a.result.foldableCount() == 1);
  auto folded = foldModel(a.model, a.result);
  CHECK(folded.report.verification.float64Equivalent);
  CHECK(folded.report.verification.worstRelative64 < 1e-12);
}

TEST_CASE("a saved fold loads in C++ and writes atomically, and bad output paths are refused", "[fold][io]") {
  auto a = analyzeIr(preLnModel(false));
  auto folded = foldModel(a.model, a.result);
  auto dir = tempDir();
  auto out = dir + "/folded.pt";
  a.model.path = dir + "/input.pt";
  a.model.torch->module.save(a.model.path);

  SECTION("saved and reloaded it computes the same outputs, with the spec and report embedded") {
    saveFolded(folded, a.model, out);
    CHECK_FALSE(std::filesystem::exists(out + ".tmp-" + std::to_string(::getpid())));
    torch::jit::ExtraFilesMap extra{{kInputSpecExtraFile, ""}, {kFoldReportExtraFile, ""}};
    auto loaded = torch::jit::load(out, c10::kCPU, extra);
    CHECK(inputSpecsFromJson(extra[kInputSpecExtraFile]) == a.model.inputSpecs);
    CHECK_THAT(extra[kFoldReportExtraFile], Catch::Contains("foldnorm-fold/1"));
    auto inputs = a.model.torch->exampleInputs;
    std::vector<c10::IValue> args(inputs.begin(), inputs.end());
    auto reloaded = loaded.forward(args).toTensor();
    auto expected = runGraph(folded.torch->module, folded.torch->graph, inputs).at(0);
    CHECK(reloaded.allclose(expected, 0, 0));
  }
  SECTION("a killed save's temporary file is removed by the next save, a running one's is kept") {
    const std::string dead = out + ".tmp-" + std::to_string(foldnorm::test::deadProcessId());
    const std::string running = out + ".tmp-1";  // init runs as long as the machine
    std::ofstream(dead) << "half a model";
    std::ofstream(running) << "another save in progress";
    saveFolded(folded, a.model, out);
    CHECK_FALSE(std::filesystem::exists(dead));
    CHECK(std::filesystem::exists(running));
    CHECK(std::filesystem::exists(out));
    std::filesystem::remove(running);
  }
  SECTION("the input path is refused") {
    CHECK_THROWS_WITH(checkOutputPath(a.model.path, a.model.path), Catch::Contains("refusing to overwrite"));
    CHECK_THROWS_WITH(saveFolded(folded, a.model, a.model.path), Catch::Contains("refusing to overwrite"));
  }
  SECTION("a missing or unwritable directory is refused before any work") {
    CHECK_THROWS_WITH(checkOutputPath(a.model.path, dir + "/missing/out.pt"), Catch::Contains("does not exist"));
    if (::geteuid() != 0) {
      std::filesystem::permissions(dir, std::filesystem::perms::owner_read | std::filesystem::perms::owner_exec);
      CHECK_THROWS_WITH(checkOutputPath(a.model.path, out), Catch::Contains("not writable"));
      std::filesystem::permissions(dir, std::filesystem::perms::owner_all);
    }
    CHECK_THROWS_WITH(checkOutputPath(a.model.path, dir), Catch::Contains("is a directory"));
  }
  test::removeFlatDir(dir);
}

TEST_CASE("the float64 check catches a wrong fold", "[fold]") {
  // Sabotage: fold an LN whose input is NOT mean-zero (a model input). Verification must say so.
  auto ir = IrModel{"graph(%x : Tensor, %ln_w : Tensor, %ln_b : Tensor):\n" + layerNorm("x", "z", 8) +
                        "  return (%z)\n",
                    {spec("4x8")}, {{"ln_w", spec("8")}, {"ln_b", spec("8")}}};
  auto a = analyzeIr(ir);
  REQUIRE_FALSE(a.result.layerNorms.at(0).foldable);
  a.result.layerNorms.at(0).foldable = true;  // what a wrong analysis would claim
  auto folded = foldModel(a.model, a.result);
  CHECK_FALSE(folded.report.verification.float64Equivalent);
  CHECK(folded.report.verification.worstRelative64 > 1e-3);
}

TEST_CASE("the folded built-in GPT-2 runs in Python with the op library: same outputs", "[fold][python][zoo]") {
  auto dir = tempDir();
  auto modelPath = dir + "/gpt2.pt", foldedPath = dir + "/gpt2-folded.pt";
  ZooBuildOptions zo;
  zo.preset = "tiny";
  buildZooModel("gpt2", modelPath, zo);
  auto model = importTorchScript(modelPath);
  auto analysis = analyzeFoldability(model.graph);
  CHECK(analysis.foldableCount() == analysis.layerNorms.size());
  auto folded = foldModel(model, analysis);
  REQUIRE(folded.report.verification.float64Equivalent);
  CHECK(folded.report.verification.worstRelative64 < 1e-10);
  saveFolded(folded, model, foldedPath);

  auto loaded = torch::jit::load(foldedPath);
  auto inputs = model.torch->exampleInputs;
  std::vector<c10::IValue> args(inputs.begin(), inputs.end());
  auto output = loaded.forward(args).toTensor();
  torch::jit::Module data(c10::QualifiedName("__torch__.foldnorm_test.FoldData"));
  for (std::size_t i = 0; i < inputs.size(); ++i) data.register_buffer("input_" + std::to_string(i), inputs[i]);
  data.register_buffer("output_0", output);
  data.save(dir + "/data.pt");
  auto log = dir + "/python.log";
  std::string command = std::string(FOLDNORM_PYTHON) + " " + FOLDNORM_SOURCE_DIR +
                        "/tests/python/check_folded_model.py " + FOLDNORM_OPS_LIBRARY + " " + foldedPath + " " +
                        dir + "/data.pt > " + log + " 2>&1";
  int rc = std::system(command.c_str());
  std::ifstream in(log);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  INFO(text);
  CHECK(rc == 0);
  CHECK_THAT(text, Catch::Contains(": ok"));
  test::removeFlatDir(dir);
}
