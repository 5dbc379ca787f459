// The foldnorm operator library on the CPU: results against a float64 reference, argument errors,
// the LayerNorm == RMSNorm identity for mean-zero rows, and the op inside TorchScript and Python.
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/csrc/jit/api/function_impl.h>
#include <torch/csrc/jit/ir/irparser.h>
#include <torch/torch.h>

#include <array>
#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "foldnorm/ops/rms_norm.h"

namespace {

using foldnorm::ops::CpuKernelIsa;

struct Tolerance {
  double abs;
  double rel;
};

// Output rounding dominates: float64 and float32 accumulate exactly enough that only the last
// rounding shows; 16-bit outputs are within one unit in the last place of their type.
Tolerance toleranceFor(torch::Dtype dtype) {
  switch (dtype) {
    case torch::kFloat64: return {1e-12, 1e-12};
    case torch::kFloat32: return {2e-6, 2e-6};
    case torch::kBFloat16: return {1e-3, 1.0 / 128};
    default: return {1e-4, 1.0 / 1024};
  }
}

// Largest violation of |y - ref| <= abs + rel * |ref| (<= 0 means within tolerance).
double worstExcess(const torch::Tensor& y, const torch::Tensor& ref, Tolerance tol) {
  auto err = (y.to(torch::kFloat64) - ref).abs();
  auto bound = ref.abs() * tol.rel + tol.abs;
  return (err - bound).max().item<double>();
}

torch::Tensor referenceNorm(bool layer, const torch::Tensor& x, int64_t normDims,
                            const std::optional<torch::Tensor>& w,
                            const std::optional<torch::Tensor>& b, double eps) {
  auto xd = x.to(torch::kFloat64);
  std::vector<int64_t> dims;
  for (int64_t d = x.dim() - normDims; d < x.dim(); ++d) dims.push_back(d);
  if (layer) xd = xd - xd.mean(dims, true);
  auto y = xd / torch::sqrt(xd.pow(2).mean(dims, true) + eps);
  if (w) y = y * w->to(torch::kFloat64);
  if (b) y = y + b->to(torch::kFloat64);
  return y;
}

// The instruction sets to test on this CPU: the portable one always, AVX2 when present.
std::vector<CpuKernelIsa> isasOnThisCpu() {
  std::vector<CpuKernelIsa> isas{CpuKernelIsa::kPortable};
  for (auto isa : {CpuKernelIsa::kAvx2, CpuKernelIsa::kAvx512}) {
    try {
      foldnorm::ops::setCpuKernelIsa(isa);
      isas.push_back(isa);
    } catch (const c10::Error&) {
    }
  }
  foldnorm::ops::setCpuKernelIsa(std::nullopt);
  return isas;
}

struct IsaScope {
  explicit IsaScope(CpuKernelIsa isa) { foldnorm::ops::setCpuKernelIsa(isa); }
  ~IsaScope() { foldnorm::ops::setCpuKernelIsa(std::nullopt); }
};

const char* dtypeName(torch::Dtype d) {
  switch (d) {
    case torch::kFloat64: return "float64";
    case torch::kFloat32: return "float32";
    case torch::kBFloat16: return "bfloat16";
    default: return "float16";
  }
}

}  // namespace

