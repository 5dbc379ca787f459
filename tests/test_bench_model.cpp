// The end-to-end bench harness (`foldnorm bench`): what it reports, not how fast anything is.
#include <catch2/catch.hpp>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <dirent.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>

#include "foldnorm/bench/bench_model.h"
#include "foldnorm/common/error.h"
#include "foldnorm/common/setting_error.h"
#include "foldnorm/torch/torch_model.h"
#include "foldnorm/zoo/zoo.h"
#include "helpers.h"
#include "skip.h"

namespace fs = std::filesystem;
using foldnorm::bench::BenchModelOptions;
using foldnorm::bench::ModelBenchCase;
using foldnorm::bench::runModelBench;

namespace {

using foldnorm::test::ScratchDir;

std::string buildTinyGpt2(const ScratchDir& dir) {
  auto path = (dir.path / "gpt2-tiny.pt").string();
  foldnorm::ZooBuildOptions options;
  options.preset = "tiny";  // 2 layers, d_model 64, 64 positions, embedded input 2x16
  foldnorm::buildZooModel("gpt2", path, options);
  return path;
}

BenchModelOptions quickOptions() {
  BenchModelOptions o;
  o.warmup = 2;
  o.reps = 2;
  o.verifyRandomInputs = 0;
  return o;
}

void checkTimed(const ModelBenchCase& c) {
  INFO("seq " << c.seq);
  REQUIRE(c.skipped.empty());
  for (const auto* s : {&c.originalMs, &c.foldedMs}) {
    CHECK(s->median > 0);
    CHECK(s->p10 <= s->median);
    CHECK(s->median <= s->p90);
  }
  CHECK(std::isfinite(c.speedup.median));
  CHECK(c.speedup.median > 0);
  CHECK(c.speedup.p10 <= c.speedup.p90);
  CHECK(c.originalItemsPerSecond > 0);
  CHECK(c.foldedItemsPerSecond > 0);
  CHECK(c.paired.median == Approx(c.speedup.median));  // the same per-round ratios
  CHECK(c.paired.low <= c.paired.median);
  CHECK(c.paired.median <= c.paired.high);
  CHECK(c.paired.rounds >= 2);
}

}  // namespace

TEST_CASE("the model bench times original and folded per sequence length after a verified fold",
          "[bench]") {
  ScratchDir dir;
  const auto model = buildTinyGpt2(dir);
  std::ostringstream progress;

  SECTION("every requested length is timed with tokens = batch x seq") {
    auto o = quickOptions();
    o.seqs = {8, 32};
    o.batch = 3;
    const auto r = runModelBench(model, o, progress);
    CHECK(r.foldedLayerNorms == 5);  // ln_1, ln_2 of 2 blocks and ln_f
    CHECK(r.keptLayerNorms == 0);
    CHECK(r.worstRelative64 <= 1e-9);
    CHECK(r.seqApplies);
    CHECK(r.itemUnit == "tokens");
    REQUIRE(r.cases.size() == 2);
    CHECK(r.cases[0].seq == 8);
    CHECK(r.cases[0].items == 3 * 8);
    CHECK(r.cases[0].inputShapes == std::vector<std::string>{"3x8:int64[0,1000)"});
    CHECK(r.cases[1].items == 3 * 32);
    for (const auto& c : r.cases) checkTimed(c);
    CHECK_THAT(progress.str(), Catch::Contains("fold verified: 5 LayerNorm(s) folded"));

    const auto j = foldnorm::bench::toJson(r);
    CHECK(j["cases"][1]["speedup"]["median"].get<double>() == Approx(r.cases[1].speedup.median));
    CHECK(j["cases"][0]["original_tokens_per_s"].get<double>() > 0);
    CHECK_THAT(foldnorm::bench::formatModelBenchTable(r), Catch::Contains("speed-up"));
  }

  SECTION("without --seq the spec's own shape is timed") {
    const auto r = runModelBench(model, quickOptions(), progress);
    REQUIRE(r.cases.size() == 1);
    CHECK(r.cases[0].seq == 16);
    CHECK(r.cases[0].items == 2 * 16);
    checkTimed(r.cases[0]);
  }

  SECTION("a length past the position table is reported as skipped; the others are still timed") {
    auto o = quickOptions();
    o.seqs = {16, 128};  // tiny GPT-2 has 64 positions
    const auto r = runModelBench(model, o, progress);
    REQUIRE(r.cases.size() == 2);
    checkTimed(r.cases[0]);
    CHECK_FALSE(r.cases[1].skipped.empty());
    CHECK(foldnorm::bench::toJson(r)["cases"][1].contains("skipped"));
  }

  SECTION("bfloat16 runs on cast copies of both models") {
    auto o = quickOptions();
    o.dtype = "bfloat16";
    o.seqs = {8};
    const auto r = runModelBench(model, o, progress);
    CHECK(r.dtype == "bfloat16");
    REQUIRE(r.cases.size() == 1);
    checkTimed(r.cases[0]);
  }
}

