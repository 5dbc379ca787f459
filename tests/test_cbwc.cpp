// CBWC, the paper's training-time form: a CBWC linear layer followed by RMSNorm is the same model
// as a linear layer followed by LayerNorm, in outputs and in gradients, so both train alike.
// Checked in float64 on the tiny GPT of src/train (the model the training analysis uses), with
// negative controls that must show a difference: plain RMSNorm, and dropout.
#include <torch/torch.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "foldnorm/common/error.h"
#include "foldnorm/train/cbwc.h"
#include "foldnorm/train/tiny_gpt.h"

namespace {

using foldnorm::train::CBWCLinear;
using foldnorm::train::NormVariant;
using foldnorm::train::RMSNorm;
using foldnorm::train::TinyGpt;
using foldnorm::train::TinyGptConfig;

// max |a - b| / max |b|: one number per tensor, insensitive to elements that are zero in both.
double relativeDifference(const torch::Tensor& a, const torch::Tensor& b) {
  const double scale = b.abs().max().item<double>();
  const double diff = (a - b).abs().max().item<double>();
  return scale == 0.0 ? diff : diff / scale;
}

torch::Tensor rmsReference(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b,
                           double eps) {
  return x / (x.pow(2).mean(-1, true) + eps).sqrt() * w + b;
}

TinyGptConfig smallConfig(NormVariant norm, double dropout = 0.0) {
  TinyGptConfig config;
  config.vocabSize = 13;
  config.context = 12;
  config.dModel = 16;
  config.heads = 2;
  config.layers = 2;
  config.dropout = dropout;
  config.norm = norm;
  return config;
}

TinyGpt makeDouble(const TinyGptConfig& config) {
  TinyGpt model(config);
  model->to(torch::kFloat64);
  return model;
}

// Every parameter drawn away from its neutral value (norm weights far from 1, non-zero biases,
// position rows and embeddings with a large mean) so that centering and the norms' affine parts
// all matter.
void randomizeEverything(TinyGpt& model, uint64_t seed) {
  auto generator = at::make_generator<at::CPUGeneratorImpl>(seed);
  torch::NoGradGuard noGrad;
  for (auto& item : model->named_parameters()) {
    auto& p = item.value();
    auto noise = at::normal(0.0, 1.0, p.sizes(), generator, p.options());
    const bool isNorm = item.key().find("norm") != std::string::npos;
    const bool isWeight = item.key().find("weight") != std::string::npos;
    if (isNorm && isWeight) {
      p.copy_(1.0 + 0.5 * noise);
    } else {
      p.copy_(0.3 * noise + 0.2);  // the offset gives every row a mean to remove
    }
  }
}

std::unique_ptr<torch::optim::Optimizer> makeOptimizer(const std::string& name, TinyGpt& model) {
  if (name == "SGD") {
    return std::make_unique<torch::optim::SGD>(model->parameters(),
                                               torch::optim::SGDOptions(0.05).momentum(0.9));
  }
  return std::make_unique<torch::optim::Adam>(model->parameters(), torch::optim::AdamOptions(1e-2));
}

}  // namespace

TEST_CASE("a CBWC linear layer writes mean-zero rows and trains its proxy", "[cbwc]") {
  torch::manual_seed(7);
  CBWCLinear layer(6, 5);
  layer->to(torch::kFloat64);
  {
    torch::NoGradGuard noGrad;
    layer->weight.add_(1.0);  // a proxy whose columns are far from centered
    layer->bias.add_(2.0);
  }
  auto x = torch::randn({4, 6}, torch::kFloat64);

  SECTION("the effective weight's columns and the effective bias sum to zero") {
    CHECK(layer->effectiveWeight().sum(0).abs().max().item<double>() < 1e-14);
    CHECK(std::abs(layer->effectiveBias().sum().item<double>()) < 1e-14);
    CHECK(layer->weight.sum(0).abs().min().item<double>() > 1.0);
  }
  SECTION("the output is the plain layer's output minus its row mean") {
    auto plain = torch::nn::functional::linear(x, layer->weight, layer->bias);
    auto y = layer(x);
    CHECK(y.mean(-1).abs().max().item<double>() < 1e-14);
    CHECK(relativeDifference(y, plain - plain.mean(-1, true)) < 1e-14);
  }
  SECTION("gradients reach the proxy through the centering") {
    auto target = torch::randn({4, 5}, torch::kFloat64);
    (layer(x) - target).pow(2).sum().backward();
    REQUIRE(layer->weight.grad().defined());
    // The centering projects the gradient: the proxy's gradient columns sum to zero, where a
    // detached centering would pass the raw gradient, whose columns do not.
    CHECK(layer->weight.grad().sum(0).abs().max().item<double>() < 1e-12);
    CHECK(layer->weight.grad().abs().max().item<double>() > 1e-3);
    CHECK(std::abs(layer->bias.grad().sum().item<double>()) < 1e-12);
  }
}

