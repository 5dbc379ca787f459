// The CUDA kernels of foldnorm::rms_norm / foldnorm::layer_norm against a float64 reference.
// Without a CUDA device each test says why and reports itself skipped (tests/skip.h).
#include <torch/cuda.h>
#include <torch/torch.h>

#include <catch2/catch.hpp>

#include "foldnorm/ops/rms_norm.h"
#include "skip.h"

namespace {

bool cudaMissing() {
  if (torch::cuda::is_available()) return false;
  foldnorm::test::skipTest("torch::cuda::is_available() is false on this machine (no CUDA device or driver)");
  return true;
}

torch::Tensor reference(bool layer, const torch::Tensor& x, const std::optional<torch::Tensor>& w,
                        const std::optional<torch::Tensor>& b, double eps) {
  auto xd = x.to(torch::kCPU, torch::kFloat64);
  if (layer) xd = xd - xd.mean(-1, true);
  auto y = xd / torch::sqrt(xd.pow(2).mean(-1, true) + eps);
  if (w) y = y * w->to(torch::kCPU, torch::kFloat64);
  if (b) y = y + b->to(torch::kCPU, torch::kFloat64);
  return y;
}

// |y - ref| <= abs + rel * |ref|: one unit in the last place of the output type, plus float sums.
double worstExcess(const torch::Tensor& y, const torch::Tensor& ref, torch::Dtype dtype) {
  double abs = 2e-6, rel = 2e-6;
  if (dtype == torch::kFloat64) abs = rel = 1e-12;
  if (dtype == torch::kBFloat16) abs = 1e-3, rel = 1.0 / 128;
  if (dtype == torch::kFloat16) abs = 1e-4, rel = 1.0 / 1024;
  auto err = (y.to(torch::kCPU, torch::kFloat64) - ref).abs();
  return (err - (ref.abs() * rel + abs)).max().item<double>();
}

}  // namespace

TEST_CASE("CUDA rms_norm and layer_norm match a float64 reference", "[ops][cuda]") {
  if (cudaMissing()) return;
  const auto dtype = GENERATE(torch::kFloat32, torch::kBFloat16, torch::kFloat16, torch::kFloat64);
  // Every threads-per-row bucket, sizes off the vector width (fallback), and past the register
  // path's capacity (20000).
  const int64_t hidden =
      GENERATE(1, 3, 17, 64, 100, 768, 1000, 1024, 3000, 4096, 5000, 8192, 12288, 16384, 20000);
  // 1 row, and row counts that leave the last block partly empty for 4, 2 and 8 rows per block.
  const int64_t rows = GENERATE(1, 7, 133);
  const bool layer = GENERATE(false, true);
  const bool affine = GENERATE(false, true);
  const auto cuda = torch::TensorOptions().device(torch::kCUDA);
  torch::manual_seed(hidden * 131 + rows);
  const auto x = (torch::randn({rows, hidden}, torch::kFloat64) * 2 + 0.25).to(cuda.dtype(dtype));
  std::optional<torch::Tensor> w, b;
  if (affine) {
    w = torch::randn({hidden}, torch::kFloat64).to(cuda.dtype(dtype));
    b = torch::randn({hidden}, torch::kFloat64).to(cuda.dtype(dtype));
  }
  INFO((layer ? "layer_norm " : "rms_norm ") << x.sizes() << " " << x.dtype() << " affine "
                                             << affine);
  const auto y = layer ? foldnorm::ops::layerNorm(x, {hidden}, w, b, 1e-5)
                       : foldnorm::ops::rmsNorm(x, {hidden}, w, b, 1e-5);
  REQUIRE(y.is_cuda());
  CHECK(worstExcess(y, reference(layer, x, w, b, 1e-5), dtype) <= 0);
}

