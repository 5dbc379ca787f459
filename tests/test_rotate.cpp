// Issue 30: rotation-ready models. The fold's norms lose their affine into their linear readers,
// the residual stream is rotated by an orthogonal Q, and the result equals the original in
// float64 (the oracle: the original model run in float64). Skipping a reader or leaving out a
// bias must fail that check; models whose streams cannot rotate are refused with the reason.
#include <catch2/catch.hpp>

#include <torch/script.h>

#include "foldnorm/fold/rotate.h"
#include "foldnorm/torch/torch_model.h"
#include "foldnorm/zoo/zoo.h"
#include "helpers.h"
#include "skip.h"

using namespace foldnorm;
namespace jit = torch::jit;

namespace {

struct Rotated {
  ImportedModel model;
  RotatedModel rotated;
};

Rotated rotateZoo(const std::string& name, const test::ScratchDir& dir, const RotateOptions& ro = {}) {
  const auto path = (dir.path / (name + ".pt")).string();
  ZooBuildOptions zo;
  zo.preset = "tiny";
  buildZooModel(name, path, zo);
  Rotated r{importTorchScript(path), {}};
  auto analysis = analyzeFoldability(r.model.graph);
  FoldOptions fo;
  fo.randomInputs = 1;
  r.rotated = rotateModel(r.model, analysis, fo, ro);
  return r;
}

int countRotated(const RotateReport& r) {
  int n = 0;
  for (const auto& s : r.streams) n += s.rotated ? 1 : 0;
  return n;
}

double orthogonalityError(const at::Tensor& q) {
  const auto n = q.size(0);
  return (q.matmul(q.t()) - at::eye(n, at::kDouble)).abs().max().item<double>();
}

}  // namespace

TEST_CASE("rotation matrices are orthogonal: Hadamard where a construction exists, random otherwise", "[rotate]") {
  for (int64_t width : {1, 2, 4, 12, 20, 48, 64, 96, 768}) {
    INFO("width " << width);
    RotationKind used;
    auto q = rotationMatrix(width, RotationKind::Hadamard, 7, &used);
    CHECK(used == RotationKind::Hadamard);
    CHECK(orthogonalityError(q) < 1e-12);
    // A randomized Hadamard: every entry is +-1/sqrt(n).
    CHECK(q.abs().sub(1.0 / std::sqrt(static_cast<double>(width))).abs().max().item<double>() < 1e-15);
  }
  RotationKind used;
  auto q = rotationMatrix(100, RotationKind::Hadamard, 7, &used);  // 100 = 25 * 4, 24 not prime
  CHECK(used == RotationKind::Random);
  CHECK(orthogonalityError(q) < 1e-12);
  CHECK_FALSE(hasHadamard(100));
  // Seeded: the same seed the same matrix, another seed another.
  CHECK(rotationMatrix(64, RotationKind::Random, 3).equal(rotationMatrix(64, RotationKind::Random, 3)));
  CHECK_FALSE(rotationMatrix(64, RotationKind::Hadamard, 3).equal(rotationMatrix(64, RotationKind::Hadamard, 4)));
}

