// ConvNeXt as torchvision's ConvNeXt (convnext_tiny): patchify stem with LayerNorm2d, stages of
// CNBlocks (depthwise 7x7 conv, channels-last LayerNorm via permute, inverted MLP, layer scale,
// stochastic depth), LayerNorm2d + 2x2 conv downsampling, LayerNorm2d before the classifier.
#include "layers.h"

namespace foldnorm::zoo {
namespace {

struct ConvNextConfig {
  std::vector<int64_t> dims, depths;
  int64_t image, classes;
  double eps = 1e-6;
};

// torchvision's LayerNorm2d: an nn.LayerNorm applied channels-last between two permutes.
struct LayerNorm2dImpl : torch::nn::LayerNormImpl {
  LayerNorm2dImpl(int64_t channels, double eps)
      : torch::nn::LayerNormImpl(torch::nn::LayerNormOptions({channels}).eps(eps)) {}
  torch::Tensor forward(const torch::Tensor& x) {
    return torch::nn::LayerNormImpl::forward(x.permute({0, 2, 3, 1})).permute({0, 3, 1, 2});
  }
};
TORCH_MODULE(LayerNorm2d);

struct CNBlockImpl : torch::nn::Module {
  CNBlockImpl(int64_t dim, double eps, double stochasticDepth) {
    layer_scale = register_parameter("layer_scale", torch::empty({dim, 1, 1}));
    block = register_module("block", Sequential());
    dwconv = block->add("0", torch::nn::Conv2d(
                                 torch::nn::Conv2dOptions(dim, dim, 7).padding(3).groups(dim)));
    toLast = block->add("1", Permute(std::vector<int64_t>{0, 2, 3, 1}));
    norm = block->add("2", layerNorm(dim, eps));
    fc1 = block->add("3", makeLinear(dim, 4 * dim));
    act = block->add("4", torch::nn::GELU());
    fc2 = block->add("5", makeLinear(4 * dim, dim));
    toFirst = block->add("6", Permute(std::vector<int64_t>{0, 3, 1, 2}));
    stochastic_depth = register_module("stochastic_depth", StochasticDepth(stochasticDepth));
  }
  torch::Tensor forward(const torch::Tensor& input) {
    auto y = toFirst(linear(fc2, act(linear(fc1, norm(toLast(dwconv(input)))))));
    auto result = stochastic_depth(layer_scale * y);
    return result + input;
  }
  torch::Tensor layer_scale;
  Sequential block{nullptr};
  torch::nn::Conv2d dwconv{nullptr};
  Permute toLast{nullptr}, toFirst{nullptr};
  torch::nn::LayerNorm norm{nullptr};
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
  torch::nn::GELU act{nullptr};
  StochasticDepth stochastic_depth{nullptr};
};
TORCH_MODULE(CNBlock);

struct ConvNeXtImpl : torch::nn::Module {
  explicit ConvNeXtImpl(const ConvNextConfig& c) {
    features = register_module("features", Sequential());
    auto stem = features->add("0", Sequential());
    stem->add("0", torch::nn::Conv2d(torch::nn::Conv2dOptions(3, c.dims[0], 4).stride(4)));
    stem->add("1", LayerNorm2d(c.dims[0], c.eps));
    // torchvision raises stochastic depth linearly over all blocks up to 0.1.
    int64_t total = 0, index = 0;
    for (auto d : c.depths) total += d;
    for (std::size_t s = 0; s < c.dims.size(); ++s) {
      auto stage = features->add(std::to_string(2 * s + 1), Sequential());
      for (int64_t b = 0; b < c.depths[s]; ++b, ++index) {
        double p = 0.1 * static_cast<double>(index) / static_cast<double>(std::max<int64_t>(total - 1, 1));
        stage->add(std::to_string(b), CNBlock(c.dims[s], c.eps, p));
      }
      if (s + 1 < c.dims.size()) {
        auto down = features->add(std::to_string(2 * s + 2), Sequential());
        down->add("0", LayerNorm2d(c.dims[s], c.eps));
        down->add("1", torch::nn::Conv2d(torch::nn::Conv2dOptions(c.dims[s], c.dims[s + 1], 2).stride(2)));
      }
    }
    avgpool = register_module("avgpool", torch::nn::AdaptiveAvgPool2d(1));
    classifier = register_module("classifier", Sequential());
    classifier->add("0", LayerNorm2d(c.dims.back(), c.eps));
    classifier->add("1", torch::nn::Flatten(torch::nn::FlattenOptions().start_dim(1)));
    head = classifier->add("2", makeLinear(c.dims.back(), c.classes));
  }

  torch::Tensor forward(torch::Tensor x) {
    for (const auto& part : features->items) {
      for (const auto& m : part->as<SequentialImpl>()->items) x = apply(*m, x);
    }
    x = avgpool(x);
    for (const auto& m : classifier->items) x = apply(*m, x);
    return x;
  }

  static torch::Tensor apply(torch::nn::Module& m, const torch::Tensor& x) {
    if (auto* block = m.as<CNBlockImpl>()) return block->forward(x);
    if (auto* norm = m.as<LayerNorm2dImpl>()) return norm->forward(x);
    if (auto* conv = m.as<torch::nn::Conv2dImpl>()) return conv->forward(x);
    if (auto* flatten = m.as<torch::nn::FlattenImpl>()) return flatten->forward(x);
    if (auto* fc = m.as<torch::nn::LinearImpl>()) return torch::linear(x, fc->weight, fc->bias);
    throw std::logic_error("ConvNeXt: no forward for " + m.name());
  }

  Sequential features{nullptr}, classifier{nullptr};
  torch::nn::AdaptiveAvgPool2d avgpool{nullptr};
  torch::nn::Linear head{nullptr};
};
TORCH_MODULE(ConvNeXt);

// The presets, beside the build that reads them.
ConvNextConfig configFor(const std::string& preset) {
  if (preset == "tiny") return {{16, 32, 64, 128}, {1, 1, 2, 1}, 32, 10};
  return {{96, 192, 384, 768}, {3, 3, 9, 3}, 224, 1000};  // t
}

}  // namespace

EagerModel buildConvnext(const std::string& preset, int64_t layers, at::Generator& gen) {
  refuseDepth("convnext_t", layers);
  auto c = configFor(preset);
  auto model = ConvNeXt(c);
  EagerModel m = imageModel(model, preset, c.image, gen);
  {
    // torchvision starts layer scale at 1e-6, which makes every block nearly the identity;
    // 0.1 keeps the blocks visible in the outputs the tests compare.
    torch::NoGradGuard noGrad;
    for (auto& p : model->named_parameters()) {
      if (p.key().size() >= 11 && p.key().compare(p.key().size() - 11, 11, "layer_scale") == 0) {
        p.value().normal_(0.1, 0.02, gen);
      }
    }
  }
  return m;
}

}  // namespace foldnorm::zoo
