// The fold's fused residual add (src/fold/fuse_add_norm.cpp): each aten::add read by a folded
// norm becomes one foldnorm::add_rms_norm; exact (float64 check, and the same float32 bits as the
// unfused fold), safe where the add broadcasts at another batch size, and off with fuseAddNorm.
#include <catch2/catch.hpp>
#include <torch/csrc/jit/serialization/import.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <variant>

#include "foldnorm/fold/fold.h"
#include "foldnorm/ops/rms_norm.h"
#include "foldnorm/torch/torch_model.h"
#include "foldnorm/zoo/eager.h"
#include "foldnorm/zoo/zoo.h"
#include "helpers.h"

using namespace foldnorm;
using foldnorm::test::ScratchDir;

namespace {

int countKind(const torch::jit::Graph& graph, const char* kind) {
  int n = 0;
  for (const auto* node : graph.nodes()) n += node->kind() == c10::Symbol::fromQualString(kind) ? 1 : 0;
  return n;
}

/// What the fold may fuse, counted on our IR (not on the TorchScript graph the fold rewrites):
/// foldable LNs whose input is an aten::add with alpha 1 of two tensors recorded with one shape.
int fusablePairs(const ImportedModel& model, const AnalysisResult& analysis) {
  const Graph& g = model.graph;
  int n = 0;
  for (const auto& v : analysis.layerNorms) {
    if (!v.foldable) continue;
    const auto& in = g.value(g.node(v.info.node).inputs.at(0));
    if (in.producer == kNone) continue;
    const auto& add = g.node(in.producer);
    if (add.kind != "aten::add" || add.inputs.size() != 3) continue;
    const auto& alpha = g.value(add.inputs[2]).constant;
    const auto& a = g.value(add.inputs[0]).tensor;
    const auto& b = g.value(add.inputs[1]).tensor;
    if (!alpha || !std::holds_alternative<int64_t>(*alpha) || std::get<int64_t>(*alpha) != 1) continue;
    if (a && b && a->shape == b->shape && a->dtype == b->dtype) ++n;
  }
  return n;
}

std::vector<at::Tensor> run(const FoldedModel& folded, const std::vector<at::Tensor>& inputs) {
  torch::NoGradGuard noGrad;
  auto m = folded.torch->module;
  return zoo::runTraced(m, inputs);
}

void checkBitwiseEqual(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
  REQUIRE(a.size() == b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    INFO("output " << i);
    CHECK(a[i].sizes() == b[i].sizes());
    CHECK(a[i].equal(b[i]));
  }
}

FoldOptions unfused() {
  FoldOptions o;
  o.fuseAddNorm = false;
  return o;
}

// Two residual adds, each read by a foldable LN; the first sum is also read by the second add
// (it takes the fused node's sum output). Linear leaves make every LN input mean-zero.
IrModel twoAdds(const char* xShape, const char* yShape) {
  std::string ir =
      "graph(%x : Tensor, %y : Tensor, %w1 : Tensor, %b1 : Tensor, %w2 : Tensor, %b2 : Tensor, %w3 : Tensor,"
      " %b3 : Tensor, %ln_w : Tensor, %ln_b : Tensor):\n"
      "  %one : int = prim::Constant[value=1]()\n"
      "  %u : Tensor = aten::linear(%x, %w1, %b1)\n"
      "  %v : Tensor = aten::linear(%y, %w2, %b2)\n"
      "  %s : Tensor = aten::add(%u, %v, %one)\n" +
      test::layerNorm("s", "z", 8) +
      "  %m : Tensor = aten::linear(%z, %w3, %b3)\n"
      "  %s2 : Tensor = aten::add(%s, %m, %one)\n" +
      test::layerNorm("s2", "out", 8) + "  return (%out)\n";
  auto spec = [](const char* s) { return parseInputSpec(s); };
  return {ir,
          {spec(xShape), spec(yShape)},
          {{"w1", spec("8x8")}, {"b1", spec("8")}, {"w2", spec("8x8")}, {"b2", spec("8")}, {"w3", spec("8x8")},
           {"b3", spec("8")}, {"ln_w", spec("8:float32[0.5,1.5)")}, {"ln_b", spec("8")}}};
}

}  // namespace