TEST_CASE("GPT-2: every norm absorbed, the stream rotated, equal to the original in float64", "[rotate]") {
  test::ScratchDir dir("foldnorm-rotate");
  auto r = rotateZoo("gpt2", dir);
  const auto& rep = r.rotated.report;
  INFO(toText(rep));
  REQUIRE(rep.absorbed.size() == 5);  // ln_1, ln_2 of two blocks, ln_f
  for (const auto& a : rep.absorbed) CHECK(a.absorbed);
  REQUIRE(countRotated(rep) == 1);
  CHECK(rep.streams[0].rotation == "hadamard");
  CHECK(rep.streams[0].width == 64);
  // The fold already gave the embedding's read a centred copy of wte (the tied head keeps the
  // original), so the stage finds no tensor read with two different edits: nothing to untie.
  CHECK(rep.untied.empty());
  CHECK(rep.runs == 2);
  CHECK(rep.passed);
  CHECK(rep.worstRelative64 < 1e-12);
  CHECK(rep.worstRelativeSaved64 < 1e-5);
  CHECK(rep.worstRelative32 < 1e-4);
  // Saved, loaded back: weightless aten::rms_norm, none of our ops, and the file computes the model.
  const auto out = (dir.path / "gpt2-rotated.pt").string();
  const double saved64 = saveRotated(r.rotated, r.model, out);
  CHECK(saved64 < 1e-5);
  auto loaded = jit::load(out);
  auto graph = inlinedForward(loaded);
  int norms = 0;
  for (auto* n : graph->nodes()) {
    CHECK(std::string(n->kind().ns().toUnqualString()) != "foldnorm");
    if (n->kind() == c10::aten::rms_norm) {
      ++norms;
      CHECK(n->input(2)->mustBeNone());
    }
  }
  CHECK(norms == 5);
}

TEST_CASE("a skipped reader or a left-out bias fails the float64 check and is not saved", "[rotate]") {
  test::ScratchDir dir("foldnorm-rotate");
  RotateOptions ro;
  SECTION("a reader left unrotated") { ro.skipReader = 0; }
  SECTION("another reader left unrotated") { ro.skipReader = 3; }
  // Bias edits are counted absorbed ones first (5 in GPT-2 tiny: ln_1, ln_2 of two blocks, ln_f
  // into the head's new bias), then the writers' (the four c_proj biases).
  SECTION("an absorbed bias left out") { ro.dropBias = 0; }
  SECTION("the bias the head gets from ln_f left out") { ro.dropBias = 4; }
  SECTION("a writer's bias left unrotated") { ro.dropBias = 6; }
  auto r = rotateZoo("gpt2", dir, ro);
  INFO(toText(r.rotated.report));
  CHECK_FALSE(r.rotated.report.passed);
  CHECK(r.rotated.report.worstRelative64 > 1e-6);
  CHECK_THROWS_WITH(saveRotated(r.rotated, r.model, (dir.path / "bad.pt").string()),
                    Catch::Contains("differs from the original in float64"));
  CHECK_FALSE(std::filesystem::exists(dir.path / "bad.pt"));
}

TEST_CASE("absorb only: weightless norms, nothing rotated, equal in float64", "[rotate]") {
  test::ScratchDir dir("foldnorm-rotate");
  RotateOptions ro;
  ro.rotate = false;
  auto r = rotateZoo("gpt2", dir, ro);
  INFO(toText(r.rotated.report));
  CHECK(countRotated(r.rotated.report) == 0);
  for (const auto& a : r.rotated.report.absorbed) CHECK(a.absorbed);
  CHECK(r.rotated.report.passed);
  CHECK(r.rotated.report.untied.empty());
}

TEST_CASE("OPT and Phi rotate exactly, with a random rotation too", "[rotate]") {
  test::ScratchDir dir("foldnorm-rotate");
  auto name = GENERATE(std::string("opt"), std::string("phi"));
  RotateOptions ro;
  ro.kind = GENERATE(RotationKind::Hadamard, RotationKind::Random);
  auto r = rotateZoo(name, dir, ro);
  INFO(name << "\n" << toText(r.rotated.report));
  CHECK(countRotated(r.rotated.report) == 1);
  for (const auto& a : r.rotated.report.absorbed) CHECK(a.absorbed);
  CHECK(r.rotated.report.passed);
  CHECK(r.rotated.report.worstRelative64 < 1e-12);
  CHECK(r.rotated.report.streams[0].rotation == toString(ro.kind));
}