TEST_CASE("rms_norm and layer_norm match a float64 reference on the CPU", "[ops]") {
  const auto dtype = GENERATE(torch::kFloat32, torch::kFloat64, torch::kBFloat16, torch::kFloat16);
  // (leading shape, normalized shape): odd hidden sizes hit every vector-tail length.
  using Shapes = std::pair<std::vector<int64_t>, std::vector<int64_t>>;
  const auto shapes = GENERATE(Shapes{{4}, {1}}, Shapes{{5}, {3}}, Shapes{{2, 3}, {17}},
                               Shapes{{3, 5}, {768}}, Shapes{{7}, {1000}}, Shapes{{2}, {64}},
                               Shapes{{2, 2}, {4, 6}}, Shapes{{}, {3, 5, 7}},
                               Shapes{{3}, {4096}});
  const bool withWeight = GENERATE(false, true);
  const bool withBias = GENERATE(false, true);
  const bool layer = GENERATE(false, true);

  auto sizes = shapes.first;
  sizes.insert(sizes.end(), shapes.second.begin(), shapes.second.end());
  torch::manual_seed(7);
  const auto x = (torch::randn(sizes, torch::kFloat64) * 3 + 0.5).to(dtype);
  std::optional<torch::Tensor> w, b;
  if (withWeight) w = torch::randn(shapes.second, torch::kFloat64).to(dtype);
  if (withBias) b = torch::randn(shapes.second, torch::kFloat64).to(dtype);
  const double eps = 1e-5;
  const auto ref = referenceNorm(layer, x, static_cast<int64_t>(shapes.second.size()), w, b, eps);

  for (auto isa : isasOnThisCpu()) {
    IsaScope scope(isa);
    INFO(dtypeName(dtype) << (layer ? " layer_norm" : " rms_norm") << " x" << x.sizes()
                          << " normalized " << c10::IntArrayRef(shapes.second) << " weight "
                          << withWeight << " bias " << withBias << " isa "
                          << foldnorm::ops::toString(isa));
    const auto y = layer ? foldnorm::ops::layerNorm(x, shapes.second, w, b, eps)
                         : foldnorm::ops::rmsNorm(x, shapes.second, w, b, eps);
    CHECK(y.scalar_type() == dtype);
    CHECK(y.sizes() == x.sizes());
    CHECK(worstExcess(y, ref, toleranceFor(dtype)) <= 0);
  }
}

TEST_CASE("16-bit inputs accept float32 weight and bias", "[ops]") {
  const auto dtype = GENERATE(torch::kBFloat16, torch::kFloat16);
  const bool layer = GENERATE(false, true);
  torch::manual_seed(3);
  const auto x = torch::randn({9, 50}).to(dtype);
  const auto w = torch::randn({50});
  const auto b = torch::randn({50});
  const auto y = layer ? foldnorm::ops::layerNorm(x, {50}, w, b, 1e-6)
                       : foldnorm::ops::rmsNorm(x, {50}, w, b, 1e-6);
  CHECK(y.scalar_type() == dtype);
  CHECK(worstExcess(y, referenceNorm(layer, x, 1, w, b, 1e-6), toleranceFor(dtype)) <= 0);
}

TEST_CASE("eps sits inside the square root, as in aten::layer_norm", "[ops]") {
  // A row of zeros but one entry: mean(x^2) is tiny, so eps decides the scale.
  auto x = torch::zeros({1, 4}, torch::kFloat64);
  x[0][0] = 1e-3;
  const double eps = 1e-2;
  const auto y = foldnorm::ops::rmsNorm(x, {4}, std::nullopt, std::nullopt, eps);
  const double expected = 1e-3 / std::sqrt(1e-6 / 4 + eps);
  CHECK_THAT(y[0][0].item<double>(), Catch::Matchers::WithinRel(expected, 1e-14));
  const auto ln = foldnorm::ops::layerNorm(x, {4}, std::nullopt, std::nullopt, eps);
  const auto atenLn = torch::layer_norm(x, {4}, {}, {}, eps);
  CHECK(torch::allclose(ln, atenLn, 1e-14, 1e-14));
}

