// The AVX-512 16-bit RMS rows (src/ops/norm_cpu_avx512.cpp) give the AVX2 kernel's bits: odd
// sizes (the scalar tail), misaligned rows, every weight/bias combination, the fused add, the
// streaming-store size, and special values (NaN, infinities, subnormals), compared as raw bits
// (a NaN as any NaN), with each task's rows software-pipelined (37 rows: several per task).
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include "foldnorm/ops/rms_norm.h"
#include "ops_test_helpers.h"
#include "skip.h"

using foldnorm::ops::CpuKernelIsa;
using foldnorm::test::IsaScope;

namespace {

bool haveAvx512() {
  for (auto isa : foldnorm::test::isasOnThisCpu())
    if (isa == CpuKernelIsa::kAvx512) return true;
  return false;
}

at::Tensor bits(const at::Tensor& t) { return t.contiguous().view(torch::kInt16); }

// The same 16-bit patterns everywhere, except that a NaN may be any NaN: the sign and payload of a
// NaN made by arithmetic (inf + -inf, NaN * w) follow the compiler's operand order in the scalar
// tail, which neither kernel promises (ATen does not either).
bool sameBits(const at::Tensor& got, const at::Tensor& want) {
  if (got.sizes() != want.sizes()) return false;
  auto same = bits(got) == bits(want);
  auto bothNan = got.isnan() & want.isnan();
  return (same | bothNan).all().item<bool>() && got.isnan().equal(want.isnan());
}

// [rows, cols] starting `offset` elements into a larger buffer: rows not 32-byte aligned.
at::Tensor misaligned(int64_t rows, int64_t cols, int64_t offset, torch::Dtype dtype, uint64_t seed) {
  torch::manual_seed(seed);
  auto storage = (torch::randn({rows * cols + offset}) * 3).to(dtype);
  return storage.narrow(0, offset, rows * cols).view({rows, cols});
}

struct Result {
  at::Tensor y, sum;
};

Result runOn(CpuKernelIsa isa, bool add, const at::Tensor& x, const at::Tensor& r, int64_t cols,
             const std::optional<at::Tensor>& w, const std::optional<at::Tensor>& b) {
  IsaScope scope(isa);
  if (!add) return {foldnorm::ops::rmsNorm(x, {cols}, w, b, 1e-5), {}};
  auto [y, s] = foldnorm::ops::addRmsNorm(x, r, {cols}, w, b, 1e-5);
  return {y, s};
}

}  // namespace

TEST_CASE("the AVX-512 16-bit RMS rows give the AVX2 kernel's bits", "[ops][avx512]") {
  if (!haveAvx512()) return foldnorm::test::skipTest("this CPU has no AVX-512 F/BW/VL/DQ");
  const auto dtype = GENERATE(torch::kBFloat16, torch::kFloat16);
  const int64_t cols = GENERATE(1, 15, 16, 17, 33, 768, 1000, 4097);
  const int64_t offset = GENERATE(0, 1, 3);
  const bool add = GENERATE(false, true);
  const int affine = GENERATE(0, 1, 2, 3);  // bit 0: weight, bit 1: bias
  INFO("dtype " << dtype << " cols " << cols << " offset " << offset << " add " << add << " affine " << affine);
  const int64_t rows = 37;  // >= 16: 16-bit parameters are widened to float32, the AVX-512 path
  auto x = misaligned(rows, cols, offset, dtype, 1);
  auto r = misaligned(rows, cols, offset + 1, dtype, 2);
  // Special values in the first row: NaN, +-inf, a subnormal of the 16-bit type, an exact zero.
  if (cols >= 5) {
    x[0][0] = std::numeric_limits<float>::quiet_NaN();
    x[0][1] = std::numeric_limits<float>::infinity();
    x[0][2] = -std::numeric_limits<float>::infinity();
    x[0][3] = dtype == torch::kBFloat16 ? 1e-39 : 3e-6;
    x[0][4] = 0.0;
  }
  // Rows of tiny values: outputs and sums near the subnormal range.
  x[1] = x[1] * 1e-20;
  torch::manual_seed(3);
  std::optional<at::Tensor> w, b;
  if (affine & 1) w = torch::randn({cols}).to(dtype);
  if (affine & 2) b = torch::randn({cols}).to(dtype);
  auto want = runOn(CpuKernelIsa::kAvx2, add, x, r, cols, w, b);
  auto got = runOn(CpuKernelIsa::kAvx512, add, x, r, cols, w, b);
  CHECK(sameBits(got.y, want.y));
  if (add) CHECK(sameBits(got.sum, want.sum));
  // The output depends on the input (not a constant kernel).
  if (cols >= 15) CHECK_FALSE(bits(got.y[2]).equal(bits(got.y[3])));
}

TEST_CASE("the AVX-512 16-bit rows with streaming stores give the AVX2 bits", "[ops][avx512]") {
  if (!haveAvx512()) return foldnorm::test::skipTest("this CPU has no AVX-512 F/BW/VL/DQ");
  const auto dtype = GENERATE(torch::kBFloat16, torch::kFloat16);
  const bool add = GENERATE(false, true);
  // 2048 x 4096 x 2 bytes = 16 MiB: at the streaming-store size.
  torch::manual_seed(5);
  auto x = torch::randn({2048, 4096}).to(dtype);
  auto r = torch::randn({2048, 4096}).to(dtype);
  auto w = torch::randn({4096}), b = torch::randn({4096});
  auto want = runOn(CpuKernelIsa::kAvx2, add, x, r, 4096, w, b);
  auto got = runOn(CpuKernelIsa::kAvx512, add, x, r, 4096, w, b);
  CHECK(sameBits(got.y, want.y));
  if (add) CHECK(sameBits(got.sum, want.sum));
}
