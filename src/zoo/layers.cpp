#include "layers.h"

#include "foldnorm/common/error.h"

#include <torch/csrc/jit/frontend/tracer.h>

#include <cmath>
#include <limits>

namespace foldnorm::zoo {
namespace tracer = torch::jit::tracer;

namespace {

std::vector<int64_t> values(const std::vector<Dim>& sizes) {
  std::vector<int64_t> v;
  v.reserve(sizes.size());
  for (const auto& d : sizes) v.push_back(d.value);
  return v;
}

// Stashes the symbolic elements of a size list; the next traced op reading argument
// `argName` picks them up (constants stay constants).
void stashList(const char* argName, const std::vector<Dim>& sizes) {
  if (!tracer::isTracing()) return;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    if (!sizes[i].source.defined()) continue;
    tracer::ArgumentStash::stashIntArrayRefElem(argName, sizes.size(), i,
                                                tracer::getSizeOf(sizes[i].source, sizes[i].dim));
  }
}

void stashScalar(const char* argName, const Dim& d) {
  if (!tracer::isTracing() || !d.source.defined()) return;
  tracer::ArgumentStash::stashValue(argName, 0, tracer::getSizeOf(d.source, d.dim),
                                    c10::IntType::get());
}

}  // namespace

Dim dimOf(const torch::Tensor& t, int64_t dim) {
  Dim d(t.size(dim));
  d.source = t;
  d.dim = dim;
  return d;
}

torch::Tensor viewTo(const torch::Tensor& x, const std::vector<Dim>& sizes) {
  stashList("size", sizes);
  return x.view(values(sizes));
}

torch::Tensor reshapeTo(const torch::Tensor& x, const std::vector<Dim>& sizes) {
  stashList("shape", sizes);
  return x.reshape(values(sizes));
}

torch::Tensor expandTo(const torch::Tensor& x, const std::vector<Dim>& sizes) {
  stashList("size", sizes);
  return x.expand(values(sizes));
}

torch::Tensor sliceTo(const torch::Tensor& x, int64_t dim, Dim start, Dim end) {
  stashScalar("start", start);
  stashScalar("end", end);
  return x.slice(dim, start.value, end.value);
}

torch::Tensor arangeTo(Dim start, Dim end, const torch::TensorOptions& options) {
  stashScalar("start", start);
  stashScalar("end", end);
  return torch::arange(start.value, end.value, options);
}

torch::Tensor linear(const torch::nn::Linear& layer, const torch::Tensor& x) {
  return torch::linear(x, layer->weight, layer->bias);
}

torch::Tensor geluNew(const torch::Tensor& x) {
  return 0.5 * x * (1.0 + torch::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * torch::pow(x, 3.0))));
}

torch::nn::LayerNorm layerNorm(int64_t dim, double eps) {
  return torch::nn::LayerNorm(torch::nn::LayerNormOptions({dim}).eps(eps));
}

torch::nn::Linear makeLinear(int64_t in, int64_t out, bool bias) {
  return torch::nn::Linear(torch::nn::LinearOptions(in, out).bias(bias));
}

torch::Tensor splitHeads(const torch::Tensor& x, int64_t heads) {
  return viewTo(x, {dimOf(x, 0), dimOf(x, 1), heads, x.size(2) / heads}).transpose(1, 2);
}

torch::Tensor mergeHeads(const torch::Tensor& x) {
  auto y = x.transpose(1, 2).contiguous();
  return reshapeTo(y, {dimOf(y, 0), dimOf(y, 1), y.size(2) * y.size(3)});
}

torch::Tensor futureMask(const torch::Tensor& x, int64_t dim) {
  auto i = arangeTo(0, dimOf(x, dim), torch::TensorOptions().dtype(torch::kLong));
  return i.unsqueeze(0) > i.unsqueeze(1);
}