TEST_CASE("CUDA rms_norm handles mixed parameters, misaligned rows, only one of weight and bias",
          "[ops][cuda]") {
  if (cudaMissing()) return;
  const auto cuda = torch::TensorOptions().device(torch::kCUDA);
  torch::manual_seed(1);
  SECTION("bfloat16 input with float32 weight and bias") {
    const auto x = torch::randn({65, 768}, cuda).to(torch::kBFloat16);
    const auto w = torch::randn({768}, cuda), b = torch::randn({768}, cuda);
    const auto y = foldnorm::ops::rmsNorm(x, {768}, w, b, 1e-6);
    CHECK(worstExcess(y, reference(false, x, w, b, 1e-6), torch::kBFloat16) <= 0);
  }
  SECTION("an input view starting one element into its storage (not 16-byte aligned)") {
    const auto storage = torch::randn({65 * 1024 + 1}, cuda);
    const auto x = storage.narrow(0, 1, 65 * 1024).view({65, 1024});
    REQUIRE(x.is_contiguous());
    const auto y = foldnorm::ops::rmsNorm(x, {1024}, std::nullopt, std::nullopt, 1e-5);
    CHECK(worstExcess(y, reference(false, x, std::nullopt, std::nullopt, 1e-5), torch::kFloat32) <=
          0);
  }
  SECTION("weight only and bias only, both kinds") {
    const auto x = torch::randn({33, 2048}, cuda).to(torch::kFloat16);
    const auto p = torch::randn({2048}, cuda).to(torch::kFloat16);
    for (bool layer : {false, true}) {
      const auto yw = layer ? foldnorm::ops::layerNorm(x, {2048}, p, std::nullopt, 1e-5)
                            : foldnorm::ops::rmsNorm(x, {2048}, p, std::nullopt, 1e-5);
      const auto yb = layer ? foldnorm::ops::layerNorm(x, {2048}, std::nullopt, p, 1e-5)
                            : foldnorm::ops::rmsNorm(x, {2048}, std::nullopt, p, 1e-5);
      CHECK(worstExcess(yw, reference(layer, x, p, std::nullopt, 1e-5), torch::kFloat16) <= 0);
      CHECK(worstExcess(yb, reference(layer, x, std::nullopt, p, 1e-5), torch::kFloat16) <= 0);
    }
  }
  SECTION("out= on the device, and agreement with the CPU kernel") {
    const auto x = torch::randn({100, 4096}, cuda);
    const auto w = torch::randn({4096}, cuda), b = torch::randn({4096}, cuda);
    auto out = torch::empty_like(x);
    foldnorm::ops::rmsNormOut(out, x, {4096}, w, b, 1e-5);
    const auto cpu = foldnorm::ops::rmsNorm(x.cpu(), {4096}, w.cpu(), b.cpu(), 1e-5);
    CHECK(torch::allclose(out.cpu(), cpu, 1e-5, 1e-5));
  }
}

TEST_CASE("CUDA add_rms_norm equals aten::add + rms_norm bit for bit and the float64 reference",
          "[ops][cuda][fused]") {
  if (cudaMissing()) return;
  const auto dtype = GENERATE(torch::kFloat32, torch::kBFloat16, torch::kFloat16, torch::kFloat64);
  // Register path buckets, sizes off the vector width (warp fallback), past register capacity.
  const int64_t hidden = GENERATE(1, 3, 767, 768, 769, 4096, 4097, 8192, 20000);
  const int64_t rows = GENERATE(1, 133);
  const bool affine = GENERATE(false, true);
  const auto cuda = torch::TensorOptions().device(torch::kCUDA).dtype(dtype);
  torch::manual_seed(hidden * 7 + rows);
  const auto x = (torch::randn({rows, hidden}, torch::kFloat64) * 2 + 0.25).to(cuda);
  const auto r = torch::randn({rows, hidden}, torch::kFloat64).to(cuda);
  std::optional<torch::Tensor> w, b;
  if (affine) {
    w = torch::randn({hidden}, torch::kFloat64).to(cuda);
    b = torch::randn({hidden}, torch::kFloat64).to(cuda);
  }
  INFO("add_rms_norm " << x.sizes() << " " << x.dtype() << " affine " << affine);
  const auto [normed, sum] = foldnorm::ops::addRmsNorm(x, r, {hidden}, w, b, 1e-5);
  const auto expectedSum = torch::add(x, r);
  CHECK(torch::equal(sum, expectedSum));
  CHECK(torch::equal(normed, foldnorm::ops::rmsNorm(expectedSum, {hidden}, w, b, 1e-5)));
  CHECK(worstExcess(normed, reference(false, expectedSum, w, b, 1e-5), dtype) <= 0);
}

