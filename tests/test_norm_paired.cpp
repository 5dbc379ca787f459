// The unfused CPU RMS rows of 4 KiB or more on AVX-512 and 1 KiB or more on AVX2 (16-bit hidden
// >= 2048 / >= 512; float32 and float64 rows of 32 KiB or more) go two rows at a time: the output pass of a pair runs with the statistics of the
// next pair and prefetches the pair after (rmsRowsPaired in norm_cpu_avx512.cpp and
// norm_cpu_rms_paired.h), and a task's last one to three rows are written and summed unpipelined.
// That must not change a bit: every row of a many-row call has the bits of that row normalized
// alone (a one-row call has no pair), on every instruction set, with 1, 2, 3, 5, 6, 7 rows (so
// pairs, single rows and every tail run), at widths on both sides of the 1 KiB, 4 KiB and 32 KiB
// thresholds and at widths that end mid chunk, on rows 3 elements off alignment, with and without
// weight and bias (float32 or the input's own 16-bit parameters), with plain and streaming stores.
// Rows alone run the paired code too (writeAlone), so each row is also compared with the one-row
// pipeline's bits, reached through the fused op, which stays on it at every width: add_rms_norm(x,
// -0) normalizes round(x + -0) = x (x + -0 is x for every x, a zero's sign included) with the same
// operations in the same order, so its normed output is rms_norm(x)'s bit for bit. A float64
// reference says the equal bits are right ones.
#include <torch/torch.h>

#include <catch2/catch.hpp>
#include <vector>

#include "foldnorm/ops/rms_norm.h"
#include "norm_rows_helpers.h"
#include "ops_test_helpers.h"

namespace {

using foldnorm::test::IsaScope;
using foldnorm::test::isasOnThisCpu;
using foldnorm::test::scaledRows;
const auto bitsOf = foldnorm::test::rawBits;

std::optional<at::Tensor> maybe(bool present, const at::Tensor& t) {
  return present ? std::optional<at::Tensor>(t) : std::nullopt;
}

// max |y - float64 reference| / max(1, max |reference|).
double relativeError(const at::Tensor& y, const at::Tensor& x, const std::optional<at::Tensor>& w,
                     const std::optional<at::Tensor>& b) {
  const auto x64 = x.to(torch::kFloat64);
  auto ref = x64 / torch::sqrt(x64.pow(2).mean(-1, true) + 1e-5);
  if (w) ref = ref * w->to(torch::kFloat64);
  if (b) ref = ref + b->to(torch::kFloat64);
  return (y.to(torch::kFloat64) - ref).abs().max().item<double>() / std::max(1.0, ref.abs().max().item<double>());
}

double toleranceOf(torch::Dtype dtype) {
  return dtype == torch::kFloat64 ? 1e-12 : dtype == torch::kFloat32 ? 1e-5 : 2e-2;
}

// Every row in `rows` of y against the same row of x normalized alone.
bool rowsMatchAlone(const at::Tensor& y, const at::Tensor& x, int64_t cols, const std::optional<at::Tensor>& w,
                    const std::optional<at::Tensor>& b, const std::vector<int64_t>& rows) {
  for (int64_t k : rows) {
    const auto alone = foldnorm::ops::rmsNorm(x.narrow(0, k, 1), {cols}, w, b, 1e-5);
    if (!bitsOf(y[k]).equal(bitsOf(alone[0]))) return false;
  }
  return true;
}

// rms_norm's y against the one-row pipeline's y for the same rows (the fused op with a residual of
// -0; its second output, the sum, is x itself).
bool matchesOneRowPipeline(const at::Tensor& y, const at::Tensor& x, int64_t cols, const std::optional<at::Tensor>& w,
                           const std::optional<at::Tensor>& b) {
  auto [pipelined, sum] = foldnorm::ops::addRmsNorm(x, torch::full_like(x, -0.0), {cols}, w, b, 1e-5);
  return bitsOf(sum).equal(bitsOf(x)) && bitsOf(y).equal(bitsOf(pipelined));
}

std::vector<int64_t> allRows(int64_t rows) {
  std::vector<int64_t> all;
  for (int64_t k = 0; k < rows; ++k) all.push_back(k);
  return all;
}

}  // namespace

