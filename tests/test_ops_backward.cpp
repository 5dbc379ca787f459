// Gradients of foldnorm::rms_norm, foldnorm::layer_norm and foldnorm::add_rms_norm on the CPU:
// autograd through our Autograd kernels against central finite differences in float64 (a
// gradcheck), against autograd of a float64 composite reference for every dtype and both
// instruction sets, and the out= variants refusing inputs that require grad.
#include <torch/torch.h>

#include <catch2/catch.hpp>
#include <functional>

#include "foldnorm/ops/rms_norm.h"
#include "ops_test_helpers.h"

namespace {

using foldnorm::test::IsaScope;
using foldnorm::test::isasOnThisCpu;

enum class Op { kRms, kLayer, kAddRms };

const char* opName(Op op) {
  return op == Op::kRms ? "rms_norm" : (op == Op::kLayer ? "layer_norm" : "add_rms_norm");
}

std::optional<torch::Tensor> maybe(const torch::Tensor& t) {
  return t.defined() ? std::optional<torch::Tensor>(t) : std::nullopt;
}

// The scalar whose gradient is checked: <g, op(...)> (plus <gs, sum> for add_rms_norm).
torch::Tensor objective(Op op, const torch::Tensor& x, const torch::Tensor& r,
                        const torch::Tensor& w, const torch::Tensor& b, const torch::Tensor& g,
                        const torch::Tensor& gs, double eps) {
  const int64_t h = x.size(-1);
  if (op == Op::kAddRms) {
    const auto [normed, sum] = foldnorm::ops::addRmsNorm(x, r, {h}, maybe(w), maybe(b), eps);
    return (normed * g).sum() + (sum * gs).sum();
  }
  const auto y = op == Op::kRms ? foldnorm::ops::rmsNorm(x, {h}, maybe(w), maybe(b), eps)
                                : foldnorm::ops::layerNorm(x, {h}, maybe(w), maybe(b), eps);
  return (y * g).sum();
}

// The same function built from ATen ops in float64 (autograd of these is PyTorch's own).
torch::Tensor referenceObjective(Op op, const torch::Tensor& x, const torch::Tensor& r,
                                 const torch::Tensor& w, const torch::Tensor& b,
                                 const torch::Tensor& g, const torch::Tensor& gs, double eps) {
  auto s = op == Op::kAddRms ? x + r : x;
  auto c = op == Op::kLayer ? s - s.mean(-1, true) : s;
  auto y = c / torch::sqrt(c.pow(2).mean(-1, true) + eps);
  if (w.defined()) y = y * w;
  if (b.defined()) y = y + b;
  auto out = (y * g).sum();
  if (op == Op::kAddRms) out = out + (s * gs).sum();
  return out;
}

// Central differences of f with respect to every element of t (float64, modified in place).
torch::Tensor numericalGradient(torch::Tensor t, const std::function<double()>& f, double h) {
  auto grad = torch::zeros_like(t);
  auto flat = t.view({-1});
  auto gflat = grad.view({-1});
  for (int64_t i = 0; i < flat.numel(); ++i) {
    const double v = flat[i].item<double>();
    flat[i] = v + h;
    const double up = f();
    flat[i] = v - h;
    const double down = f();
    flat[i] = v;
    gflat[i] = (up - down) / (2 * h);
  }
  return grad;
}

}  // namespace

TEST_CASE("gradients of the foldnorm ops pass a float64 finite-difference gradcheck",
          "[ops][backward]") {
  const auto op = GENERATE(Op::kRms, Op::kLayer, Op::kAddRms);
  const int64_t hidden = GENERATE(1, 5, 19);
  const bool withWeight = GENERATE(false, true);
  const bool withBias = GENERATE(false, true);
  torch::manual_seed(hidden * 8 + withWeight * 2 + withBias);
  const auto f64 = torch::kFloat64;
  auto x = (torch::randn({3, hidden}, f64) + 0.5).requires_grad_();
  auto r = torch::randn({3, hidden}, f64).requires_grad_();
  auto w = withWeight ? torch::randn({hidden}, f64).requires_grad_() : torch::Tensor();
  auto b = withBias ? torch::randn({hidden}, f64).requires_grad_() : torch::Tensor();
  const auto g = torch::randn({3, hidden}, f64);
  const auto gs = torch::randn({3, hidden}, f64);
  const double eps = 1e-3;  // gradients stay well-conditioned at hidden 1 (LN output is then ~0)

  std::vector<torch::Tensor> inputs{x};
  if (op == Op::kAddRms) inputs.push_back(r);
  if (w.defined()) inputs.push_back(w);
  if (b.defined()) inputs.push_back(b);
  const auto analytic = torch::autograd::grad({objective(op, x, r, w, b, g, gs, eps)}, inputs);

  torch::NoGradGuard noGrad;
  const auto f = [&] { return objective(op, x, r, w, b, g, gs, eps).item<double>(); };
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    INFO(opName(op) << " hidden " << hidden << " weight " << withWeight << " bias " << withBias
                    << " gradient of input #" << i);
    const auto numeric = numericalGradient(inputs[i].detach(), f, 1e-6);
    REQUIRE(analytic[i].defined());
    CHECK(torch::allclose(analytic[i], numeric, 1e-5, 1e-6));
  }
}

