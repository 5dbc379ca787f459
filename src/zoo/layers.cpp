#include "layers.h"

#include <torch/csrc/jit/frontend/tracer.h>

#include <cmath>

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

}  // namespace foldnorm::zoo