torch::Tensor causalAttention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                              const torch::Tensor& hidden, std::optional<double> scaling,
                              bool softmaxInFloat32) {
  auto weights = torch::matmul(q, k.transpose(2, 3));
  if (scaling) weights = weights * *scaling;
  weights = weights.masked_fill(futureMask(hidden, 1), std::numeric_limits<float>::lowest());
  auto probs = softmaxInFloat32 ? torch::softmax(weights, -1, torch::kFloat32).to(q.scalar_type())
                                : torch::softmax(weights, -1);
  return mergeHeads(torch::matmul(probs, v));
}

std::vector<int64_t> tokenShape(const std::string& preset) {
  return preset == "tiny" ? std::vector<int64_t>{2, 16} : std::vector<int64_t>{1, 128};
}

RotaryEmbeddingImpl::RotaryEmbeddingImpl(int64_t dim, double theta) {
  auto exponents = torch::arange(0, dim, 2, torch::kLong).to(torch::kFloat) / static_cast<double>(dim);
  inv_freq = register_buffer("inv_freq", 1.0 / torch::pow(theta, exponents));
}

std::pair<torch::Tensor, torch::Tensor> RotaryEmbeddingImpl::forward(const torch::Tensor& x,
                                                                     const torch::Tensor& positions) {
  auto invFreq = inv_freq.unsqueeze(0).unsqueeze(-1).to(torch::kFloat);  // [1, dim/2, 1]
  auto pos = positions.unsqueeze(1).to(torch::kFloat);                    // [B, 1, T]
  auto freqs = torch::matmul(invFreq, pos).transpose(1, 2);               // [B, T, dim/2]
  auto emb = torch::cat({freqs, freqs}, -1);
  return {emb.cos().to(x.scalar_type()), emb.sin().to(x.scalar_type())};
}

torch::Tensor applyRotary(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin) {
  auto half = x.size(-1) / 2;
  auto x1 = x.slice(-1, 0, half);
  auto x2 = x.slice(-1, half, x.size(-1));
  auto rotated = torch::cat({-x2, x1}, -1);
  return x * cos.unsqueeze(1) + rotated * sin.unsqueeze(1);
}

namespace {
// nn::Module keeps its parameter dictionary protected and register_parameter refuses a name
// twice; tying needs to replace the entry in place.
struct ParameterAccess : torch::nn::Module {
  static torch::OrderedDict<std::string, torch::Tensor>& of(torch::nn::Module& m) {
    return m.*(&ParameterAccess::parameters_);
  }
};
}  // namespace

torch::Tensor tieParameter(torch::nn::Module& module, const std::string& name,
                           const torch::Tensor& shared) {
  auto& params = ParameterAccess::of(module);
  if (params.contains(name)) {
    params[name] = shared;
  } else {
    module.register_parameter(name, shared);
  }
  return shared;
}

void initParameters(torch::nn::Module& root, at::Generator& gen, double std) {
  torch::NoGradGuard noGrad;
  for (const auto& item : root.named_modules()) {
    auto& m = *item.value();
    bool isNorm = dynamic_cast<torch::nn::LayerNormImpl*>(&m) != nullptr ||
                  dynamic_cast<torch::nn::GroupNormImpl*>(&m) != nullptr ||
                  dynamic_cast<NormMarker*>(&m) != nullptr;
    for (const auto& p : m.named_parameters(/*recurse=*/false)) {
      auto t = p.value();
      if (!t.defined()) continue;
      if (isNorm && p.key() == "weight") {
        t.normal_(1.0, 0.1, gen);
      } else if (isNorm && p.key() == "bias") {
        t.normal_(0.0, 0.1, gen);
      } else {
        t.normal_(0.0, std, gen);
      }
    }
  }
}

void setDepth(int64_t& configLayers, int64_t layers) {
  if (layers < 0) throw Error("the number of layers must be positive, not " + std::to_string(layers));
  if (layers > 0) configLayers = layers;
}

void refuseDepth(const std::string& model, int64_t layers) {
  if (layers != 0)
    throw Error("zoo model '" + model + "' sets its depth per stage: a number of layers does not apply to it");
}

}  // namespace foldnorm::zoo