TEST_CASE("layer_norm equals rms_norm on rows made mean-zero", "[ops]") {
  // The identity the fold rests on: LN(x) = RMS(x) when mean(x) = 0 per row, same eps, w, b.
  const auto dtype = GENERATE(torch::kFloat64, torch::kFloat32);
  const int64_t hidden = GENERATE(3, 768, 1000);
  torch::manual_seed(11);
  auto x = torch::randn({6, hidden}, torch::kFloat64) * 2 + 1;
  x = (x - x.mean(-1, true)).to(dtype);
  const auto w = torch::randn({hidden}, torch::kFloat64).to(dtype);
  const auto b = torch::randn({hidden}, torch::kFloat64).to(dtype);
  const auto rms = foldnorm::ops::rmsNorm(x, {hidden}, w, b, 1e-5);
  const auto oursLn = foldnorm::ops::layerNorm(x, {hidden}, w, b, 1e-5);
  const auto atenLn = torch::layer_norm(x, {hidden}, w, b, 1e-5);
  // float32 rows are mean-zero only up to rounding (|mean| ~ 1e-7), hence the float32 tolerance.
  const double tol = dtype == torch::kFloat64 ? 1e-12 : 1e-5;
  CHECK(torch::allclose(rms, oursLn, tol, tol));
  CHECK(torch::allclose(rms, atenLn, tol, tol));
  SECTION("and not on rows with a mean") {
    const auto shifted = x + 0.5;
    CHECK_FALSE(torch::allclose(foldnorm::ops::rmsNorm(shifted, {hidden}, w, b, 1e-5),
                                torch::layer_norm(shifted, {hidden}, w, b, 1e-5), 1e-3, 1e-3));
  }
}

TEST_CASE("rms_norm handles non-contiguous inputs and the out= variant", "[ops]") {
  torch::manual_seed(5);
  const auto w = torch::randn({33});
  const auto b = torch::randn({33});
  SECTION("a transposed input gives the result of its contiguous copy") {
    const auto base = torch::randn({33, 12});
    const auto xt = base.t();  // [12, 33], not contiguous
    REQUIRE_FALSE(xt.is_contiguous());
    const auto y = foldnorm::ops::rmsNorm(xt, {33}, w, b, 1e-5);
    CHECK(y.is_contiguous());
    CHECK(torch::equal(y, foldnorm::ops::rmsNorm(xt.contiguous(), {33}, w, b, 1e-5)));
  }
  SECTION("out= writes into the given storage and resizes a wrongly shaped out") {
    const auto x = torch::randn({8, 33});
    auto out = torch::empty({8, 33});
    const auto* data = out.data_ptr();
    auto& returned = foldnorm::ops::rmsNormOut(out, x, {33}, w, b, 1e-5);
    CHECK(returned.data_ptr() == data);
    CHECK(torch::equal(out, foldnorm::ops::rmsNorm(x, {33}, w, b, 1e-5)));
    auto small = torch::empty({0});
    foldnorm::ops::layerNormOut(small, x, {33}, w, b, 1e-5);
    CHECK(small.sizes() == x.sizes());
    CHECK(torch::equal(small, foldnorm::ops::layerNorm(x, {33}, w, b, 1e-5)));
  }
  SECTION("in place: out may be the input itself") {
    auto x = torch::randn({8, 33});
    const auto expected = foldnorm::ops::rmsNorm(x, {33}, w, b, 1e-5);
    foldnorm::ops::rmsNormOut(x, x, {33}, w, b, 1e-5);
    CHECK(torch::equal(x, expected));
  }
  SECTION("no rows gives an empty result") {
    const auto y = foldnorm::ops::rmsNorm(torch::empty({0, 33}), {33}, w, b, 1e-5);
    CHECK(y.sizes() == torch::IntArrayRef({0, 33}));
  }
}

TEST_CASE("outputs large enough for streaming stores equal the cached-store results", "[ops]") {
  // 16 MiB and more of output is written with non-temporal stores on AVX2; a slice of the same
  // rows, small enough for plain stores, must give the same bits.
  const auto dtype = GENERATE(torch::kFloat32, torch::kBFloat16);
  const bool layer = GENERATE(false, true);
  const int64_t hidden = 1024;
  const int64_t rows = (int64_t{17} << 20) / (hidden * torch::elementSize(dtype));
  torch::manual_seed(9);
  const auto x = torch::randn({rows, hidden}).to(dtype);
  const auto w = torch::randn({hidden}).to(dtype);
  const auto b = torch::randn({hidden}).to(dtype);
  for (auto isa : isasOnThisCpu()) {
    IsaScope scope(isa);
    INFO(dtypeName(dtype) << (layer ? " layer_norm" : " rms_norm") << " isa "
                          << foldnorm::ops::toString(isa));
    const auto big = layer ? foldnorm::ops::layerNorm(x, {hidden}, w, b, 1e-5)
                           : foldnorm::ops::rmsNorm(x, {hidden}, w, b, 1e-5);
    const auto head = x.narrow(0, rows - 64, 64);
    const auto small = layer ? foldnorm::ops::layerNorm(head, {hidden}, w, b, 1e-5)
                             : foldnorm::ops::rmsNorm(head, {hidden}, w, b, 1e-5);
    CHECK(torch::equal(big.narrow(0, rows - 64, 64), small));
    CHECK(worstExcess(big, referenceNorm(layer, x, 1, w, b, 1e-5), toleranceFor(dtype)) <= 0);
  }
}