TEST_CASE("paired CPU RMS rows give each row the bits it gets alone", "[ops][pipelined][paired]") {
  // 16-bit: 504 and 511 under 1 KiB rows (the AVX2 and portable kernels' threshold), 512 (exactly
  // 1 KiB), 2040 and 2047 under 4 KiB rows (the AVX-512 kernel's), 2048 (exactly 4 KiB), 4097 and
  // 5128 (ends mid chunk, and 5120 + 8), with float32 or their own 16-bit parameters. float32: 8192
  // is the first 32 KiB row, 8191 one short, 8200 past; float64: 4095, 4096, 4097.
  struct Shape {
    torch::Dtype dtype;
    int64_t cols;
    bool ownParams;
  };
  std::vector<Shape> shapes;
  for (auto d : {torch::kBFloat16, torch::kFloat16}) {
    for (int64_t c : {504, 511, 512, 2040, 2047, 2048, 4097, 5128}) {
      shapes.push_back({d, c, false});
      shapes.push_back({d, c, true});
    }
  }
  for (int64_t c : {8191, 8192, 8200}) shapes.push_back({torch::kFloat32, c, true});
  for (int64_t c : {4095, 4096, 4097}) shapes.push_back({torch::kFloat64, c, true});
  const auto shape = shapes.at(static_cast<std::size_t>(GENERATE(range(0, 38))));
  REQUIRE(shapes.size() == 38);
  const auto dtype = shape.dtype;
  const int64_t cols = shape.cols;
  const bool ownParams = shape.ownParams;
  // Under 8 rows a width of 4096 or less is one task (grain 32768 / cols): 1 row (no pair), 2 (a
  // pair written alone), 3 (a pair and a single), 5, 6, 7 (one interleaved pair, then a tail of
  // one to three rows). 512-wide rows have grain 64, 2048-wide 16, 8192-wide 4 (two tasks from 5 rows).
  const int64_t rows = GENERATE(1, 2, 3, 5, 6, 7);
  const int64_t offset = GENERATE(0, 3);
  const int affine = GENERATE(0, 1, 2, 3);  // bit 0: weight, bit 1: bias
  INFO("dtype " << dtype << " cols " << cols << " rows " << rows << " offset " << offset << " affine " << affine
                << " 16-bit params " << ownParams);
  const auto x = scaledRows(rows, cols, offset, dtype, 21);
  torch::manual_seed(22);
  // ownParams: the input's dtype (16-bit parameters, used as they are under 16 rows), else float32.
  const auto paramType = ownParams ? dtype : torch::kFloat32;
  const auto w = maybe(affine & 1, torch::randn({cols}, torch::kFloat64).to(paramType));
  const auto b = maybe(affine & 2, torch::randn({cols}, torch::kFloat64).to(paramType));
  for (auto isa : isasOnThisCpu()) {
    INFO("isa " << foldnorm::ops::toString(isa));
    IsaScope scope(isa);
    const auto y = foldnorm::ops::rmsNorm(x, {cols}, w, b, 1e-5);
    CHECK(rowsMatchAlone(y, x, cols, w, b, allRows(rows)));
    CHECK(matchesOneRowPipeline(y, x, cols, w, b));
    CHECK(relativeError(y, x, w, b) < toleranceOf(dtype));
    // The output depends on the input: rows of other values give other outputs.
    if (rows >= 2) CHECK_FALSE(bitsOf(y[0]).equal(bitsOf(y[1])));
  }
}

// Outputs of 16 MiB or more with rows of whole 32 bytes and an aligned y are streamed (the
// kernels' kStreamingStoreMinBytes); an odd row count gives the two tasks (2 threads) unequal
// lengths and tails of one and of three rows.
TEST_CASE("paired CPU RMS rows give each row its bits with streaming stores", "[ops][pipelined][paired]") {
  const auto dtype = GENERATE(torch::kBFloat16, torch::kFloat16, torch::kFloat32);
  const int64_t cols = dtype == torch::kFloat32 ? 8192 : 4096;
  const int64_t rowBytes = cols * (dtype == torch::kFloat32 ? 4 : 2);
  const int64_t rows = (int64_t{16} << 20) / rowBytes + 3;
  const int64_t offset = GENERATE(0, 3);
  INFO("dtype " << dtype << " cols " << cols << " rows " << rows << " offset " << offset);
  const auto x = scaledRows(rows, cols, offset, dtype, 31);
  torch::manual_seed(32);
  const auto w = torch::randn({cols}), b = torch::randn({cols});
  for (auto isa : isasOnThisCpu()) {
    INFO("isa " << foldnorm::ops::toString(isa));
    IsaScope scope(isa);
    const auto y = foldnorm::ops::rmsNorm(x, {cols}, w, b, 1e-5);
    REQUIRE(reinterpret_cast<uintptr_t>(y.data_ptr()) % 32 == 0);  // so the stores stream
    CHECK(rowsMatchAlone(y, x, cols, w, b, allRows(rows)));
    CHECK(matchesOneRowPipeline(y, x, cols, w, b));
    CHECK(relativeError(y, x, w, b) < toleranceOf(dtype));
    CHECK_FALSE(bitsOf(y[0]).equal(bitsOf(y[1])));
    // Unaffine rows stream too.
    const auto plain = foldnorm::ops::rmsNorm(x, {cols}, std::nullopt, std::nullopt, 1e-5);
    CHECK(rowsMatchAlone(plain, x, cols, std::nullopt, std::nullopt, {0, 1, 2, rows / 2 - 1, rows / 2, rows - 1}));
  }
}
