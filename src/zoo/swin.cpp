// Swin Transformer (V1) as torchvision's SwinTransformer (swin_t): patch embedding conv + permute
// + LayerNorm, stages of SwinTransformerBlocks (window attention with relative position bias,
// every second block shifted with torch.roll and masked), PatchMerging (strided slices, cat,
// LayerNorm, bias-free reduction) between stages, final LayerNorm, permute, pool, head.
// Batch views use -1 where torchvision writes B (same values, and any batch size traces alike).
#include <cmath>
#include <limits>

#include "layers.h"

namespace foldnorm::zoo {
namespace {

constexpr int64_t kToEnd = std::numeric_limits<int64_t>::max();

struct SwinConfig {
  int64_t patch, embed;
  std::vector<int64_t> depths, heads;
  int64_t window, image, classes;
  double eps = 1e-5;
  double stochasticDepth = 0.2;
};

torch::Tensor relativePositionIndex(int64_t w) {
  auto coords = torch::stack(torch::meshgrid({torch::arange(w), torch::arange(w)}, "ij"));  // [2,w,w]
  auto flat = coords.flatten(1);                                                          // [2,N]
  auto rel = (flat.unsqueeze(2) - flat.unsqueeze(1)).permute({1, 2, 0}).contiguous();     // [N,N,2]
  auto row = (rel.select(2, 0) + (w - 1)) * (2 * w - 1);
  auto col = rel.select(2, 1) + (w - 1);
  return (row + col).flatten();  // [N*N]
}

struct ShiftedWindowAttentionImpl : torch::nn::Module {
  ShiftedWindowAttentionImpl(int64_t dim, int64_t window, int64_t shift, int64_t heads)
      : window(window), shift(shift), heads(heads) {
    qkv = register_module("qkv", makeLinear(dim, 3 * dim));
    proj = register_module("proj", makeLinear(dim, dim));
    relative_position_bias_table = register_parameter(
        "relative_position_bias_table", torch::zeros({(2 * window - 1) * (2 * window - 1), heads}));
    relative_position_index = register_buffer("relative_position_index", relativePositionIndex(window));
  }

  torch::Tensor relativePositionBias() {
    int64_t n = window * window;
    auto bias = relative_position_bias_table.index({relative_position_index});
    return bias.view({n, n, -1}).permute({2, 0, 1}).contiguous().unsqueeze(0);
  }

  torch::Tensor forward(const torch::Tensor& input) {
    int64_t H = input.size(1), W = input.size(2), C = input.size(3);
    int64_t padR = (window - W % window) % window, padB = (window - H % window) % window;
    auto x = torch::nn::functional::pad(input, torch::nn::functional::PadFuncOptions({0, 0, 0, padR, 0, padB}));
    int64_t pH = x.size(1), pW = x.size(2);
    // A window as large as the map sees everything: torchvision drops the shift there.
    int64_t s0 = window >= pH ? 0 : shift, s1 = window >= pW ? 0 : shift;
    bool shifted = s0 + s1 > 0;
    if (shifted) x = torch::roll(x, {-s0, -s1}, {1, 2});
    int64_t windows = (pH / window) * (pW / window), n = window * window;
    x = x.view({-1, pH / window, window, pW / window, window, C})
            .permute({0, 1, 3, 2, 4, 5})
            .reshape({-1, n, C});
    auto qkvOut = linear(qkv, x).reshape({-1, n, 3, heads, C / heads}).permute({2, 0, 3, 1, 4});
    auto q = qkvOut.select(0, 0) * std::pow(static_cast<double>(C / heads), -0.5);
    auto k = qkvOut.select(0, 1), v = qkvOut.select(0, 2);
    auto attn = q.matmul(k.transpose(-2, -1)) + relativePositionBias();
    if (shifted) {
      auto mask = x.new_zeros({pH, pW});
      const int64_t hs[3][2] = {{0, -window}, {-window, -s0}, {-s0, kToEnd}};
      const int64_t ws[3][2] = {{0, -window}, {-window, -s1}, {-s1, kToEnd}};
      int64_t count = 0;
      for (const auto& h : hs) {
        for (const auto& w : ws) mask.slice(0, h[0], h[1]).slice(1, w[0], w[1]).fill_(count++);
      }
      mask = mask.view({pH / window, window, pW / window, window}).permute({0, 2, 1, 3}).reshape({windows, n});
      mask = mask.unsqueeze(1) - mask.unsqueeze(2);
      mask = mask.masked_fill(mask != 0, -100.0).masked_fill(mask == 0, 0.0);
      attn = attn.view({-1, windows, heads, n, n}) + mask.unsqueeze(1).unsqueeze(0);
      attn = attn.view({-1, heads, n, n});
    }
    attn = torch::dropout(torch::softmax(attn, -1), 0.0, false);
    x = attn.matmul(v).transpose(1, 2).reshape({-1, n, C});
    x = torch::dropout(linear(proj, x), 0.0, false);
    x = x.view({-1, pH / window, pW / window, window, window, C}).permute({0, 1, 3, 2, 4, 5}).reshape({-1, pH, pW, C});
    if (shifted) x = torch::roll(x, {s0, s1}, {1, 2});
    return x.slice(1, 0, H).slice(2, 0, W).contiguous();
  }

