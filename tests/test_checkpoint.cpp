// The checkpoint fold's pieces without Python (issue 29): centering a tensor in its own dtype,
// safetensors headers written and read back, and the plan's one-line refusals. The whole fold on
// Hugging Face models is tests/python/test_package_checkpoint.py.
#include <catch2/catch.hpp>

#include <c10/util/BFloat16.h>
#include <dirent.h>
#include <unistd.h>

#include <cmath>
#include <fstream>
#include <numeric>

#include "foldnorm/checkpoint/fold_checkpoint.h"
#include "foldnorm/checkpoint/plan.h"
#include "foldnorm/checkpoint/safetensors.h"
#include "foldnorm/common/error.h"

using Catch::Contains;
using namespace foldnorm::checkpoint;

namespace {

// POSIX removal (helpers.h has the same; not included, so this file needs no LibTorch headers
// beyond c10's): libtorch's exported std::filesystem::remove_all crashes in our binaries.
void removeFlatDir(const std::filesystem::path& dir) {
  if (DIR* d = ::opendir(dir.c_str())) {
    while (const dirent* e = ::readdir(d)) {
      const std::string name = e->d_name;
      if (name != "." && name != "..") ::unlink((dir / name).c_str());
    }
    ::closedir(d);
  }
  ::rmdir(dir.c_str());
}

std::filesystem::path scratch(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() / ("foldnorm-ckpt-" + name + "-" + std::to_string(::getpid()));
  removeFlatDir(dir);
  std::filesystem::create_directory(dir);
  return dir;
}

/// A one-shard checkpoint: `tensors` as (name, shape) of float32 values 0, 1, 2, ...
void writeShard(const std::filesystem::path& file, std::vector<TensorEntry> entries, int64_t truncateBy = 0) {
  for (auto& e : entries) {
    int64_t n = 1;
    for (auto d : e.shape) n *= d;
    e.dtype = "F32";
    e.begin = 0;
    e.end = 4 * n;
  }
  auto header = makeShardHeader(entries, {{"format", "pt"}});
  std::ofstream out(file, std::ios::binary);
  out << header;
  float v = 0;
  for (const auto& e : entries)
    for (int64_t i = 0; i < (e.end - e.begin) / 4 - (&e == &entries.back() ? truncateBy : 0); ++i, v += 1)
      out.write(reinterpret_cast<const char*>(&v), 4);
}

nlohmann::json planJson() {
  return {{"schema", kPlanSchema},
          {"layers", {{"prefix", "m.layers"}, {"count_key", "n_layer"}}},
          {"center", {{{"pattern", "m.layers.{i}.w"}, {"rank", 2}, {"center", {{{"axis", 0}, {"groups", 1}}}}}}},
          {"rms_norms", {{{"module", "m.layers.{i}.ln"}, {"has_weight", true}}}}};
}

}  // namespace

TEST_CASE("centerInPlace centers each group along the axis in float64, one rounding to the dtype", "[checkpoint]") {
  std::vector<double> x(4 * 6);
  std::iota(x.begin(), x.end(), 0.0);
  for (auto& v : x) v = v * v / 7.0;
  auto y = x;
  const double worst = centerInPlace(y.data(), "F64", {4, 6}, {{1, 2}});  // rows of 6 in 2 groups of 3
  for (int r = 0; r < 4; ++r)
    for (int g = 0; g < 2; ++g) {
      double sum = 0, mean = 0;
      for (int k = 0; k < 3; ++k) mean += x[r * 6 + g * 3 + k] / 3;
      for (int k = 0; k < 3; ++k) {
        sum += y[r * 6 + g * 3 + k];
        CHECK(y[r * 6 + g * 3 + k] == Approx(x[r * 6 + g * 3 + k] - mean).margin(1e-12));
      }
      CHECK(std::fabs(sum) < 1e-12);
    }
  CHECK(worst < 1e-13);

  // bfloat16: the float64 centering rounded once (through float, as torch rounds float64 to bfloat16).
  std::vector<c10::BFloat16> b;
  for (int i = 0; i < 3 * 5; ++i) b.emplace_back(static_cast<float>(std::sin(i + 1.0)));
  auto c = b;
  const double worstB = centerInPlace(c.data(), "BF16", {3, 5}, {{0, 1}});
  for (int col = 0; col < 5; ++col) {
    double mean = 0;
    for (int r = 0; r < 3; ++r) mean += static_cast<float>(b[r * 5 + col]) / 3.0;
    for (int r = 0; r < 3; ++r) {
      const c10::BFloat16 expect(static_cast<float>(static_cast<float>(b[r * 5 + col]) - mean));
      CHECK(c[r * 5 + col].x == expect.x);
    }
  }
  CHECK(worstB <= 2 * std::ldexp(1.0, -8));
  CHECK_THROWS_WITH(centerInPlace(c.data(), "I64", {3, 5}, {{0, 1}}), Contains("I64"));
  CHECK_THROWS_WITH(centerInPlace(c.data(), "BF16", {3, 5}, {{1, 2}}), Contains("2 groups"));
}