TEST_CASE("rms_norm rejects arguments that do not fit, naming them", "[ops]") {
  const auto x = torch::randn({4, 8});
  using Catch::Matchers::Contains;
  SECTION("weight of the wrong shape") {
    CHECK_THROWS_WITH(foldnorm::ops::rmsNorm(x, {8}, torch::ones({7}), std::nullopt, 1e-5),
                      Contains("weight") && Contains("normalized_shape"));
  }
  SECTION("bias of the wrong shape") {
    CHECK_THROWS_WITH(foldnorm::ops::layerNorm(x, {8}, std::nullopt, torch::ones({2, 4}), 1e-5),
                      Contains("bias"));
  }
  SECTION("input whose trailing dims differ from normalized_shape") {
    CHECK_THROWS_WITH(foldnorm::ops::rmsNorm(x, {4}, std::nullopt, std::nullopt, 1e-5),
                      Contains("expected input with shape [*, 4]"));
    CHECK_THROWS_WITH(foldnorm::ops::rmsNorm(x, {2, 4, 8}, std::nullopt, std::nullopt, 1e-5),
                      Contains("normalized_shape"));
  }
  SECTION("empty normalized_shape") {
    CHECK_THROWS_WITH(foldnorm::ops::rmsNorm(x, {}, std::nullopt, std::nullopt, 1e-5),
                      Contains("at least 1-dimensional"));
  }
  SECTION("integer input, or weight of another dtype") {
    CHECK_THROWS_WITH(
        foldnorm::ops::rmsNorm(torch::ones({2, 8}, torch::kInt64), {8}, {}, {}, 1e-5),
        Contains("dtype"));
    CHECK_THROWS_WITH(foldnorm::ops::rmsNorm(x, {8}, torch::ones({8}, torch::kFloat64), {}, 1e-5),
                      Contains("weight has dtype"));
  }
  SECTION("out of another dtype") {
    auto out = torch::empty({4, 8}, torch::kFloat64);
    CHECK_THROWS_WITH(foldnorm::ops::rmsNormOut(out, x, {8}, {}, {}, 1e-5),
                      Contains("out has dtype"));
  }
}

TEST_CASE("the Meta kernels give every op's outputs without data, and check as the CPU does", "[ops]") {
  // torch.export.load and fake tensors run the ops on the Meta device (norm_op_table.h's Meta
  // column): shapes and dtypes only, the same argument checks as the CPU and CUDA kernels.
  namespace ops = foldnorm::ops;
  const auto meta = torch::TensorOptions().device(torch::kMeta);
  const auto x = torch::empty({2, 3, 8}, meta.dtype(torch::kBFloat16));
  const auto w = torch::empty({8}, meta.dtype(torch::kFloat32));
  const auto b = torch::empty({8}, meta.dtype(torch::kFloat32));
  for (auto y : {ops::rmsNorm(x, {8}, w, b, 1e-5), ops::layerNorm(x, {8}, w, b, 1e-5)}) {
    CHECK(y.is_meta());
    CHECK(y.sizes() == x.sizes());
    CHECK(y.scalar_type() == torch::kBFloat16);
  }
  auto [normed, sum] = ops::addRmsNorm(x, torch::empty_like(x), {8}, w, b, 1e-5);
  CHECK((normed.is_meta() && sum.is_meta()));
  CHECK(normed.sizes() == x.sizes());
  CHECK(sum.sizes() == x.sizes());
  auto out = torch::empty({0}, meta.dtype(torch::kBFloat16));
  ops::rmsNormOut(out, x, {8}, w, b, 1e-5);
  CHECK(out.sizes() == x.sizes());  // resized as the CPU kernel resizes
  auto [dx, dw, db] = ops::normBackward(false, torch::empty_like(x), x, {8}, w, b, 1e-5,
                                        {true, true, false});
  CHECK(dx.sizes() == x.sizes());
  CHECK((dw.sizes() == w.sizes() && dw.scalar_type() == torch::kFloat32));
  CHECK_FALSE(db.defined());
  CHECK_THROWS_WITH(ops::rmsNorm(x, {4}, w, b, 1e-5), Catch::Contains("normalized_shape"));
  CHECK_THROWS_WITH(ops::addRmsNorm(x, torch::empty({3, 8}, meta.dtype(torch::kBFloat16)), {8}, w, b, 1e-5),
                    Catch::Contains("residual"));
}