  int64_t window, shift, heads;
  torch::nn::Linear qkv{nullptr}, proj{nullptr};
  torch::Tensor relative_position_bias_table, relative_position_index;
};
TORCH_MODULE(ShiftedWindowAttention);

// torchvision.ops.MLP: Linear, GELU, Dropout, Linear, Dropout as children "0".."4".
struct MLPImpl : torch::nn::Module {
  MLPImpl(int64_t dim, int64_t hidden) {
    fc1 = register_module("0", makeLinear(dim, hidden));
    act = register_module("1", torch::nn::GELU());
    drop1 = register_module("2", torch::nn::Dropout(0.0));
    fc2 = register_module("3", makeLinear(hidden, dim));
    drop2 = register_module("4", torch::nn::Dropout(0.0));
  }
  torch::Tensor forward(const torch::Tensor& x) { return drop2(linear(fc2, drop1(act(linear(fc1, x))))); }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
  torch::nn::GELU act{nullptr};
  torch::nn::Dropout drop1{nullptr}, drop2{nullptr};
};
TORCH_MODULE(MLP);

struct SwinTransformerBlockImpl : torch::nn::Module {
  SwinTransformerBlockImpl(int64_t dim, int64_t heads, int64_t window, int64_t shift, double sd, double eps) {
    norm1 = register_module("norm1", layerNorm(dim, eps));
    attn = register_module("attn", ShiftedWindowAttention(dim, window, shift, heads));
    stochastic_depth = register_module("stochastic_depth", StochasticDepth(sd));
    norm2 = register_module("norm2", layerNorm(dim, eps));
    mlp = register_module("mlp", MLP(dim, 4 * dim));
  }
  torch::Tensor forward(torch::Tensor x) {
    x = x + stochastic_depth(attn(norm1(x)));
    return x + stochastic_depth(mlp(norm2(x)));
  }
  torch::nn::LayerNorm norm1{nullptr}, norm2{nullptr};
  ShiftedWindowAttention attn{nullptr};
  StochasticDepth stochastic_depth{nullptr};
  MLP mlp{nullptr};
};
TORCH_MODULE(SwinTransformerBlock);

struct PatchMergingImpl : torch::nn::Module {
  PatchMergingImpl(int64_t dim, double eps) {
    reduction = register_module("reduction", makeLinear(4 * dim, 2 * dim, false));
    norm = register_module("norm", layerNorm(4 * dim, eps));
  }
  torch::Tensor forward(const torch::Tensor& input) {
    int64_t H = input.size(1), W = input.size(2);
    auto x = torch::nn::functional::pad(input, torch::nn::functional::PadFuncOptions({0, 0, 0, W % 2, 0, H % 2}));
    auto x0 = x.slice(1, 0, kToEnd, 2).slice(2, 0, kToEnd, 2);
    auto x1 = x.slice(1, 1, kToEnd, 2).slice(2, 0, kToEnd, 2);
    auto x2 = x.slice(1, 0, kToEnd, 2).slice(2, 1, kToEnd, 2);
    auto x3 = x.slice(1, 1, kToEnd, 2).slice(2, 1, kToEnd, 2);
    return linear(reduction, norm(torch::cat({x0, x1, x2, x3}, -1)));
  }
  torch::nn::Linear reduction{nullptr};
  torch::nn::LayerNorm norm{nullptr};
};
TORCH_MODULE(PatchMerging);

struct SwinTransformerImpl : torch::nn::Module {
  explicit SwinTransformerImpl(const SwinConfig& c) {
    features = register_module("features", Sequential());
    auto stem = features->add("0", Sequential());
    stemConv = stem->add("0", torch::nn::Conv2d(torch::nn::Conv2dOptions(3, c.embed, c.patch).stride(c.patch)));
    stemPermute = stem->add("1", Permute(std::vector<int64_t>{0, 2, 3, 1}));
    stemNorm = stem->add("2", layerNorm(c.embed, c.eps));
    int64_t total = 0, index = 0, dim = c.embed;
    for (auto d : c.depths) total += d;
    for (std::size_t s = 0; s < c.depths.size(); ++s) {
      auto stage = features->add(std::to_string(features->items.size()), Sequential());
      for (int64_t b = 0; b < c.depths[s]; ++b, ++index) {
        double sd = c.stochasticDepth * static_cast<double>(index) / static_cast<double>(total - 1);
        int64_t shift = b % 2 == 0 ? 0 : c.window / 2;
        stage->add(std::to_string(b), SwinTransformerBlock(dim, c.heads[s], c.window, shift, sd, c.eps));
      }
      if (s + 1 < c.depths.size()) {
        features->add(std::to_string(features->items.size()), PatchMerging(dim, c.eps));
        dim *= 2;
      }
    }
    norm = register_module("norm", layerNorm(dim, c.eps));
    permute = register_module("permute", Permute(std::vector<int64_t>{0, 3, 1, 2}));
    avgpool = register_module("avgpool", torch::nn::AdaptiveAvgPool2d(1));
    flatten = register_module("flatten", torch::nn::Flatten(torch::nn::FlattenOptions().start_dim(1)));
    head = register_module("head", makeLinear(dim, c.classes));
  }
  torch::Tensor forward(const torch::Tensor& images) {
    auto x = stemNorm(stemPermute(stemConv(images)));
    for (std::size_t i = 1; i < features->items.size(); ++i) {
      auto& part = *features->items[i];
      if (auto* merge = part.as<PatchMergingImpl>()) {
        x = merge->forward(x);
        continue;
      }
      for (const auto& block : part.as<SequentialImpl>()->items) {
        x = block->as<SwinTransformerBlockImpl>()->forward(x);
      }
    }
    return linear(head, flatten(avgpool(permute(norm(x)))));
  }
  Sequential features{nullptr};
  torch::nn::Conv2d stemConv{nullptr};
  Permute stemPermute{nullptr}, permute{nullptr};
  torch::nn::LayerNorm stemNorm{nullptr}, norm{nullptr};
  torch::nn::AdaptiveAvgPool2d avgpool{nullptr};
  torch::nn::Flatten flatten{nullptr};
  torch::nn::Linear head{nullptr};
};
TORCH_MODULE(SwinTransformer);

// The presets, beside the build that reads them.
SwinConfig configFor(const std::string& preset) {
  if (preset == "tiny") return {4, 24, {2, 2, 2, 2}, {1, 2, 4, 8}, 4, 64, 10};
  return {4, 96, {2, 2, 6, 2}, {3, 6, 12, 24}, 7, 224, 1000};  // t
}

}  // namespace

EagerModel buildSwin(const std::string& preset, int64_t layers, at::Generator& gen) {
  refuseDepth("swin_t", layers);
  auto c = configFor(preset);
  return imageModel(SwinTransformer(c), preset, c.image, gen);
}

}  // namespace foldnorm::zoo
