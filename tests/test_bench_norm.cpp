// The kernel bench harness (`foldnorm bench-norm`, analyses/kernel_table.cpp): what it reports,
// not how fast anything is.
#include <catch2/catch.hpp>

#include <sstream>

#include "foldnorm/bench/bench_norm.h"
#include "foldnorm/common/error.h"

using namespace foldnorm::bench;

TEST_CASE("the norm bench times every variant per shape with ordered statistics", "[bench][ops]") {
  BenchNormOptions o;
  o.dtypes = {"float32", "bfloat16"};
  o.hidden = {64, 100};  // 100: rows that are not a whole number of vectors
  o.rows = {8};
  o.reps = 3;
  o.warmup = 1;
  o.threads = 1;
  std::ostringstream progress;
  auto r = runNormBench(o, progress);
  CHECK(r.threads == 1);
  CHECK(r.device == "cpu");
  REQUIRE(r.cases.size() == 4);
  for (const auto& c : r.cases) {
    INFO(c.dtype << " " << c.rows << "x" << c.hidden);
    REQUIRE(c.variants.size() == 9);
    for (const char* name : {kCopyVariant, kOursRmsVariant, kOursLayerVariant, kAtenLayerVariant, kAtenRmsVariant,
                             kOursAddRmsVariant, kAtenAddOursRmsVariant, kAtenAddLayerVariant, kAtenCenterVariant}) {
      const auto& v = c.variant(name);
      INFO(name);
      CHECK(v.medianMs > 0);
      CHECK(v.p10Ms <= v.medianMs);
      CHECK(v.medianMs <= v.p90Ms);
      CHECK(v.bytes > 0);
      CHECK(v.gbPerSecond > 0);
    }
  }
  CHECK_THAT(formatNormBenchTable(r), Catch::Contains("foldnorm::rms_norm") && Catch::Contains("1 threads"));
}

TEST_CASE("the norm bench rejects options it cannot time honestly", "[bench][ops]") {
  BenchNormOptions o;
  o.hidden = {64};
  o.rows = {8};
  std::ostringstream progress;
  using Catch::Contains;
  SECTION("two rounds give no spread") {
    o.reps = 2;
    CHECK_THROWS_WITH(runNormBench(o, progress), Contains("--reps"));
  }
  SECTION("negative threads") {
    o.threads = -1;
    CHECK_THROWS_WITH(runNormBench(o, progress), Contains("--threads"));
  }
  SECTION("an unknown device") {
    o.device = "tpu";
    CHECK_THROWS_WITH(runNormBench(o, progress), Contains("tpu"));
  }
}