TEST_CASE("an image model has no sequence length: its spec shape is timed, in images", "[bench]") {
  ScratchDir dir;
  const auto path = (dir.path / "vit-tiny.pt").string();
  foldnorm::ZooBuildOptions build;
  build.preset = "tiny";
  foldnorm::buildZooModel("vit", path, build);
  auto o = quickOptions();
  o.seqs = {128};  // ignored, and the report says so
  o.batch = 3;
  std::ostringstream progress;
  const auto r = runModelBench(path, o, progress);
  CHECK_FALSE(r.seqApplies);
  CHECK(r.itemUnit == "images");
  CHECK_THAT(progress.str(), Catch::Contains("sequence lengths ignored"));
  REQUIRE(r.cases.size() == 1);
  CHECK(r.cases[0].seq == 0);
  CHECK(r.cases[0].items == 3);
  checkTimed(r.cases[0]);
}

/// The option check throws SettingError naming `setting`, in the core's words: no flag spelling
/// (the CLI adds "--reps", the GUI names its field).
void checkRefused(const BenchModelOptions& o, const std::string& setting, const std::string& words) {
  std::ostringstream progress;
  try {
    runModelBench("unused.pt", o, progress);
    FAIL("options accepted");
  } catch (const foldnorm::SettingError& e) {
    CHECK(e.setting() == setting);
    CHECK_THAT(e.what(), Catch::Contains(words));
    CHECK_THAT(e.what(), !Catch::Contains("--"));
  }
}

TEST_CASE("the model bench rejects options it cannot time honestly, naming the setting", "[bench]") {
  auto o = quickOptions();
  SECTION("one round has no spread") {
    o.reps = 1;
    checkRefused(o, "reps", "at least 2 timed rounds");
  }
  SECTION("one warm-up run would time the executor's optimisation") {
    o.warmup = 1;
    checkRefused(o, "warmup", "at least 2 warm-up forwards");
  }
  SECTION("an unknown dtype is named") {
    o.dtype = "float8";
    checkRefused(o, "dtype", "float8");
  }
  SECTION("a non-positive sequence length is named") {
    o.seqs = {0};
    checkRefused(o, "seq", "got 0");
  }
  SECTION("an unknown device is named") {
    o.device = "tpu";
    checkRefused(o, "device", "'tpu'");
  }
  SECTION("a negative time per length is named") {
    o.caseSeconds = -1;
    checkRefused(o, "case_seconds", "must not be negative");
  }
}