TEST_CASE("gradients match autograd of a float64 reference for every dtype and both ISAs",
          "[ops][backward]") {
  const auto dtype = GENERATE(torch::kFloat32, torch::kFloat64, torch::kBFloat16, torch::kFloat16);
  const auto op = GENERATE(Op::kRms, Op::kLayer, Op::kAddRms);
  const int64_t hidden = GENERATE(3, 768, 1001);
  torch::manual_seed(hidden + static_cast<int>(op));
  const auto f64 = torch::kFloat64;
  const auto x64 = torch::randn({130, hidden}, f64) * 2 + 0.5;  // 130 rows: several dw blocks
  const auto r64 = torch::randn({130, hidden}, f64);
  const auto w64 = torch::randn({hidden}, f64), b64 = torch::randn({hidden}, f64);
  const auto g64 = torch::randn({130, hidden}, f64), gs64 = torch::randn({130, hidden}, f64);
  const auto cast = [&](const torch::Tensor& t) { return t.to(dtype).detach().requires_grad_(); };

  // The reference sees the values rounded to dtype, so only the backward's own rounding differs.
  std::vector<torch::Tensor> ref{x64.to(dtype).to(f64).requires_grad_(),
                                 r64.to(dtype).to(f64).requires_grad_(),
                                 w64.to(dtype).to(f64).requires_grad_(),
                                 b64.to(dtype).to(f64).requires_grad_()};
  const auto gRef = g64.to(dtype).to(f64), gsRef = gs64.to(dtype).to(f64);
  // (The residual is unused except by add_rms_norm, hence allow_unused.)
  const auto expected = torch::autograd::grad(
      {referenceObjective(op, ref[0], ref[1], ref[2], ref[3], gRef, gsRef, 1e-5)}, ref, {},
      std::nullopt, false, true);

  // float32 sums over 768 terms and 130 rows; 16-bit results round once to their type.
  double tol = 1e-4;
  if (dtype == torch::kFloat64) tol = 1e-10;
  if (dtype == torch::kBFloat16) tol = 3e-2;
  if (dtype == torch::kFloat16) tol = 4e-3;
  for (auto isa : isasOnThisCpu()) {
    IsaScope scope(isa);
    std::vector<torch::Tensor> ours{cast(x64), cast(r64), cast(w64), cast(b64)};
    const auto obj = objective(op, ours[0], ours[1], ours[2], ours[3], g64.to(dtype),
                               gs64.to(dtype), 1e-5);
    std::vector<torch::Tensor> wrt{ours[0], ours[2], ours[3]};
    if (op == Op::kAddRms) wrt.push_back(ours[1]);
    const auto got = torch::autograd::grad({obj}, wrt);
    const std::vector<torch::Tensor> want{expected[0], expected[2], expected[3], expected[1]};
    for (std::size_t i = 0; i < got.size(); ++i) {
      INFO(opName(op) << " " << torch::toString(dtype) << " hidden " << hidden << " isa "
                      << foldnorm::ops::toString(isa) << " gradient #" << i);
      REQUIRE(got[i].scalar_type() == dtype);
      const auto scale = want[i].abs().max().item<double>() + 1e-30;
      const auto err = (got[i].to(f64) - want[i]).abs().max().item<double>() / scale;
      CHECK(err <= tol);
    }
  }
}

TEST_CASE("gradients with float32 parameters of a 16-bit input come back in float32",
          "[ops][backward]") {
  torch::manual_seed(2);
  const auto x = torch::randn({7, 40}).to(torch::kBFloat16).requires_grad_();
  const auto w = torch::randn({40}).requires_grad_();
  const auto b = torch::randn({40}).requires_grad_();
  const auto y = foldnorm::ops::rmsNorm(x, {40}, w, b, 1e-5);
  y.to(torch::kFloat32).pow(2).sum().backward();
  CHECK(x.grad().scalar_type() == torch::kBFloat16);
  CHECK(w.grad().scalar_type() == torch::kFloat32);
  CHECK(b.grad().scalar_type() == torch::kFloat32);
  CHECK(w.grad().abs().sum().item<double>() > 0);
}

TEST_CASE("backward asks only for the gradients that are needed, and out= refuses grad",
          "[ops][backward]") {
  using Catch::Matchers::Contains;
  torch::manual_seed(4);
  const auto x = torch::randn({4, 16});
  const auto w = torch::randn({16}).requires_grad_();
  const auto y = foldnorm::ops::layerNorm(x, {16}, w, std::nullopt, 1e-5);
  REQUIRE(y.requires_grad());
  y.sum().backward();
  CHECK(w.grad().defined());
  CHECK_FALSE(x.grad().defined());

  const auto [dx, dw, db] = foldnorm::ops::normBackward(false, torch::ones({4, 16}), x, {16}, w,
                                                        std::nullopt, 1e-5, {true, false, true});
  CHECK(dx.defined());
  CHECK_FALSE(dw.defined());  // masked out
  CHECK_FALSE(db.defined());  // no bias

  auto out = torch::empty({4, 16});
  CHECK_THROWS_WITH(foldnorm::ops::rmsNormOut(out, x, {16}, w, std::nullopt, 1e-5),
                    Contains("out= does not support automatic differentiation"));
  torch::NoGradGuard noGrad;
  foldnorm::ops::rmsNormOut(out, x, {16}, w, std::nullopt, 1e-5);
  CHECK(torch::equal(out, foldnorm::ops::rmsNorm(x, {16}, w, std::nullopt, 1e-5)));
}
