// `foldnorm bench X.pt2`: the torch.export programs of tests/fixtures/export_fold_models.py folded
// (verified by the interpreter in float32 and float64) and timed by the interpreter, with the
// report the TorchScript bench writes; what it reports, not how fast anything is. (The fold of
// either format that the GUI holds is the model handle's: tests/test_model.cpp.)
#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>

#include "export_fold_fixtures.h"
#include "foldnorm/bench/bench_model.h"
#include "foldnorm/common/error.h"
#include "foldnorm/common/setting_error.h"
#include "foldnorm/fold/fold_export.h"
#include "foldnorm/import/export.h"
#include "skip.h"

using namespace foldnorm;
using namespace foldnorm::test;
using foldnorm::bench::BenchModelOptions;

namespace {

BenchModelOptions quickOptions() {
  BenchModelOptions o;
  o.warmup = 2;
  o.reps = 3;
  o.verifyRandomInputs = 1;
  return o;
}

void checkTimed(const bench::ModelBenchCase& c) {
  INFO("seq " << c.seq << " " << c.skipped);
  REQUIRE(c.skipped.empty());
  for (const auto* s : {&c.originalMs, &c.foldedMs, &c.speedup}) {
    CHECK(std::isfinite(s->median));
    CHECK(s->median > 0);
    CHECK(s->p10 <= s->median);
    CHECK(s->median <= s->p90);
  }
  CHECK(c.originalItemsPerSecond > 0);
  CHECK(c.foldedItemsPerSecond > 0);
}

}  // namespace

TEST_CASE("a .pt2 is benchmarked on the interpreter after a fold verified in float64", "[python][export][bench]") {
  auto dir = exportFixtures();
  if (dir.empty()) return skipTest("no Python here to export the fixtures with");
  const auto path = dir + "/prenorm.pt2";  // ids [2, 6], static sizes; 3 LNs, the tied table untied
  const auto model = importModel(path);
  REQUIRE(model.exported);
  const auto analysis = analyzeFoldability(model.graph);
  std::ostringstream progress;

  SECTION("at the program's own length, with our op (the fast one on CPU) by default") {
    const auto r = bench::benchModel(model, analysis, quickOptions(), progress);
    CHECK(r.runner == "interpreter");
    CHECK(r.rmsOp == "foldnorm");
    CHECK(r.foldedLayerNorms == 3);
    CHECK(r.worstRelative64 <= 1e-9);
    CHECK(r.worstRelative32 <= 1e-5);
    CHECK(r.seqApplies);
    REQUIRE(r.cases.size() == 1);
    CHECK(r.cases[0].seq == 6);
    CHECK(r.cases[0].items == 2 * 6);
    checkTimed(r.cases[0]);
    CHECK_THAT(progress.str(), Catch::Contains("fold verified: 3 LayerNorm(s) folded"));
    const auto j = bench::toJson(r);
    CHECK(j["runner"] == "interpreter");
    CHECK(j["rms_op"] == "foldnorm");
    CHECK(j["format"] == "foldnorm-bench");
    CHECK(j["cases"][0]["original_tokens_per_s"].get<double>() > 0);
    CHECK_THAT(bench::formatModelBenchTable(r), Catch::Contains("runner interpreter") &&
                                                    Catch::Contains("foldnorm::rms_norm"));
  }

  SECTION("a length the export fixed is refused, naming the size it was exported with; the rest is timed") {
    auto o = quickOptions();
    o.seqs = {6, 8};
    const auto r = bench::benchModel(model, analysis, o, progress);
    REQUIRE(r.cases.size() == 2);
    checkTimed(r.cases[0]);
    CHECK_THAT(r.cases[1].skipped, Catch::Contains("static size 6") && Catch::Contains("cannot run 8"));
    CHECK(bench::toJson(r)["cases"][1].contains("skipped"));
  }

  SECTION("the portable form and bfloat16 run too") {
    auto o = quickOptions();
    o.rmsOp = "aten";
    o.dtype = "bfloat16";
    const auto r = bench::benchModel(model, analysis, o, progress);
    CHECK(r.rmsOp == "aten");
    CHECK(r.dtype == "bfloat16");
    CHECK(r.worstRelative64 <= 1e-9);  // the verification is in float32 and float64 before the cast
    REQUIRE(r.cases.size() == 1);
    checkTimed(r.cases[0]);
    CHECK_THAT(bench::formatModelBenchTable(r), Catch::Contains("aten::rms_norm + bias add"));
  }

  SECTION("a null control runs the original program again over its own copy of the state") {
    auto o = quickOptions();
    o.nullControl = true;
    o.reps = 6;     // one whole cycle of the six orders
    o.layouts = 2;  // the interpreter keeps its state where it is: said, and reported as 1
    const auto r = bench::benchModel(model, analysis, o, progress);
    REQUIRE(r.cases.size() == 1);
    const auto& c = r.cases[0];
    checkTimed(c);
    CHECK(c.control.rounds == c.paired.rounds);
    CHECK(c.control.rounds == 6);
    CHECK(c.controlMs.median > 0);
    CHECK(c.control.median != c.paired.median);  // its own ratios, not a copy of the fold's
    CHECK(r.layouts == 1);
    CHECK_THAT(progress.str(), Catch::Contains("each keeps where it was allocated"));
    CHECK(bench::toJson(r)["cases"][0].contains("null_control"));
  }

  SECTION("an unknown RMSNorm op is named as its setting") {
    auto o = quickOptions();
    o.rmsOp = "fast";
    try {
      bench::benchModel(model, analysis, o, progress);
      FAIL("accepted");
    } catch (const SettingError& e) {
      CHECK(e.setting() == "rms_op");
      CHECK_THAT(e.what(), Catch::Contains("'fast'") && !Catch::Contains("--"));
    }
  }
}

TEST_CASE("a .pt2 with a dynamic batch is timed inside its range and refused outside it",
          "[python][export][bench]") {
  auto dir = exportFixtures();
  if (dir.empty()) return skipTest("no Python here to export the fixtures with");
  std::ostringstream progress;
  auto o = quickOptions();
  o.batch = 4;  // keywords: batch is torch.export.Dim("batch", min=2, max=64), seq fixed at 5
  const auto path = dir + "/keywords.pt2";
  auto r = bench::runModelBench(path, o, progress);  // the CLI's path: imported by content
  CHECK(r.runner == "interpreter");
  REQUIRE(r.cases.size() == 1);
  CHECK(r.cases[0].items == 4 * 5);
  CHECK(r.cases[0].inputShapes.size() == 2);  // input_ids and attention_mask, by keyword
  checkTimed(r.cases[0]);
  o.batch = 70;
  r = bench::runModelBench(path, o, progress);
  REQUIRE(r.cases.size() == 1);
  CHECK_THAT(r.cases[0].skipped, Catch::Contains("is 70, outside the range [2, 64]"));
}