TEST_CASE("paired ratios: the bootstrap interval of the median decides faster, slower or within noise",
          "[bench]") {
  using foldnorm::bench::pairedRatio;
  // Ratios 1.03 +- 0.02 (deterministic spread): the interval lies above 1.
  std::vector<double> faster, slower, noisy;
  for (int i = 0; i < 60; ++i) {
    const double wobble = 0.02 * std::sin(1.7 * i);
    faster.push_back(1.03 + wobble);
    slower.push_back(0.97 + wobble);
    noisy.push_back(1.0 + 5 * wobble);  // +-10% around 1: a 1% effect could hide in it
  }
  const auto f = pairedRatio(faster, 1);
  CHECK(f.verdict == "faster");
  CHECK(f.rounds == 60);
  CHECK(f.low > 1.0);
  CHECK(f.low <= f.median);
  CHECK(f.median <= f.high);
  CHECK(f.median == Approx(1.03).margin(0.01));
  CHECK(pairedRatio(slower, 1).verdict == "slower");
  CHECK(pairedRatio(slower, 1).high < 1.0);
  const auto n = pairedRatio(noisy, 1);
  CHECK(n.verdict == "within noise");
  CHECK(n.low < 1.0);
  CHECK(n.high > 1.0);
  // More rounds of the same spread narrow the interval (that is what --case-seconds buys).
  std::vector<double> longer;
  for (int i = 0; i < 600; ++i) longer.push_back(1.0 + 0.1 * std::sin(1.7 * i));
  const auto l = pairedRatio(longer, 1);
  CHECK(l.high - l.low < 0.5 * (n.high - n.low));
  // A function of the ratios and the seed: reproducible.
  CHECK(pairedRatio(noisy, 7).low == pairedRatio(noisy, 7).low);
  CHECK_THROWS_AS(pairedRatio({1.0}, 1), std::invalid_argument);
  // Too few rounds decide nothing, however far from 1 they lie.
  CHECK(pairedRatio({1.5, 1.6, 1.55, 1.52}, 1).verdict == "too few rounds");
}

TEST_CASE("with a time per length, cheap lengths run more rounds than --reps, in AB/BA pairs", "[bench]") {
  ScratchDir dir;
  const auto model = buildTinyGpt2(dir);
  std::ostringstream progress;
  auto o = quickOptions();
  o.seqs = {8};
  o.caseSeconds = 3;  // a tiny GPT-2 round takes milliseconds (well under 1.5 s even on a loaded machine)
  const auto r = runModelBench(model, o, progress);
  REQUIRE(r.cases.size() == 1);
  checkTimed(r.cases[0]);
  CHECK(r.cases[0].paired.rounds > o.reps);
  CHECK(r.cases[0].paired.rounds % 2 == 0);
  CHECK(r.caseSeconds == 3);
  const auto j = foldnorm::bench::toJson(r);
  CHECK(j["cases"][0]["paired"]["rounds"].get<int>() == r.cases[0].paired.rounds);
  CHECK(j["cases"][0]["paired"]["verdict"].get<std::string>() == r.cases[0].paired.verdict);
  CHECK_THAT(foldnorm::bench::formatModelBenchTable(r), Catch::Contains("95% interval"));
  // Without it, exactly reps rounds.
  o.caseSeconds = 0;
  CHECK(runModelBench(model, o, progress).cases[0].paired.rounds == o.reps);
}

TEST_CASE("the model bench times the model it is given: no re-import, process settings restored",
          "[bench]") {
  ScratchDir dir;
  const auto path = buildTinyGpt2(dir);
  const auto model = foldnorm::importTorchScript(path);
  const auto analysis = foldnorm::analyzeFoldability(model.graph);
  std::ostringstream progress;
  auto o = quickOptions();
  o.seqs = {8};
  const auto folded = foldnorm::bench::foldForBench(model, analysis, o, progress);
  const int threadsBefore = at::get_num_threads();
  o.threads = threadsBefore == 1 ? 2 : 1;
  const auto r = runModelBench(model, folded, o, progress);
  CHECK(r.threads == o.threads);                     // ran with the requested count
  CHECK(at::get_num_threads() == threadsBefore);     // and gave the process its own back
  CHECK(r.foldedLayerNorms == 5);
  REQUIRE(r.cases.size() == 1);
  checkTimed(r.cases[0]);

  // A fold that was not verified is not timed.
  foldnorm::FoldOptions unverified;
  unverified.verify = false;
  const auto raw = foldnorm::foldModel(model, analysis, unverified);
  CHECK_THROWS_WITH(runModelBench(model, raw, quickOptions(), progress), Catch::Contains("not verified"));

  // The import keeps no copy of the file's bytes (issue 16: memory); fresh copies load the file
  // again, so a file that went away since the import is said in one line, not guessed around.
  ::unlink(path.c_str());
  CHECK_THROWS_WITH(runModelBench(model, folded, o, progress),
                    Catch::Contains("changed (or went away) since it was imported"));
}

