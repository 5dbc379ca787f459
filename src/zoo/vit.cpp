// ViT as torchvision's VisionTransformer: patchify conv, class token, learned positions, pre-LN
// encoder blocks (ln_1, self_attention, ln_2, mlp), final encoder.ln, linear head.
// Attention keeps nn.MultiheadAttention's parameter names (in_proj_weight, in_proj_bias,
// out_proj) but is written as linear/matmul/softmax: a Python trace of torchvision shows the
// fused aten::_native_multi_head_attention instead, which hides the projections from an analysis.
#include <cmath>

#include "layers.h"

namespace foldnorm::zoo {
namespace {

struct VitConfig {
  int64_t image, patch, layers, heads, hidden, mlp, classes;
  double eps = 1e-6;
  double dropout = 0.0;
};

struct MultiheadAttentionImpl : torch::nn::Module {
  MultiheadAttentionImpl(int64_t dim, int64_t heads) : heads(heads) {
    in_proj_weight = register_parameter("in_proj_weight", torch::empty({3 * dim, dim}));
    in_proj_bias = register_parameter("in_proj_bias", torch::zeros({3 * dim}));
    out_proj = register_module("out_proj", makeLinear(dim, dim));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    auto qkv = torch::linear(x, in_proj_weight, in_proj_bias).chunk(3, -1);
    auto q = splitHeads(qkv[0], heads), k = splitHeads(qkv[1], heads), v = splitHeads(qkv[2], heads);
    auto scale = 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
    auto probs = torch::softmax(torch::matmul(q * scale, k.transpose(-2, -1)), -1);
    return linear(out_proj, mergeHeads(torch::matmul(probs, v)));
  }
  int64_t heads;
  torch::Tensor in_proj_weight, in_proj_bias;
  torch::nn::Linear out_proj{nullptr};
};
TORCH_MODULE(MultiheadAttention);

// torchvision's MLPBlock: Linear, GELU, Dropout, Linear, Dropout as children "0".."4".
struct MLPBlockImpl : torch::nn::Module {
  MLPBlockImpl(int64_t dim, int64_t hidden, double dropout) {
    fc1 = register_module("0", makeLinear(dim, hidden));
    act = register_module("1", torch::nn::GELU());
    drop1 = register_module("2", torch::nn::Dropout(dropout));
    fc2 = register_module("3", makeLinear(hidden, dim));
    drop2 = register_module("4", torch::nn::Dropout(dropout));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    return drop2(linear(fc2, drop1(act(linear(fc1, x)))));
  }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
  torch::nn::GELU act{nullptr};
  torch::nn::Dropout drop1{nullptr}, drop2{nullptr};
};
TORCH_MODULE(MLPBlock);

struct EncoderBlockImpl : torch::nn::Module {
  explicit EncoderBlockImpl(const VitConfig& c) {
    ln_1 = register_module("ln_1", layerNorm(c.hidden, c.eps));
    self_attention = register_module("self_attention", MultiheadAttention(c.hidden, c.heads));
    dropout = register_module("dropout", torch::nn::Dropout(c.dropout));
    ln_2 = register_module("ln_2", layerNorm(c.hidden, c.eps));
    mlp = register_module("mlp", MLPBlock(c.hidden, c.mlp, c.dropout));
  }
  torch::Tensor forward(const torch::Tensor& input) {
    auto x = dropout(self_attention(ln_1(input))) + input;
    return x + mlp(ln_2(x));
  }
  torch::nn::LayerNorm ln_1{nullptr}, ln_2{nullptr};
  MultiheadAttention self_attention{nullptr};
  torch::nn::Dropout dropout{nullptr};
  MLPBlock mlp{nullptr};
};
TORCH_MODULE(EncoderBlock);

struct EncoderImpl : torch::nn::Module {
  EncoderImpl(const VitConfig& c, int64_t seqLength) {
    pos_embedding = register_parameter("pos_embedding", torch::empty({1, seqLength, c.hidden}));
    dropout = register_module("dropout", torch::nn::Dropout(c.dropout));
    layers = register_module("layers", Sequential());
    for (int64_t i = 0; i < c.layers; ++i) layers->add("encoder_layer_" + std::to_string(i), EncoderBlock(c));
    ln = register_module("ln", layerNorm(c.hidden, c.eps));
  }
  torch::Tensor forward(const torch::Tensor& input) {
    auto x = dropout(input + pos_embedding);
    for (const auto& block : layers->items) x = block->as<EncoderBlockImpl>()->forward(x);
    return ln(x);
  }
  torch::Tensor pos_embedding;
  torch::nn::Dropout dropout{nullptr};
  Sequential layers{nullptr};
  torch::nn::LayerNorm ln{nullptr};
};
TORCH_MODULE(Encoder);

struct VisionTransformerImpl : torch::nn::Module {
  explicit VisionTransformerImpl(const VitConfig& c) : hidden(c.hidden) {
    conv_proj = register_module(
        "conv_proj", torch::nn::Conv2d(torch::nn::Conv2dOptions(3, c.hidden, c.patch).stride(c.patch)));
    class_token = register_parameter("class_token", torch::zeros({1, 1, c.hidden}));
    int64_t patches = (c.image / c.patch) * (c.image / c.patch);
    encoder = register_module("encoder", Encoder(c, patches + 1));
    heads = register_module("heads", Sequential());
    head = heads->add("head", makeLinear(c.hidden, c.classes));
  }
  torch::Tensor forward(const torch::Tensor& images) {
    auto x = conv_proj(images);                                     // [B, d, h, w]
    x = reshapeTo(x, {dimOf(x, 0), hidden, -1}).permute({0, 2, 1});  // [B, h*w, d]
    auto cls = expandTo(class_token, {dimOf(x, 0), -1, -1});
    x = encoder(torch::cat({cls, x}, 1));
    return linear(head, x.select(1, 0));
  }
  int64_t hidden;
  torch::nn::Conv2d conv_proj{nullptr};
  torch::Tensor class_token;
  Encoder encoder{nullptr};
  Sequential heads{nullptr};
  torch::nn::Linear head{nullptr};
};
TORCH_MODULE(VisionTransformer);

// The presets, beside the build that reads them.
VitConfig configFor(const std::string& preset) {
  if (preset == "tiny") return {32, 8, 2, 4, 64, 128, 10};
  return {224, 16, 12, 12, 768, 3072, 1000};  // b_16
}

}  // namespace

EagerModel buildVit(const std::string& preset, int64_t layers, at::Generator& gen) {
  auto c = configFor(preset);
  setDepth(c.layers, layers);
  return imageModel(VisionTransformer(c), preset, c.image, gen);
}

}  // namespace foldnorm::zoo