TEST_CASE("the RMSNorm module uses the project's kernel without autograd and ATen with it",
          "[cbwc]") {
  torch::manual_seed(3);
  RMSNorm norm(std::vector<int64_t>{8}, 1e-5);
  norm->to(torch::kFloat64);
  {
    torch::NoGradGuard noGrad;
    norm->weight.copy_(torch::rand({8}, torch::kFloat64) + 0.5);
    norm->bias.copy_(torch::randn({8}, torch::kFloat64));
  }
  auto x = torch::randn({3, 5, 8}, torch::kFloat64);
  auto reference = rmsReference(x, norm->weight.detach(), norm->bias.detach(), 1e-5);

  SECTION("training: differentiable, the RMSNorm function") {
    auto input = x.clone().requires_grad_(true);
    REQUIRE(norm->needsAutograd(input));
    auto y = norm(input);
    REQUIRE(y.grad_fn() != nullptr);
    CHECK(relativeDifference(y.detach(), reference) < 1e-13);
    y.pow(2).sum().backward();
    CHECK(norm->weight.grad().defined());
    CHECK(norm->bias.grad().defined());
    CHECK(input.grad().abs().max().item<double>() > 0.0);
  }
  SECTION("inference: foldnorm::rms_norm, the same function") {
    torch::NoGradGuard noGrad;
    REQUIRE_FALSE(norm->needsAutograd(x));
    CHECK(relativeDifference(norm(x), reference) < 1e-13);
  }
  SECTION("on mean-zero rows it is the LayerNorm with the same parameters") {
    torch::NoGradGuard noGrad;
    auto centered = x - x.mean(-1, true);
    auto ln = torch::layer_norm(centered, {8}, norm->weight, norm->bias, 1e-5);
    CHECK(relativeDifference(norm(centered), ln) < 1e-13);
    CHECK(relativeDifference(norm(x), torch::layer_norm(x, {8}, norm->weight, norm->bias, 1e-5)) >
          1e-3);
  }
}

