// The kernel bench harness (`foldnorm bench-norm`, analyses/kernel_table.cpp): what it reports,
// not how fast anything is.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>
#include <sstream>

#include "foldnorm/bench/bench_norm.h"
#include "foldnorm/common/error.h"
#include "foldnorm/common/setting_error.h"
#include "foldnorm/ops/rms_norm.h"

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
  // The core names the setting, never a command-line flag (the CLI spells it as --<setting>).
  auto settingRefused = [&](const std::string& setting, const std::string& said) {
    try {
      runNormBench(o, progress);
      FAIL("no error");
    } catch (const foldnorm::SettingError& e) {
      CHECK(e.setting() == setting);
      CHECK_THAT(e.what(), Contains(said));
      CHECK_THAT(e.what(), !Contains("--"));
    }
  };
  SECTION("two rounds give no spread") {
    o.reps = 2;
    settingRefused("reps", "median and a spread");
  }
  SECTION("negative threads") {
    o.threads = -1;
    settingRefused("threads", "negative");
  }
  SECTION("an unknown device") {
    o.device = "tpu";
    settingRefused("device", "tpu");
  }
  SECTION("an unknown dtype, a row width of 0, no rows") {
    o.dtypes = {"float8"};
    settingRefused("dtype", "float8");
    o.dtypes = {"float32"};
    o.hidden = {0};
    settingRefused("hidden", "positive");
    o.hidden = {64};
    o.rows.clear();
    settingRefused("rows", "at least one value");
  }
  SECTION("an unknown CPU kernel instruction set, named as its setting") {
    o.cpuIsa = "sse9";
    settingRefused("cpu-isa", "sse9");
  }
}

TEST_CASE("the norm bench runs our kernels on the instruction set and parameter dtype it is given", "[bench][ops]") {
  BenchNormOptions o;
  o.dtypes = {"bfloat16"};
  o.hidden = {64};
  o.rows = {8};
  o.reps = 3;
  o.warmup = 0;
  o.threads = 1;
  o.cpuIsa = "portable";  // every CPU has it
  o.float32Params = true;  // a 16-bit input with float32 weight and bias
  std::ostringstream progress;
  const auto before = foldnorm::ops::cpuKernelIsa();
  auto r = runNormBench(o, progress);
  CHECK(r.cpuKernelIsa == "portable");
  CHECK(r.float32Params);
  CHECK(foldnorm::ops::cpuKernelIsa() == before);
  CHECK_THAT(formatNormBenchTable(r), Catch::Contains("CPU kernels portable") &&
                                          Catch::Contains("float32 weight and bias"));
  CHECK(toJson(r)["float32_params"] == true);
}