TEST_CASE("rms_norm runs in inference mode and without grad", "[ops]") {
  const auto w = torch::randn({16}).requires_grad_();
  const auto x = torch::randn({3, 16});
  const auto expected = referenceNorm(false, x, 1, w.detach(), std::nullopt, 1e-5);
  {
    c10::InferenceMode guard;
    const auto y = foldnorm::ops::rmsNorm(x, {16}, w, std::nullopt, 1e-5);
    CHECK(y.is_inference());
    CHECK(worstExcess(y, expected, toleranceFor(torch::kFloat32)) <= 0);
  }
  {
    torch::NoGradGuard guard;
    const auto y = foldnorm::ops::rmsNorm(x, {16}, w, std::nullopt, 1e-5);
    CHECK_FALSE(y.requires_grad());
    CHECK(worstExcess(y, expected, toleranceFor(torch::kFloat32)) <= 0);
  }
}

TEST_CASE("foldnorm::rms_norm runs inside a TorchScript graph parsed from IR", "[ops]") {
  // The form the fold step writes: every argument explicit, weight/bias possibly None.
  const std::string ir = R"IR(
graph(%x : Tensor, %w : Tensor):
  %d : int = prim::Constant[value=24]()
  %shape : int[] = prim::ListConstruct(%d)
  %none : NoneType = prim::Constant()
  %eps : float = prim::Constant[value=1.0000000000000001e-05]()
  %y : Tensor = foldnorm::rms_norm(%x, %shape, %w, %none, %eps)
  %z : Tensor = foldnorm::layer_norm(%y, %shape, %none, %w, %eps)
  %out : (Tensor, Tensor) = prim::TupleConstruct(%y, %z)
  return (%out)
)IR";
  auto graph = std::make_shared<torch::jit::Graph>();
  torch::jit::parseIR(ir, graph.get());
  torch::jit::GraphFunction fn("norms", graph, nullptr);
  const auto x = torch::randn({2, 5, 24});
  const auto w = torch::randn({24});
  const auto out = fn({x, w}).toTuple();
  const auto y = out->elements()[0].toTensor();
  const auto z = out->elements()[1].toTensor();
  CHECK(torch::equal(y, foldnorm::ops::rmsNorm(x, {24}, w, std::nullopt, 1e-5)));
  CHECK(torch::equal(z, foldnorm::ops::layerNorm(y, {24}, std::nullopt, w, 1e-5)));
}

TEST_CASE("Python loads the op library and gets the reference result", "[ops][python]") {
  const std::string script = std::string(FOLDNORM_SOURCE_DIR) + "/tests/python/test_ops_load.py";
  const std::string command = std::string(FOLDNORM_PYTHON) + " " + script + " " +
                              FOLDNORM_OPS_LIBRARY + " 2>&1";
  std::string output;
  FILE* pipe = popen(command.c_str(), "r");
  REQUIRE(pipe != nullptr);
  std::array<char, 512> buffer{};
  while (fgets(buffer.data(), buffer.size(), pipe)) output += buffer.data();
  const int status = pclose(pipe);
  INFO("command: " << command << "\noutput:\n" << output);
  CHECK(status == 0);
  CHECK_THAT(output, Catch::Matchers::Contains("foldnorm ops ok"));
}