TEST_CASE("the path bench frees the import's and the fold's tensors before timing, a host's models are kept",
          "[bench]") {
  ScratchDir dir;
  const auto path = buildTinyGpt2(dir);
  const auto model = foldnorm::importTorchScript(path);
  const auto modelBytes =
      foldnorm::distinctStorageBytes(foldnorm::attributeTensors(model.torch->module));
  REQUIRE(modelBytes > 0);
  std::ostringstream progress;
  auto o = quickOptions();
  o.seqs = {8};
  o.nullControl = true;  // its copy loads after the import was freed: from the file, as the others

  // The CLI's path owns both: the import's parameters and the fold's (a copy with centered weights,
  // each at least the model's bytes) are freed, and the timing still runs all three models.
  const auto r = runModelBench(path, o, progress);
  CHECK(r.releasedBytes >= 2 * modelBytes);
  REQUIRE(r.cases.size() == 1);
  checkTimed(r.cases[0]);
  CHECK(r.cases[0].control.rounds == r.cases[0].paired.rounds);
  CHECK(foldnorm::bench::toJson(r)["released_bytes"].get<int64_t>() == r.releasedBytes);
  CHECK_THAT(foldnorm::bench::formatModelBenchTable(r), Catch::Contains("were freed before timing"));
  CHECK_THAT(progress.str(), Catch::Contains("freed the import's and the fold's tensors"));

  // A host's import and fold are its own: nothing freed, both still run afterwards.
  const auto analysis = foldnorm::analyzeFoldability(model.graph);
  const auto folded = foldnorm::bench::foldForBench(model, analysis, o, progress);
  const auto hosted = runModelBench(model, folded, o, progress);
  CHECK(hosted.releasedBytes == 0);
  CHECK(foldnorm::bench::toJson(hosted)["released_bytes"].get<int64_t>() == 0);
  CHECK_THAT(foldnorm::bench::formatModelBenchTable(hosted), !Catch::Contains("were freed before timing"));
  CHECK(foldnorm::distinctStorageBytes(foldnorm::attributeTensors(model.torch->module)) == modelBytes);
  const auto inputs = foldnorm::makeInputs(model.inputSpecs, 1);
  const auto a = foldnorm::runGraph(model.torch->module, model.torch->graph, inputs);
  const auto b = foldnorm::runGraph(folded.torch->module, folded.torch->graph, inputs);
  REQUIRE(a.size() == b.size());
  CHECK(at::allclose(a[0], b[0], 1e-4, 1e-5));
}

TEST_CASE("the model bench refuses a model where nothing folds: it would compare a model with itself",
          "[bench]") {
  ScratchDir dir;
  auto path = (dir.path / "llama-tiny.pt").string();
  foldnorm::ZooBuildOptions options;
  options.preset = "tiny";  // RMSNorm written out: no aten::layer_norm at all
  foldnorm::buildZooModel("llama", path, options);
  std::ostringstream progress;
  CHECK_THROWS_WITH(runModelBench(path, quickOptions(), progress),
                    Catch::Contains("nothing to compare") && Catch::Contains("no LayerNorm"));
}

TEST_CASE("the model bench takes --input specs instead of the embedded one", "[bench]") {
  ScratchDir dir;
  auto path = buildTinyGpt2(dir);
  auto o = quickOptions();
  o.inputSpecs = {"1x8:int64[0,1000)"};
  std::ostringstream progress;
  auto r = runModelBench(path, o, progress);
  REQUIRE(r.cases.size() == 1);
  CHECK(r.cases[0].seq == 8);
  CHECK(r.cases[0].items == 8);
  checkTimed(r.cases[0]);
  o.inputSpecs = {"1x8:float32"};  // token ids must be integers: the model's own error, named
  CHECK_THROWS_AS(runModelBench(path, o, progress), foldnorm::Error);
}

