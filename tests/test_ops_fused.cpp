// foldnorm::add_rms_norm on the CPU: against a float64 reference of rms_norm(x + r) (the sum
// rounded to the dtype first, as aten::add writes it), bitwise against aten::add followed by
// foldnorm::rms_norm, odd hidden sizes, misaligned and non-contiguous operands, streaming stores,
// out= and in place, and the arguments it refuses.
#include <torch/torch.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <tuple>

#include "foldnorm/ops/rms_norm.h"
#include "ops_test_helpers.h"

namespace {

using foldnorm::test::IsaScope;
using foldnorm::test::isasOnThisCpu;

// rms_norm of the sum in float64; the sum itself rounded to the dtype as aten::add does (that
// rounding is part of the op's definition, so the reference applies it too).
torch::Tensor reference(const torch::Tensor& x, const torch::Tensor& r,
                        const std::optional<torch::Tensor>& w,
                        const std::optional<torch::Tensor>& b, double eps) {
  const auto s = (x.to(torch::kFloat64) + r.to(torch::kFloat64)).to(x.scalar_type());
  auto sd = s.to(torch::kFloat64);
  auto y = sd / torch::sqrt(sd.pow(2).mean(-1, true) + eps);
  if (w) y = y * w->to(torch::kFloat64);
  if (b) y = y + b->to(torch::kFloat64);
  return y;
}

// |y - ref| <= abs + rel * |ref|, the tolerances of tests/test_ops.cpp.
double worstExcess(const torch::Tensor& y, const torch::Tensor& ref) {
  double abs = 2e-6, rel = 2e-6;
  switch (y.scalar_type()) {
    case torch::kFloat64: abs = rel = 1e-12; break;
    case torch::kBFloat16: abs = 1e-3, rel = 1.0 / 128; break;
    case torch::kFloat16: abs = 1e-4, rel = 1.0 / 1024; break;
    default: break;
  }
  return ((y.to(torch::kFloat64) - ref).abs() - (ref.abs() * rel + abs)).max().item<double>();
}

// The unfused pair the fused op replaces.
std::tuple<torch::Tensor, torch::Tensor> unfused(const torch::Tensor& x, const torch::Tensor& r,
                                                 const std::optional<torch::Tensor>& w,
                                                 const std::optional<torch::Tensor>& b,
                                                 double eps) {
  const auto s = torch::add(x, r);
  return {foldnorm::ops::rmsNorm(s, {x.size(-1)}, w, b, eps), s};
}

}  // namespace

TEST_CASE("add_rms_norm matches a float64 reference and aten::add + rms_norm bit for bit",
          "[ops][fused]") {
  const auto dtype = GENERATE(torch::kFloat32, torch::kFloat64, torch::kBFloat16, torch::kFloat16);
  const int64_t hidden = GENERATE(1, 3, 767, 768, 769, 4097);
  const bool withWeight = GENERATE(false, true);
  const bool withBias = GENERATE(false, true);
  torch::manual_seed(hidden * 4 + withWeight * 2 + withBias);
  const auto x = (torch::randn({5, 3, hidden}, torch::kFloat64) * 2 + 0.3).to(dtype);
  const auto r = torch::randn({5, 3, hidden}, torch::kFloat64).to(dtype);
  std::optional<torch::Tensor> w, b;
  if (withWeight) w = torch::randn({hidden}, torch::kFloat64).to(dtype);
  if (withBias) b = torch::randn({hidden}, torch::kFloat64).to(dtype);
  const auto ref = reference(x, r, w, b, 1e-5);
  for (auto isa : isasOnThisCpu()) {
    IsaScope scope(isa);
    INFO(x.dtype() << " hidden " << hidden << " weight " << withWeight << " bias " << withBias
                   << " isa " << foldnorm::ops::toString(isa));
    const auto [normed, sum] = foldnorm::ops::addRmsNorm(x, r, {hidden}, w, b, 1e-5);
    const auto [expectedNormed, expectedSum] = unfused(x, r, w, b, 1e-5);
    CHECK(normed.sizes() == x.sizes());
    CHECK(normed.scalar_type() == dtype);
    CHECK(torch::equal(sum, expectedSum));
    CHECK(torch::equal(normed, expectedNormed));
    CHECK(worstExcess(normed, ref) <= 0);
  }
}