TEST_CASE("safetensors headers round-trip and damaged shards are refused naming the tensor", "[checkpoint]") {
  const auto dir = scratch("headers");
  writeShard(dir / "model.safetensors", {{"a.w", "", {3, 4}, 0, 0, ""}, {"b.w", "", {5}, 0, 0, ""}});
  auto index = readCheckpointIndex(dir.string());
  REQUIRE(index.tensors.size() == 2);
  CHECK(index.tensors.at("a.w").shape == std::vector<int64_t>{3, 4});
  CHECK(index.tensors.at("b.w").begin == 48);
  CHECK(index.shards.front().dataStart % 8 == 0);
  CHECK(index.largestTensorBytes() == 48);

  writeShard(dir / "model.safetensors", {{"a.w", "", {3, 4}, 0, 0, ""}, {"b.w", "", {5}, 0, 0, ""}}, 2);  // two floats short
  CHECK_THROWS_WITH(readCheckpointIndex(dir.string()), Contains("b.w") && Contains("truncated"));
  std::filesystem::remove(dir / "model.safetensors");
  std::ofstream(dir / "pytorch_model.bin") << "x";
  CHECK_THROWS_WITH(readCheckpointIndex(dir.string()), Contains("pytorch_model.bin") && Contains("safetensors"));
  removeFlatDir(dir);
}

TEST_CASE("a plan is checked against the index: layers, names, ranks and LayerNorms, one line each", "[checkpoint]") {
  const auto dir = scratch("plan");
  auto shard = [&](std::vector<TensorEntry> e) {
    writeShard(dir / "model.safetensors", std::move(e));
    return readCheckpointIndex(dir.string());
  };
  const auto plan = parsePlan(planJson(), "plan");
  const nlohmann::json config = {{"n_layer", 2}};
  auto good = shard({{"m.layers.0.w", "", {4, 3}, 0, 0, ""}, {"m.layers.0.ln.weight", "", {4}, 0, 0, ""},
                     {"m.layers.1.w", "", {4, 3}, 0, 0, ""}, {"m.layers.1.ln.weight", "", {4}, 0, 0, ""}});
  auto r = resolvePlan(plan, good, config);
  CHECK(r.layers == 2);
  CHECK(r.center.size() == 2);
  CHECK(r.rmsNorms == std::vector<std::string>{"m.layers.0.ln", "m.layers.1.ln"});
  CHECK_THROWS_WITH(resolvePlan(plan, good, nlohmann::json{{"n_layer", 3}}), Contains("n_layer = 3"));

  auto rank = shard({{"m.layers.0.w", "", {4, 3}, 0, 0, ""}, {"m.layers.0.ln.weight", "", {4}, 0, 0, ""},
                     {"m.layers.1.w", "", {12}, 0, 0, ""}, {"m.layers.1.ln.weight", "", {4}, 0, 0, ""}});
  CHECK_THROWS_WITH(resolvePlan(plan, rank, config), Contains("m.layers.1.w has rank 1"));
  auto noLn = shard({{"m.layers.0.w", "", {4, 3}, 0, 0, ""}, {"m.layers.0.ln.weight", "", {4}, 0, 0, ""}, {"m.layers.1.w", "", {4, 3}, 0, 0, ""}});
  CHECK_THROWS_WITH(resolvePlan(plan, noLn, config), Contains("m.layers.1.ln.weight"));
  auto gap = shard({{"m.layers.0.w", "", {4, 3}, 0, 0, ""}, {"m.layers.0.ln.weight", "", {4}, 0, 0, ""}, {"m.layers.2.w", "", {4, 3}, 0, 0, ""}});
  CHECK_THROWS_WITH(resolvePlan(plan, gap, nlohmann::json::object()), Contains("m.layers.1"));

  auto scaled = planJson();
  scaled["scale_absorptions"] = {{{"description", "absorb h.0.ls1.gamma into h.0.attn.proj"}}};
  CHECK_THROWS_WITH(parsePlan(scaled, "p"), Contains("absorb h.0.ls1.gamma into h.0.attn.proj"));
  auto axis = planJson();
  axis["center"][0]["center"][0]["axis"] = 2;
  CHECK_THROWS_WITH(parsePlan(axis, "p"), Contains("axis 2"));
  CHECK_THROWS_WITH(parsePlan(nlohmann::json{{"schema", "x"}}, "p"), Contains(kPlanSchema));
  removeFlatDir(dir);
}
