// The model handle (fold/model.h): the same operations, written once, on a TorchScript file and
// a torch.export archive. Each format must open, fold (verified: the original in float64 is the
// oracle), save atomically (the written file loaded back and run against the original in
// float64), refuse its input and the other format's ending, and reopen as a fresh model whose
// LayerNorms are gone.
#include <catch2/catch.hpp>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "export_fold_fixtures.h"
#include "foldnorm/common/error.h"
#include "foldnorm/fold/model.h"
#include "foldnorm/zoo/zoo.h"
#include "helpers.h"
#include "skip.h"

using namespace foldnorm;
using namespace foldnorm::test;

namespace {

int countKind(const Graph& g, const std::string& kind) {
  int n = 0;
  for (NodeId id = 0; id < g.nodeCount(); ++id) n += g.node(id).kind == kind;
  return n;
}

/// What every consumer does with a model, on the handle only: no line here asks the format.
void exerciseHandle(const std::string& path, const std::string& scratch, const std::string& expectedExtension,
                    RmsOp expectedDefault) {
  const Model model = Model::open(path);
  CHECK(std::string(model.foldedExtension()) == expectedExtension);
  CHECK(model.defaultRmsOp() == expectedDefault);
  const auto analysis = analyzeFoldability(model.graph());
  const auto lns = countKind(model.graph(), "aten::layer_norm");
  REQUIRE(lns > 0);
  REQUIRE(analysis.foldableCount() == static_cast<std::size_t>(lns));
  model.releaseFileBytes();  // a fold needs no fresh copies from the file's bytes

  FoldOptions options;
  options.randomInputs = 2;  // besides the example: the output must depend on the input to prove anything
  const ModelFold fold = model.fold(analysis, options);
  const FoldReport& r = fold.report();
  CHECK(r.rmsOp == expectedDefault);  // unset in the options: the format's default
  CHECK(r.folded.size() == analysis.foldableCount());
  REQUIRE(r.verification.ran);
  CHECK(r.verification.runs == 3);
  CHECK(r.verification.passed());
  CHECK(r.verification.worstRelative64 <= 1e-9);
  // Verifying the fold again through the handle gives the same verdict.
  const auto again = model.verify(analysis, fold, options);
  CHECK(again.passed());
  CHECK(again.worstRelative64 == Approx(r.verification.worstRelative64).margin(1e-15));

  // Outputs the handle refuses: the input itself, and the other format's ending.
  const auto size = std::filesystem::file_size(path);
  CHECK_THROWS_AS(model.checkOutput(path), Error);
  CHECK_THROWS_AS(model.save(fold, path), Error);
  CHECK(std::filesystem::file_size(path) == size);
  const std::string other = expectedExtension == ".pt2" ? ".pt" : ".pt2";
  CHECK_THROWS_AS(model.checkOutput(scratch + "/wrong" + other), Error);

  const std::string out = scratch + "/folded" + model.foldedExtension();
  model.checkOutput(out);
  const SavedFileCheck saved = model.save(fold, out);
  CHECK(saved.ran);
  CHECK(saved.tensors > 0);
  CHECK(saved.worstRelative32 <= saved.tolerance32);
  CHECK(saved.worstRelativeSaved64 <= r.verification.savedFloat64Bound);

  const Model back = model.reopen(out);
  CHECK(std::string(back.format()) == model.format());
  CHECK(countKind(back.graph(), "aten::layer_norm") == 0);
  const auto rms = countKind(back.graph(), expectedDefault == RmsOp::Aten ? "aten::rms_norm" : "foldnorm::rms_norm") +
                   countKind(back.graph(), "foldnorm::add_rms_norm");
  CHECK(rms == lns);
}

}  // namespace

TEST_CASE("the model handle folds saves and reopens a TorchScript file", "[fold][zoo]") {
  ScratchDir dir("foldnorm-model-handle-pt");
  const auto path = (dir.path / "gpt2.pt").string();
  ZooBuildOptions zo;
  zo.preset = "tiny";
  buildZooModel("gpt2", path, zo);
  exerciseHandle(path, dir.path.string(), ".pt", RmsOp::Foldnorm);
  const Model model = Model::open(path);
  CHECK(std::string(model.format()) == "torchscript");
  CHECK(std::string(model.loader()) == "torch.jit.load");
  CHECK(model.fileInfo().empty());
  CHECK(model.fileInfoLine().empty());
}

TEST_CASE("the model handle folds saves and reopens a .pt2 archive", "[python][export]") {
  auto fixtures = exportFixtures();
  if (fixtures.empty()) return skipTest("no Python here to export the fixtures with");
  ScratchDir dir("foldnorm-model-handle-pt2");
  exerciseHandle(fixtures + "/prenorm.pt2", dir.path.string(), ".pt2", RmsOp::Aten);
  const Model model = Model::open(fixtures + "/prenorm.pt2");
  CHECK(std::string(model.format()) == "pt2");
  CHECK(std::string(model.loader()) == "torch.export.load");
  CHECK(model.fileInfo().contains("export"));
  CHECK_THAT(model.fileInfoLine(), Catch::StartsWith("torch.export program: written by torch "));
}

TEST_CASE("one parser of the rms-op setting and an explicit op overrides the format default", "[unit]") {
  CHECK(parseRmsOp("foldnorm") == RmsOp::Foldnorm);
  CHECK(parseRmsOp("aten") == RmsOp::Aten);
  CHECK(std::string(kRmsOpNames[static_cast<int>(RmsOp::Aten)]) == toString(RmsOp::Aten));
  CHECK(std::string(kRmsOpNames[static_cast<int>(RmsOp::Foldnorm)]) == toString(RmsOp::Foldnorm));
  CHECK_THROWS_WITH(parseRmsOp("fast"), Catch::Contains("rms_op must be 'foldnorm' or 'aten', not 'fast'"));
  auto a = analyzeIr(threeBlocks());
  FoldOptions o;
  CHECK(rmsOpFor(a.model, o) == RmsOp::Foldnorm);
  o.rmsOp = RmsOp::Aten;
  CHECK(rmsOpFor(a.model, o) == RmsOp::Aten);
}