// The 16-bit sum is rounded as aten::add rounds it, a chunk with a NaN included: on AVX2 a bfloat16
// chunk without NaN takes a shorter rounding than ATen's (one unordered compare for the chunk), a
// chunk with one takes ATen's own conversion (NaN -> 0xffff, aten::add's pattern on this CPU's
// vector paths). 768 columns: whole vectors in both
// aten::add's loop and ours, so no scalar tail (whose NaN pattern is c10's) is involved.
TEST_CASE("add_rms_norm's 16-bit sum has aten::add's bits with NaN and infinities in a row", "[ops][fused]") {
  const auto dtype = GENERATE(torch::kBFloat16, torch::kFloat16);
  torch::manual_seed(7);
  auto x = torch::randn({6, 768}, torch::kFloat64).to(dtype);
  auto r = torch::randn({6, 768}, torch::kFloat64).to(dtype);
  const double inf = std::numeric_limits<double>::infinity();
  x.index_put_({1, 100}, std::nan(""));
  x.index_put_({2, 5}, inf);
  r.index_put_({2, 5}, -inf);  // inf + -inf: a NaN made by the add
  x.index_put_({3, 700}, inf);
  x.index_put_({4, 17}, 3e38);  // past bfloat16's largest finite value after the add: rounds to inf
  r.index_put_({4, 17}, 3e38);
  for (auto isa : isasOnThisCpu()) {
    IsaScope scope(isa);
    INFO(x.dtype() << " isa " << foldnorm::ops::toString(isa));
    const auto [normed, sum] = foldnorm::ops::addRmsNorm(x, r, {768}, std::nullopt, std::nullopt, 1e-5);
    const auto expected = torch::add(x, r);
    // The vector paths give aten::add's NaN pattern too; the portable path rounds with c10's scalar
    // conversion (another NaN pattern, as aten's own scalar loops): equal bits where not NaN.
    const auto notNan = ~torch::isnan(expected);
    CHECK(torch::equal(torch::isnan(sum), torch::isnan(expected)));
    CHECK(torch::equal(sum.view(torch::kInt16).masked_select(notNan), expected.view(torch::kInt16).masked_select(notNan)));
    if (isa != foldnorm::ops::CpuKernelIsa::kPortable)
      CHECK(torch::equal(sum.view(torch::kInt16), expected.view(torch::kInt16)));
    CHECK(torch::isnan(sum[1][100]).item<bool>());
    CHECK(torch::isnan(sum[2][5]).item<bool>());
    CHECK(torch::isinf(sum[3][700]).item<bool>());
    // Rows without a special value normalize as the unfused pair does; the others are NaN where
    // the pair's are (a row with an inf has an inf sum of squares: its finite entries become 0).
    const auto pair = foldnorm::ops::rmsNorm(expected, {768}, std::nullopt, std::nullopt, 1e-5);
    CHECK(torch::equal(normed[0], pair[0]));
    CHECK(torch::equal(normed[5], pair[5]));
    CHECK(torch::equal(torch::isnan(normed), torch::isnan(pair)));
  }
}