TEST_CASE("the fold fuses each residual add into the folded norm it feeds, exactly", "[fold][fused]") {
  auto a = test::analyzeIr(twoAdds("2x5x8", "2x5x8"));
  REQUIRE(a.result.foldableCount() == 2);
  REQUIRE(fusablePairs(a.model, a.result) == 2);
  auto fused = foldModel(a.model, a.result);
  auto plain = foldModel(a.model, a.result, unfused());
  CHECK(fused.report.fusedAddNorms == 2);
  CHECK(plain.report.fusedAddNorms == 0);
  CHECK(countKind(*fused.torch->graph, ops::kAddRmsNormOp) == 2);
  CHECK(countKind(*fused.torch->graph, ops::kRmsNormOp) == 0);
  CHECK(countKind(*fused.torch->graph, "aten::add") == 0);
  CHECK(countKind(*plain.torch->graph, ops::kRmsNormOp) == 2);
  REQUIRE(fused.report.verification.float64Equivalent);
  CHECK(fused.report.verification.worstRelative64 < 1e-12);
  CHECK(toJson(fused.report)["fused_add_norms"] == 2);
  CHECK_THAT(toText(fused.report), Catch::Contains("fused 2 residual add(s)"));

  auto in1 = makeInputs(a.model.inputSpecs, 1), in2 = makeInputs(a.model.inputSpecs, 2);
  auto out1 = run(fused, in1), out2 = run(fused, in2);
  checkBitwiseEqual(out1, run(plain, in1));
  checkBitwiseEqual(out2, run(plain, in2));
  CHECK_FALSE(out1.at(0).equal(out2.at(0)));  // the output depends on the input
}

TEST_CASE("an add recorded with equal shapes that broadcasts at another batch size still runs", "[fold][fused]") {
  // Recorded at batch 1, x [1,5,8] + y [1,5,8] looks like a same-shape add; at batch 3 y broadcasts.
  auto a = test::analyzeIr(twoAdds("1x5x8", "1x5x8"));
  REQUIRE(a.result.foldableCount() == 2);
  auto fused = foldModel(a.model, a.result);
  auto plain = foldModel(a.model, a.result, unfused());
  REQUIRE(fused.report.fusedAddNorms == 2);
  auto specs = a.model.inputSpecs;
  specs.at(0).shape = {3, 5, 8};
  auto in = makeInputs(specs, 4);
  auto out = run(fused, in);
  CHECK(out.at(0).sizes() == at::IntArrayRef{3, 5, 8});
  checkBitwiseEqual(out, run(plain, in));
}

TEST_CASE("adds the fused op cannot take exactly are left as they are", "[fold][fused]") {
  SECTION("a broadcasting add (recorded shapes differ)") {
    auto a = test::analyzeIr(twoAdds("2x5x8", "1x5x8"));
    REQUIRE(a.result.foldableCount() == 2);
    CHECK(fusablePairs(a.model, a.result) == 1);  // only the second add: [2,5,8] + [2,5,8]
    auto fused = foldModel(a.model, a.result);
    CHECK(fused.report.fusedAddNorms == 1);
    CHECK(countKind(*fused.torch->graph, ops::kRmsNormOp) == 1);
    CHECK(fused.report.verification.float64Equivalent);
  }
  SECTION("fuseAddNorm off") {
    auto a = test::analyzeIr(twoAdds("2x5x8", "2x5x8"));
    auto plain = foldModel(a.model, a.result, unfused());
    CHECK(countKind(*plain.torch->graph, ops::kAddRmsNormOp) == 0);
    CHECK(countKind(*plain.torch->graph, "aten::add") == 2);
    CHECK(plain.report.verification.float64Equivalent);
  }
}

namespace {

struct ZooFolds {
  ImportedModel model;
  FoldedModel fused, plain;
  int expected = 0;
};

ZooFolds foldZoo(const std::string& name, const ScratchDir& dir) {
  auto modelPath = (dir.path / (name + ".pt")).string();
  ZooBuildOptions zo;
  zo.preset = "tiny";
  buildZooModel(name, modelPath, zo);
  ZooFolds z{importTorchScript(modelPath), {}, {}, 0};
  auto analysis = analyzeFoldability(z.model.graph);
  z.expected = fusablePairs(z.model, analysis);
  z.fused = foldModel(z.model, analysis);
  z.plain = foldModel(z.model, analysis, unfused());
  return z;
}

}  // namespace