TEST_CASE("the CBWC+RMSNorm GPT trains exactly like the LayerNorm GPT without dropout", "[cbwc]") {
  const std::string optimizerName = GENERATE(as<std::string>{}, "SGD", "Adam");
  CAPTURE(optimizerName);
  auto ln = makeDouble(smallConfig(NormVariant::kLayerNorm));
  auto cbwc = makeDouble(smallConfig(NormVariant::kCbwcRmsNorm));
  auto rms = makeDouble(smallConfig(NormVariant::kRmsNorm));
  randomizeEverything(ln, 11);
  foldnorm::train::copyParameters(*ln, *cbwc);
  foldnorm::train::copyParameters(*ln, *rms);
  auto lnOptimizer = makeOptimizer(optimizerName, ln);
  auto cbwcOptimizer = makeOptimizer(optimizerName, cbwc);
  auto rmsOptimizer = makeOptimizer(optimizerName, rms);
  auto batches = at::make_generator<at::CPUGeneratorImpl>(5);

  const int kSteps = 6;
  for (int step = 0; step < kSteps; ++step) {
    CAPTURE(step);
    auto ids = torch::randint(13, {3, 12}, batches, torch::kInt64);
    auto targets = torch::randint(13, {3, 12}, batches, torch::kInt64);
    lnOptimizer->zero_grad();
    cbwcOptimizer->zero_grad();
    rmsOptimizer->zero_grad();
    auto lnLogits = ln->forward(ids);
    auto cbwcLogits = cbwc->forward(ids);
    auto rmsLogits = rms->forward(ids);

    // The CBWC model's residual stream is mean-zero in every row; the LayerNorm model's is not.
    CHECK(cbwc->finalStream(ids).mean(-1).abs().max().item<double>() < 1e-13);
    CHECK(ln->finalStream(ids).mean(-1).abs().max().item<double>() > 1e-2);

    CHECK(relativeDifference(cbwcLogits, lnLogits) < 1e-12);
    CHECK(relativeDifference(rmsLogits, lnLogits) > 1e-3);  // negative control

    auto loss = [&](const torch::Tensor& logits) {
      return torch::nn::functional::cross_entropy(logits.reshape({-1, 13}), targets.reshape({-1}));
    };
    loss(lnLogits).backward();
    loss(cbwcLogits).backward();
    loss(rmsLogits).backward();

    auto lnParameters = ln->named_parameters();
    auto cbwcParameters = cbwc->named_parameters();
    auto rmsParameters = rms->named_parameters();
    double worstCbwc = 0.0, worstRms = 0.0;
    for (const auto& item : lnParameters) {
      const auto& name = item.key();
      const auto& lnGrad = item.value().grad();
      REQUIRE(lnGrad.defined());
      const auto& cbwcGrad = cbwcParameters[name].grad();
      INFO(name);
      REQUIRE(cbwcGrad.defined());
      // Parameters equal too: the proxies take the LayerNorm model's updates. Adam's bound is
      // looser: the key bias's gradient is zero in exact arithmetic (softmax ignores a shift),
      // so both models hold rounding noise (~1e-17) there, which Adam divides by its eps (1e-8).
      CHECK(relativeDifference(cbwcParameters[name], item.value()) < (optimizerName == "Adam" ? 1e-9 : 1e-11));
      const double gradDifference = relativeDifference(cbwcGrad, lnGrad);
      CHECK(gradDifference < 1e-11);
      worstCbwc = std::max(worstCbwc, gradDifference);
      worstRms = std::max(worstRms, relativeDifference(rmsParameters[name].grad(), lnGrad));
    }
    CHECK(worstCbwc < 1e-11);
    CHECK(worstRms > 1e-3);  // negative control

    lnOptimizer->step();
    cbwcOptimizer->step();
    rmsOptimizer->step();
  }
}

TEST_CASE("with dropout the CBWC+RMSNorm GPT is no longer the LayerNorm GPT", "[cbwc]") {
  // Dropout rescales the elements of a centered row independently, so the stream loses its zero
  // mean; with the same masks (same seed, same draw order) the two models then differ.
  const double p = 0.3;
  auto ln = makeDouble(smallConfig(NormVariant::kLayerNorm, p));
  auto cbwc = makeDouble(smallConfig(NormVariant::kCbwcRmsNorm, p));
  randomizeEverything(ln, 13);
  foldnorm::train::copyParameters(*ln, *cbwc);
  auto ids = torch::randint(13, {2, 12}, torch::kInt64);
  ln->train();
  cbwc->train();
  torch::manual_seed(21);
  auto lnLogits = ln->forward(ids);
  torch::manual_seed(21);
  auto cbwcLogits = cbwc->forward(ids);
  CHECK(relativeDifference(cbwcLogits, lnLogits) > 1e-4);

  SECTION("and in eval mode, dropout off, they agree again") {
    ln->eval();
    cbwc->eval();
    torch::NoGradGuard noGrad;
    CHECK(relativeDifference(cbwc->forward(ids), ln->forward(ids)) < 1e-12);
  }
}

TEST_CASE("copying parameters between models of different shapes is refused", "[cbwc]") {
  auto small = makeDouble(smallConfig(NormVariant::kLayerNorm));
  auto wider = smallConfig(NormVariant::kCbwcRmsNorm);
  wider.dModel = 32;
  auto other = makeDouble(wider);
  CHECK_THROWS_AS(foldnorm::train::copyParameters(*small, *other), foldnorm::Error);
  auto deeper = smallConfig(NormVariant::kCbwcRmsNorm);
  deeper.layers = 3;
  auto third = makeDouble(deeper);
  CHECK_THROWS_WITH(foldnorm::train::copyParameters(*small, *third),
                    Catch::Contains("parameters"));
}