TEST_CASE("add_rms_norm takes misaligned, non-contiguous and mixed-precision operands",
          "[ops][fused]") {
  const auto dtype = GENERATE(torch::kFloat32, torch::kBFloat16);
  const int64_t hidden = GENERATE(767, 769, 4097);
  torch::manual_seed(3);
  const int64_t rows = 9;
  // A generator, not a loop: Catch2 runs one SECTION per pass, so a loop would skip some.
  const auto isa = GENERATE(from_range(isasOnThisCpu()));
  IsaScope scope(isa);
  INFO(torch::toString(dtype) << " hidden " << hidden << " isa " << foldnorm::ops::toString(isa));
  {
    SECTION("views one element into their storage (rows off the vector width)") {
      const auto big = torch::randn({2, rows * hidden + 3}).to(dtype);
      const auto x = big[0].narrow(0, 1, rows * hidden).view({rows, hidden});
      const auto r = big[1].narrow(0, 3, rows * hidden).view({rows, hidden});
      REQUIRE(x.is_contiguous());
      REQUIRE(reinterpret_cast<uintptr_t>(x.data_ptr()) % 32 != 0);
      const auto w = torch::randn({hidden}).to(dtype);
      const auto [normed, sum] = foldnorm::ops::addRmsNorm(x, r, {hidden}, w, std::nullopt, 1e-5);
      const auto [en, es] = unfused(x, r, w, std::nullopt, 1e-5);
      CHECK(torch::equal(sum, es));
      CHECK(torch::equal(normed, en));
      CHECK(worstExcess(normed, reference(x, r, w, std::nullopt, 1e-5)) <= 0);
    }
    SECTION("a row stride past the row (a column slice) and a transposed residual") {
      const auto wide = torch::randn({rows, hidden + 5}).to(dtype);
      const auto x = wide.narrow(1, 2, hidden);
      const auto r = torch::randn({hidden, rows}).to(dtype).t();
      REQUIRE_FALSE(x.is_contiguous());
      REQUIRE_FALSE(r.is_contiguous());
      const auto [normed, sum] = foldnorm::ops::addRmsNorm(x, r, {hidden}, std::nullopt, std::nullopt, 1e-6);
      const auto [en, es] = unfused(x, r, std::nullopt, std::nullopt, 1e-6);
      CHECK(normed.is_contiguous());
      CHECK(torch::equal(sum, es));
      CHECK(torch::equal(normed, en));
    }
  }
  SECTION("16-bit input with float32 weight and bias") {
    const auto x = torch::randn({rows, hidden}).to(torch::kBFloat16);
    const auto r = torch::randn({rows, hidden}).to(torch::kBFloat16);
    const auto w = torch::randn({hidden}), b = torch::randn({hidden});
    const auto [normed, sum] = foldnorm::ops::addRmsNorm(x, r, {hidden}, w, b, 1e-5);
    const auto [en, es] = unfused(x, r, w, b, 1e-5);
    CHECK(torch::equal(normed, en));
    CHECK(worstExcess(normed, reference(x, r, w, b, 1e-5)) <= 0);
  }
}

TEST_CASE("add_rms_norm with streaming stores equals its cached-store result", "[ops][fused]") {
  // 16 MiB and more of output is streamed on AVX2 (both outputs); a slice small enough for plain
  // stores must give the same bits, and both must equal the unfused pair.
  const auto dtype = GENERATE(torch::kFloat32, torch::kBFloat16);
  const int64_t hidden = 1024;
  const int64_t rows = (int64_t{17} << 20) / (hidden * torch::elementSize(dtype));
  torch::manual_seed(13);
  const auto x = torch::randn({rows, hidden}).to(dtype);
  const auto r = torch::randn({rows, hidden}).to(dtype);
  const auto w = torch::randn({hidden}).to(dtype);
  const auto b = torch::randn({hidden}).to(dtype);
  for (auto isa : isasOnThisCpu()) {
    IsaScope scope(isa);
    INFO(torch::toString(dtype) << " isa " << foldnorm::ops::toString(isa));
    const auto [normed, sum] = foldnorm::ops::addRmsNorm(x, r, {hidden}, w, b, 1e-5);
    const auto tail = [&](const torch::Tensor& t) { return t.narrow(0, rows - 64, 64); };
    const auto [smallNormed, smallSum] =
        foldnorm::ops::addRmsNorm(tail(x), tail(r), {hidden}, w, b, 1e-5);
    CHECK(torch::equal(tail(normed), smallNormed));
    CHECK(torch::equal(tail(sum), smallSum));
    const auto [en, es] = unfused(x, r, w, b, 1e-5);
    CHECK(torch::equal(sum, es));
    CHECK(torch::equal(normed, en));
  }
}

TEST_CASE("add_rms_norm.out writes in place into the residual stream", "[ops][fused]") {
  torch::manual_seed(17);
  const auto x = torch::randn({6, 100});
  const auto w = torch::randn({100});
  const auto [en, es] = unfused(x, x * 0.5, w, std::nullopt, 1e-5);
  SECTION("sum into the residual, out into a fresh tensor") {
    auto r = x * 0.5;
    auto out = torch::empty({0});
    const auto* residualData = r.data_ptr();
    foldnorm::ops::addRmsNormOut(out, r, x, r, {100}, w, std::nullopt, 1e-5);
    CHECK(r.data_ptr() == residualData);
    CHECK(out.sizes() == x.sizes());
    CHECK(torch::equal(r, es));
    CHECK(torch::equal(out, en));
  }
  SECTION("out into the input, sum into the residual") {
    auto in = x.clone();
    auto r = x * 0.5;
    foldnorm::ops::addRmsNormOut(in, r, in, r, {100}, w, std::nullopt, 1e-5);
    CHECK(torch::equal(r, es));
    CHECK(torch::equal(in, en));
  }
  SECTION("out and sum may not be one tensor") {
    auto r = x * 0.5;
    auto out = torch::empty_like(x);
    CHECK_THROWS_WITH(foldnorm::ops::addRmsNormOut(out, out, x, r, {100}, w, std::nullopt, 1e-5),
                      Catch::Matchers::Contains("out and sum"));
  }
}