TEST_CASE("the fused fold of the zoo's GPT-2, BERT and OPT: counted, exact, the unfused fold's bits",
          "[fold][fused][zoo]") {
  auto name = GENERATE(as<std::string>{}, "gpt2", "bert", "opt");
  INFO("model " << name);
  ScratchDir dir;
  auto z = foldZoo(name, dir);
  // From the architectures (2 layers each): GPT-2 fuses ln_2 of both blocks, ln_1 of block 1
  // and ln_f (block 0's ln_1 reads wte + wpe, [B,T,C] + [T,C]: a broadcast, left alone); OPT the
  // same four (its first norm reads dropout(embeddings), not an add); BERT folds only its
  // embeddings' LN (post-LN layers stay LayerNorm), whose input adds a [1,T,C] position table to
  // [B,T,C] at the traced batch: a broadcast, left alone, so nothing is fused.
  const std::map<std::string, int> pinned{{"gpt2", 4}, {"bert", 0}, {"opt", 4}};
  CHECK(z.expected == pinned.at(name));
  REQUIRE(z.fused.report.verification.float64Equivalent);
  CHECK(z.fused.report.fusedAddNorms == z.expected);
  CHECK(countKind(*z.fused.torch->graph, ops::kAddRmsNormOp) == z.expected);
  CHECK(countKind(*z.fused.torch->graph, ops::kRmsNormOp) + z.expected ==
        countKind(*z.plain.torch->graph, ops::kRmsNormOp));

  // Same float32 bits as the unfused fold, at the traced shape and at another batch and length.
  auto specs = z.model.inputSpecs;
  for (auto& s : specs) s.shape = {3, 7};
  auto in1 = z.model.torch->exampleInputs, in2 = zoo::makeInputs(specs, 5);
  auto out1 = run(z.fused, in1), out2 = run(z.fused, in2);
  checkBitwiseEqual(out1, run(z.plain, in1));
  checkBitwiseEqual(out2, run(z.plain, in2));
  CHECK_FALSE(out1.at(0).sizes() == out2.at(0).sizes());
}

TEST_CASE("the saved fused fold of the zoo's GPT-2, BERT and OPT runs in Python: same bits",
          "[fold][fused][python][zoo]") {
  auto name = GENERATE(as<std::string>{}, "gpt2", "bert", "opt");
  INFO("model " << name);
  ScratchDir dir;
  auto z = foldZoo(name, dir);
  REQUIRE(z.fused.report.verification.float64Equivalent);
  auto in = z.model.torch->exampleInputs;
  auto out = run(z.fused, in);
  auto foldedPath = (dir.path / (name + "-folded.pt")).string();
  saveFolded(z.fused, z.model, foldedPath);
  torch::jit::Module data(c10::QualifiedName("__torch__.foldnorm_test.FoldData"));
  for (std::size_t i = 0; i < in.size(); ++i) data.register_buffer("input_" + std::to_string(i), in[i]);
  for (std::size_t i = 0; i < out.size(); ++i) data.register_buffer("output_" + std::to_string(i), out[i]);
  data.save((dir.path / "data.pt").string());
  auto log = (dir.path / "python.log").string();
  std::string command = std::string(FOLDNORM_PYTHON) + " " + FOLDNORM_SOURCE_DIR +
                        "/tests/python/check_folded_model.py " + FOLDNORM_OPS_LIBRARY + " " + foldedPath + " " +
                        (dir.path / "data.pt").string() + " --fused " + std::to_string(z.expected) + " > " + log +
                        " 2>&1";
  int rc = std::system(command.c_str());
  std::ifstream logIn(log);
  std::string text((std::istreambuf_iterator<char>(logIn)), std::istreambuf_iterator<char>());
  INFO(text);
  CHECK(rc == 0);
  CHECK_THAT(text, Catch::Contains(": ok"));
}