TEST_CASE("post-LN BERT is refused with the reason, and left equal to the original", "[rotate]") {
  test::ScratchDir dir("foldnorm-rotate");
  auto r = rotateZoo("bert", dir);
  const auto& rep = r.rotated.report;
  INFO(toText(rep));
  CHECK(countRotated(rep) == 0);
  REQUIRE_FALSE(rep.streams.empty());
  for (const auto& s : rep.streams) CHECK_FALSE(s.reason.empty());
  // The text says it, per stream (the refusals once vanished from it behind a dangling else).
  const auto text = toText(rep);
  std::size_t said = 0;
  for (auto at = text.find(": not rotated: "); at != std::string::npos; at = text.find(": not rotated: ", at + 1)) ++said;
  CHECK(said == rep.streams.size());
  CHECK(rep.passed);
}

TEST_CASE("ViT: the patch convolution writes the stream through reshape and permute, and rotates exactly",
          "[rotate]") {
  test::ScratchDir dir("foldnorm-rotate");
  RotateOptions ro;
  ro.kind = GENERATE(RotationKind::Hadamard, RotationKind::Random);
  auto r = rotateZoo("vit", dir, ro);
  const auto& rep = r.rotated.report;
  INFO(toText(rep));
  REQUIRE(countRotated(rep) == 1);
  for (const auto& a : rep.absorbed) CHECK(a.absorbed);
  const auto& names = rep.streams[0].writerNames;
  CHECK(std::any_of(names.begin(), names.end(), [](const std::string& n) { return n == "conv_proj.weight"; }));
  CHECK(rep.passed);
  CHECK(rep.worstRelative64 < 1e-12);
}

TEST_CASE("Whisper's encoder: rotations inserted after its GELU stem and before its returned norm, exact",
          "[rotate][fixtures]") {
  // The stream starts at gelu(conv2(x)) (not a linear map of a parameter) and ends in a norm whose
  // output the model returns (its affine cannot move into a reader): Q is inserted as an op after
  // the first, Q^T before the second. Without insertions the stream is refused, naming the op.
  if (!test::haveFixture("whisper_encoder.pt"))
    return test::skipTest("no whisper_encoder fixture (transformers fixtures not built)");
  auto model = importTorchScript(test::fixturePath("whisper_encoder.pt"));
  auto analysis = analyzeFoldability(model.graph);
  FoldOptions fo;
  fo.randomInputs = 1;
  RotateOptions ro;
  SECTION("inserted") {
    auto r = rotateModel(model, analysis, fo, ro);
    const auto& rep = r.report;
    INFO(toText(rep));
    REQUIRE(countRotated(rep) == 1);
    const auto& inserted = rep.streams[0].inserted;
    REQUIRE(inserted.size() == 2);
    auto count = [&](const std::string& prefix) {
      return std::count_if(inserted.begin(), inserted.end(), [&](const std::string& s) { return s.rfind(prefix, 0) == 0; });
    };
    CHECK(count("after ") == 1);
    CHECK(count("before ") == 1);
    CHECK_THAT(toText(rep), Catch::Contains("inserted a rotation op after ") &&
                                Catch::Contains("inserted a rotation op before "));
    CHECK(rep.passed);
    CHECK(rep.worstRelative64 < 1e-12);
    test::ScratchDir dir("foldnorm-rotate");
    CHECK(saveRotated(r, model, (dir.path / "whisper-rotated.pt").string()) < 1e-5);
  }
  SECTION("an inserted rotation left out fails the check") {
    ro.skipInserted = GENERATE(0, 1);
    auto r = rotateModel(model, analysis, fo, ro);
    INFO(toText(r.report));
    CHECK_FALSE(r.report.passed);
    CHECK(r.report.worstRelative64 > 1e-6);
  }
  SECTION("refused without insertions") {
    ro.insertRotations = false;
    auto r = rotateModel(model, analysis, fo, ro);
    INFO(toText(r.report));
    CHECK(countRotated(r.report) == 0);
    CHECK_THAT(r.report.streams[0].reason, Catch::Contains("not a linear map") || Catch::Contains("keeps its affine"));
    CHECK(r.report.passed);
  }
}