TEST_CASE("add_rms_norm refuses broadcasting and mismatched operands clearly", "[ops][fused]") {
  using Catch::Matchers::Contains;
  const auto x = torch::randn({4, 8});
  CHECK_THROWS_WITH(foldnorm::ops::addRmsNorm(x, torch::randn({8}), {8}, {}, {}, 1e-5),
                    Contains("does not broadcast") && Contains("residual has shape"));
  CHECK_THROWS_WITH(foldnorm::ops::addRmsNorm(x, torch::randn({1, 8}), {8}, {}, {}, 1e-5),
                    Contains("does not broadcast"));
  CHECK_THROWS_WITH(
      foldnorm::ops::addRmsNorm(x, torch::randn({4, 8}, torch::kFloat64), {8}, {}, {}, 1e-5),
      Contains("residual has dtype"));
  CHECK_THROWS_WITH(foldnorm::ops::addRmsNorm(x, x, {4}, {}, {}, 1e-5),
                    Contains("expected input with shape"));
  CHECK_THROWS_WITH(foldnorm::ops::addRmsNorm(x, x, {8}, torch::ones({7}), {}, 1e-5),
                    Contains("weight"));
  auto badOut = torch::empty({4, 8}, torch::kFloat64);
  auto sum = torch::empty({4, 8});
  CHECK_THROWS_WITH(foldnorm::ops::addRmsNormOut(badOut, sum, x, x, {8}, {}, {}, 1e-5),
                    Contains("out has dtype"));
  const auto [normed, s] = foldnorm::ops::addRmsNorm(torch::empty({0, 8}), torch::empty({0, 8}),
                                                     {8}, {}, {}, 1e-5);
  CHECK(normed.sizes() == torch::IntArrayRef({0, 8}));
  CHECK(s.sizes() == torch::IntArrayRef({0, 8}));
}

TEST_CASE("16-bit parameters widened for many rows give the bits of the few-row path",
          "[ops][fused]") {
  // From 16 rows on, 16-bit weight and bias are widened to float32 before the kernel; fewer rows
  // use them as they are. Rows of a 40-row call must equal the same rows normalized alone.
  const auto dtype = GENERATE(torch::kBFloat16, torch::kFloat16);
  const auto isa = GENERATE(from_range(isasOnThisCpu()));
  IsaScope scope(isa);
  torch::manual_seed(21);
  const int64_t hidden = 777;
  const auto x = torch::randn({40, hidden}).to(dtype);
  const auto r = torch::randn({40, hidden}).to(dtype);
  const auto w = torch::randn({hidden}).to(dtype);
  const auto b = torch::randn({hidden}).to(dtype);
  const auto head = [](const torch::Tensor& t) { return t.narrow(0, 0, 4); };
  INFO(torch::toString(dtype) << " isa " << foldnorm::ops::toString(isa));
  CHECK(torch::equal(head(foldnorm::ops::rmsNorm(x, {hidden}, w, b, 1e-5)),
                     foldnorm::ops::rmsNorm(head(x), {hidden}, w, b, 1e-5)));
  CHECK(torch::equal(head(foldnorm::ops::layerNorm(x, {hidden}, w, b, 1e-5)),
                     foldnorm::ops::layerNorm(head(x), {hidden}, w, b, 1e-5)));
  const auto many = std::get<0>(foldnorm::ops::addRmsNorm(x, r, {hidden}, w, b, 1e-5));
  const auto few = std::get<0>(foldnorm::ops::addRmsNorm(head(x), head(r), {hidden}, w, b, 1e-5));
  CHECK(torch::equal(head(many), few));
}