TEST_CASE("CUDA add_rms_norm takes misaligned views and writes in place", "[ops][cuda][fused]") {
  if (cudaMissing()) return;
  const auto cuda = torch::TensorOptions().device(torch::kCUDA);
  torch::manual_seed(2);
  const auto storage = torch::randn({2, 65 * 1024 + 1}, cuda).to(torch::kBFloat16);
  const auto x = storage[0].narrow(0, 1, 65 * 1024).view({65, 1024});
  const auto r = storage[1].narrow(0, 0, 65 * 1024).view({65, 1024});
  const auto w = torch::randn({1024}, cuda);  // float32 weight of a bfloat16 input
  const auto [normed, sum] = foldnorm::ops::addRmsNorm(x, r, {1024}, w, std::nullopt, 1e-6);
  const auto s = torch::add(x, r);
  CHECK(torch::equal(sum, s));
  CHECK(torch::equal(normed, foldnorm::ops::rmsNorm(s, {1024}, w, std::nullopt, 1e-6)));
  auto inPlace = r.clone();
  auto out = torch::empty_like(inPlace);
  foldnorm::ops::addRmsNormOut(out, inPlace, x, inPlace, {1024}, w, std::nullopt, 1e-6);
  CHECK(torch::equal(inPlace, s));
  CHECK(torch::equal(out, normed));
}

TEST_CASE("CUDA gradients of the norms match the CPU kernels (checked against finite differences)",
          "[ops][cuda][backward]") {
  if (cudaMissing()) return;
  const auto dtype = GENERATE(torch::kFloat32, torch::kBFloat16, torch::kFloat16, torch::kFloat64);
  const bool layer = GENERATE(false, true);
  const int64_t hidden = GENERATE(1, 7, 768, 4097);
  const auto cuda = torch::TensorOptions().device(torch::kCUDA);
  torch::manual_seed(hidden + layer);
  const auto x = (torch::randn({150, hidden}, torch::kFloat64) + 0.5).to(dtype);
  const auto w = torch::randn({hidden}, torch::kFloat64).to(dtype);
  const auto b = torch::randn({hidden}, torch::kFloat64).to(dtype);
  const auto g = torch::randn({150, hidden}, torch::kFloat64).to(dtype);
  INFO((layer ? "layer_norm" : "rms_norm") << " backward " << torch::toString(dtype) << " hidden "
                                           << hidden);
  const auto [dx, dw, db] = foldnorm::ops::normBackward(layer, g.to(cuda.dtype(dtype)),
                                                        x.to(cuda.dtype(dtype)), {hidden},
                                                        w.to(cuda.dtype(dtype)),
                                                        b.to(cuda.dtype(dtype)), 1e-5,
                                                        {true, true, true});
  // The CPU kernels are checked against finite differences in tests/test_ops_backward.cpp.
  const auto [cx, cw, cb] =
      foldnorm::ops::normBackward(layer, g, x, {hidden}, w, b, 1e-5, {true, true, true});
  double tol = 1e-4;
  if (dtype == torch::kFloat64) tol = 1e-11;
  if (dtype == torch::kBFloat16) tol = 2e-2;
  if (dtype == torch::kFloat16) tol = 3e-3;
  for (const auto& [gpu, cpu] : {std::pair{dx, cx}, std::pair{dw, cw}, std::pair{db, cb}}) {
    REQUIRE(gpu.is_cuda());
    const auto scale = cpu.to(torch::kFloat64).abs().max().item<double>() + 1e-30;
    CHECK((gpu.cpu().to(torch::kFloat64) - cpu.to(torch::kFloat64)).abs().max().item<double>() /
              scale <= tol);
  }
}
