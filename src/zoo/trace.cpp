// From an eager zoo model to a TorchScript module: mirror the nn::Module tree as
// torch::jit::Modules holding the same tensors, trace the forward with LibTorch's tracer (which
// then reaches parameters through prim::GetAttr chains), and install the graph as `forward`.
#include <torch/csrc/jit/frontend/tracer.h>

#include <unordered_set>

#include "foldnorm/common/error.h"
#include "layers.h"

namespace foldnorm::zoo {
namespace {

// "foldnorm::zoo::GPT2AttentionImpl" -> "GPT2Attention", "torch::nn::LayerNormImpl" -> "LayerNorm":
// the class names a Python trace of the reference model shows.
std::string scriptClassName(const torch::nn::Module& m) {
  std::string name = m.name();
  auto colon = name.rfind("::");
  if (colon != std::string::npos) name = name.substr(colon + 2);
  auto lt = name.find('<');
  if (lt != std::string::npos) name = name.substr(0, lt);
  if (name.size() > 4 && name.compare(name.size() - 4, 4, "Impl") == 0) name.resize(name.size() - 4);
  return name;
}

torch::jit::Module mirror(const torch::nn::Module& m, const std::shared_ptr<torch::jit::CompilationUnit>& cu,
                          const std::string& ns, bool training) {
  // shouldMangle: every instance gets its own class, as in a Python trace.
  torch::jit::Module jm(c10::QualifiedName(ns + "." + scriptClassName(m)), cu, /*shouldMangle=*/true);
  // Python's ScriptModule.eval()/train() and jit::Module::train() expect the attribute.
  jm.register_attribute("training", c10::BoolType::get(), training);
  for (const auto& p : m.named_parameters(/*recurse=*/false)) {
    if (p.value().defined()) jm.register_parameter(p.key(), p.value(), /*is_buffer=*/false);
  }
  for (const auto& b : m.named_buffers(/*recurse=*/false)) {
    if (b.value().defined()) jm.register_buffer(b.key(), b.value());
  }
  for (const auto& c : m.named_children()) {
    jm.register_module(c.key(), mirror(*c.value(), cu, ns, training));
  }
  return jm;
}

}  // namespace

std::vector<torch::Tensor> makeInputs(const std::vector<InputSpec>& specs, uint64_t seed) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  std::vector<torch::Tensor> out;
  for (const auto& s : specs) {
    auto dtype = torch::kFloat32;
    if (s.dtype == "float64") dtype = torch::kFloat64;
    else if (s.dtype == "float16") dtype = torch::kFloat16;
    else if (s.dtype == "bfloat16") dtype = torch::kBFloat16;
    else if (s.dtype == "int64") dtype = torch::kInt64;
    else if (s.dtype == "int32") dtype = torch::kInt32;
    else if (s.dtype == "bool") dtype = torch::kBool;
    torch::Tensor t;
    if (s.isFloating()) {
      t = s.low ? torch::empty(s.shape).uniform_(*s.low, *s.high, gen) : torch::randn(s.shape, gen);
      t = t.to(dtype);
    } else {
      int64_t lo = s.low ? static_cast<int64_t>(*s.low) : 0;
      int64_t hi = s.high ? static_cast<int64_t>(*s.high) : 2;
      t = torch::randint(lo, hi, s.shape, gen, torch::kInt64).to(dtype);
    }
    out.push_back(t);
  }
  return out;
}

torch::jit::Module traceEagerModel(const EagerModel& model, const std::vector<torch::Tensor>& inputs) {
  auto cu = std::make_shared<torch::jit::CompilationUnit>();
  auto jm = mirror(*model.root, cu, "__torch__.foldnorm_zoo." + model.name, model.root->is_training());

  torch::NoGradGuard noGrad;
  torch::jit::Stack stack(inputs.begin(), inputs.end());
  auto fn = [&](torch::jit::Stack in) -> torch::jit::Stack {
    std::vector<torch::Tensor> args;
    for (auto& v : in) args.push_back(v.toTensor());
    auto outs = model.forward(args);
    if (outs.size() == 1) return {outs[0]};
    std::vector<c10::IValue> items(outs.begin(), outs.end());
    return {c10::ivalue::Tuple::create(std::move(items))};
  };
  auto noNames = [](const torch::autograd::Variable&) { return std::string(); };
  auto traced = torch::jit::tracer::trace(std::move(stack), fn, noNames, /*strict=*/true,
                                          /*force_outplace=*/false, &jm, model.inputNames);
  auto graph = traced.first->graph;
  auto method = c10::QualifiedName(*jm.type()->name(), "forward");
  auto* function = jm._ivalue()->compilation_unit()->create_function(method, graph);
  jm.type()->addMethod(function);
  return jm;
}

std::vector<torch::Tensor> runTraced(torch::jit::Module& module, const std::vector<torch::Tensor>& inputs) {
  torch::NoGradGuard noGrad;
  std::vector<c10::IValue> args(inputs.begin(), inputs.end());
  auto out = module.forward(args);
  std::vector<torch::Tensor> result;
  if (out.isTuple()) {
    for (const auto& v : out.toTupleRef().elements()) result.push_back(v.toTensor());
  } else {
    result.push_back(out.toTensor());
  }
  return result;
}

int64_t countParameters(const torch::nn::Module& root) {
  std::unordered_set<const void*> seen;
  int64_t n = 0;
  for (const auto& p : root.parameters()) {
    if (seen.insert(p.unsafeGetTensorImpl()).second) n += p.numel();
  }
  return n;
}

}  // namespace foldnorm::zoo