TEST_CASE("a null control times a second copy of the original in the same rounds, all six orders in turn",
          "[bench]") {
  ScratchDir dir;
  const auto model = buildTinyGpt2(dir);
  std::ostringstream progress;
  auto o = quickOptions();
  o.seqs = {8};
  o.nullControl = true;
  o.caseSeconds = 2;  // tiny GPT-2 rounds take milliseconds: many cycles of six orders
  const auto r = runModelBench(model, o, progress);
  REQUIRE(r.cases.size() == 1);
  const auto& c = r.cases[0];
  checkTimed(c);
  CHECK(c.control.rounds == c.paired.rounds);  // one copy run per round, ratios to the same original run
  CHECK(c.paired.rounds % 6 == 0);             // whole cycles: each order equally often
  CHECK(c.controlMs.median > 0);
  CHECK(c.controlMs.p10 <= c.controlMs.median);
  CHECK(c.controlMs.median <= c.controlMs.p90);
  CHECK(c.control.low <= c.control.median);
  CHECK(c.control.median <= c.control.high);
  CHECK_FALSE(c.control.verdict.empty());
  // The control's ratios are their own, not the fold's (a copy of the fold's numbers would pass the
  // checks above): original / copy and original / folded of one round differ unless the two runs took
  // exactly the same time.
  CHECK(c.control.median != c.paired.median);
  const auto j = foldnorm::bench::toJson(r);
  REQUIRE(j["cases"][0].contains("null_control"));
  CHECK(j["cases"][0]["null_control"]["rounds"].get<int>() == c.control.rounds);
  CHECK(j["cases"][0]["null_control"]["median"].get<double>() == Approx(c.control.median));
  CHECK_THAT(foldnorm::bench::formatModelBenchTable(r), Catch::Contains("null fold"));

  // Without it: no control, in the report or its JSON.
  o.nullControl = false;
  o.caseSeconds = 0;
  const auto plain = runModelBench(model, o, progress);
  CHECK(plain.cases[0].control.rounds == 0);
  CHECK_FALSE(foldnorm::bench::toJson(plain)["cases"][0].contains("null_control"));
  CHECK_THAT(foldnorm::bench::formatModelBenchTable(plain), !Catch::Contains("null fold"));
}

TEST_CASE("under several layouts the interval resamples the layouts: one layout's luck is not a verdict",
          "[bench]") {
  using foldnorm::bench::pairedRatio;
  using foldnorm::bench::pairedRatioByLayout;
  std::vector<double> one;
  for (int i = 0; i < 40; ++i) one.push_back(1.0 + 0.05 * std::sin(1.3 * i));
  // One layout is the plain round bootstrap, number for number.
  const auto plain = pairedRatio(one, 3), grouped = pairedRatioByLayout({one}, 3);
  CHECK(grouped.low == plain.low);
  CHECK(grouped.high == plain.high);
  CHECK(grouped.median == plain.median);

  // Three layouts, each tight, one of them 5% away from the other two: the rounds alone say "faster"
  // (two thirds of them sit at 1.03), the layouts say that a third of the draws read 0.98.
  std::vector<std::vector<double>> layouts{{}, {}, {}};
  for (int i = 0; i < 20; ++i) {
    const double wobble = 0.002 * std::sin(2.1 * i);
    layouts[0].push_back(0.98 + wobble);
    layouts[1].push_back(1.03 + wobble);
    layouts[2].push_back(1.03 - wobble);
  }
  std::vector<double> pooled;
  for (const auto& l : layouts) pooled.insert(pooled.end(), l.begin(), l.end());
  const auto byRound = pairedRatio(pooled, 3), byLayout = pairedRatioByLayout(layouts, 3);
  CHECK(byRound.verdict == "faster");
  CHECK(byLayout.verdict == "within noise");
  CHECK(byLayout.low < 0.99);
  CHECK(byLayout.median == Approx(byRound.median));  // the same rounds: the same median
  CHECK(byLayout.rounds == 60);
  CHECK_THROWS_AS(pairedRatioByLayout({one, {}}, 3), std::invalid_argument);
}

