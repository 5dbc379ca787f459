// The CPU RMS rows are software-pipelined (the output pass of row i runs with the statistics of
// row i + 1; the fused op keeps each sum row in a per-thread buffer between the two passes). That
// must not change a bit: every row of a many-row call equals the same row normalized alone (a
// one-row call has nothing to pipeline), on every instruction set, for rms_norm and both outputs
// of add_rms_norm, at odd sizes, on rows that are not 32-byte aligned, with rows of very different
// scales next to each other (a wrong row's statistics would show), and across calls of different
// widths on the same threads (the buffer is reused).
#include <torch/torch.h>

#include <catch2/catch.hpp>
#include <tuple>

#include "foldnorm/ops/rms_norm.h"
#include "norm_rows_helpers.h"
#include "ops_test_helpers.h"

namespace {

using foldnorm::test::IsaScope;
using foldnorm::test::isasOnThisCpu;
using foldnorm::test::scaledRows;
const auto bits = foldnorm::test::rawBits;

}  // namespace

TEST_CASE("pipelined CPU RMS rows give each row the bits it gets alone", "[ops][pipelined]") {
  const auto dtype = GENERATE(torch::kFloat32, torch::kFloat64, torch::kBFloat16, torch::kFloat16);
  const int64_t cols = GENERATE(1, 17, 33, 768, 1000);
  const int64_t offset = GENERATE(0, 3);
  const bool add = GENERATE(false, true);
  const int64_t rows = 23;  // one task of several rows at these widths (grain 32768 / cols)
  INFO("dtype " << dtype << " cols " << cols << " offset " << offset << " add " << add);
  const auto x = scaledRows(rows, cols, offset, dtype, 1);
  const auto r = scaledRows(rows, cols, offset + 1, dtype, 2);
  torch::manual_seed(3);
  // float32 parameters for 16-bit inputs: the same kernel path whether a call has 1 row or 23
  // (16-bit parameters are widened from 16 rows on, a path tests/test_ops_fused.cpp compares).
  const auto paramType = dtype == torch::kFloat64 ? torch::kFloat64 : torch::kFloat32;
  const auto w = torch::randn({cols}).to(paramType), b = torch::randn({cols}).to(paramType);
  for (auto isa : isasOnThisCpu()) {
    INFO("isa " << foldnorm::ops::toString(isa));
    IsaScope scope(isa);
    at::Tensor y, s;
    if (add) {
      std::tie(y, s) = foldnorm::ops::addRmsNorm(x, r, {cols}, w, b, 1e-5);
    } else {
      y = foldnorm::ops::rmsNorm(x, {cols}, w, b, 1e-5);
    }
    // A narrower call in between leaves the per-thread buffer holding other rows.
    foldnorm::ops::addRmsNorm(x.narrow(1, 0, 1), r.narrow(1, 0, 1), {1}, std::nullopt, std::nullopt, 1e-5);
    bool allSame = true;
    for (int64_t k = 0; k < rows; ++k) {
      const auto xk = x.narrow(0, k, 1), rk = r.narrow(0, k, 1);
      if (add) {
        auto [yk, sk] = foldnorm::ops::addRmsNorm(xk, rk, {cols}, w, b, 1e-5);
        allSame = allSame && bits(y[k]).equal(bits(yk[0])) && bits(s[k]).equal(bits(sk[0]));
      } else {
        allSame = allSame && bits(y[k]).equal(bits(foldnorm::ops::rmsNorm(xk, {cols}, w, b, 1e-5)[0]));
      }
    }
    CHECK(allSame);
    // Rows of different scales normalize to different outputs (the check above compares real rows).
    if (cols >= 17) CHECK_FALSE(bits(y[0]).equal(bits(y[1])));
  }
}