TEST_CASE("the null fold's third copy is left out, and said, where it would not fit in memory", "[bench]") {
  using foldnorm::bench::nullControlRefusal;
  const int64_t gb = 1000 * 1000 * 1000;
  CHECK(nullControlRefusal(6 * gb, 20 * gb).empty());           // room to spare
  CHECK(nullControlRefusal(6 * gb, 6 * gb + 3 * gb / 2).empty());  // exactly a quarter to spare
  CHECK(nullControlRefusal(1, -1).empty());                       // unknown: loaded, as before
  // GPT-2 XL's 6.3 GB with 5 GB left beside the two timed copies (a 24 GB machine).
  const auto why = nullControlRefusal(6300 * gb / 1000, 5 * gb);
  CHECK_THAT(why, Catch::Contains("6.30 GB") && Catch::Contains("5.00 GB available"));
  CHECK_FALSE(nullControlRefusal(6 * gb, 6 * gb + gb).empty());   // under a quarter to spare
  // Moving the two timed copies' parameters: GPT-2 XL's 12.6 GB with 2.4 GB left.
  using foldnorm::bench::layoutsRefusal;
  CHECK(layoutsRefusal(12 * gb, 20 * gb).empty());
  CHECK_THAT(layoutsRefusal(12600 * gb / 1000, 2400 * gb / 1000),
             Catch::Contains("12.60 GB") && Catch::Contains("2.40 GB are available") && Catch::Contains("1 layout"));

  // A report that skipped it says so in its table and JSON; one that did not, does not.
  ScratchDir dir;
  const auto model = buildTinyGpt2(dir);
  std::ostringstream progress;
  auto o = quickOptions();
  o.seqs = {8};
  o.nullControl = true;
  auto r = runModelBench(model, o, progress);  // a tiny model: its third copy fits
  CHECK(r.nullControlSkipped.empty());
  CHECK(r.cases[0].control.rounds > 0);
  CHECK(foldnorm::bench::toJson(r)["null_control_skipped"].is_null());
  CHECK(r.layoutsSkipped.empty());
  CHECK(foldnorm::bench::toJson(r)["layouts_skipped"].is_null());
  r.layoutsSkipped = layoutsRefusal(12600 * gb / 1000, 2400 * gb / 1000);
  CHECK_THAT(foldnorm::bench::formatModelBenchTable(r), Catch::Contains("parameter layouts skipped: moving"));
  r.nullControlSkipped = why;
  CHECK_THAT(foldnorm::bench::formatModelBenchTable(r), Catch::Contains("null fold skipped: a third copy"));
  CHECK(foldnorm::bench::toJson(r)["null_control_skipped"] == why);
}

TEST_CASE("the model bench moves every model's parameters between shares of the rounds when asked", "[bench]") {
  ScratchDir dir;
  const auto model = buildTinyGpt2(dir);
  std::ostringstream progress;
  auto o = quickOptions();
  o.seqs = {8};
  o.reps = 6;
  o.layouts = 3;  // at least 2 rounds in each of 3 layouts
  o.nullControl = true;
  const auto r = runModelBench(model, o, progress);
  CHECK(r.layouts == 3);
  REQUIRE(r.cases.size() == 1);
  checkTimed(r.cases[0]);
  CHECK(r.cases[0].paired.rounds == 6);
  CHECK(r.cases[0].control.rounds == 6);
  CHECK(foldnorm::bench::toJson(r)["layouts"].get<int>() == 3);
  CHECK_THAT(foldnorm::bench::formatModelBenchTable(r), Catch::Contains("over 3 parameter layouts"));

  o.layouts = 0;
  checkRefused(o, "layouts", "at least 1 parameter layout");
}

TEST_CASE("huge pages asked for after LibTorch's first allocation are refused in one line, environment restored",
          "[bench]") {
  if (std::getenv("THP_MEM_ALLOC_ENABLE") != nullptr)
    return foldnorm::test::skipTest("THP_MEM_ALLOC_ENABLE is set in this environment: LibTorch already follows it");
  (void)at::empty({16});  // LibTorch reads THP_MEM_ALLOC_ENABLE here, once: unset, so 4 KiB pages
  CHECK_THROWS_WITH(foldnorm::bench::useHugePages(),
                    Catch::Contains("first CPU allocation") || Catch::Contains("off in this kernel"));
  CHECK(std::getenv("THP_MEM_ALLOC_ENABLE") == nullptr);
}
