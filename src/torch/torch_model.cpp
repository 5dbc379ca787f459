// The torch side of an imported model (see include/foldnorm/torch/torch_model.h): example inputs,
// running a graph, inlining, fresh copies.
#include "foldnorm/torch/torch_model.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/csrc/jit/api/function_impl.h>
#include <torch/csrc/jit/passes/inliner.h>
#include <torch/csrc/jit/runtime/graph_executor.h>
#include <torch/csrc/jit/serialization/import.h>

#include <set>
#include <sstream>

#include "foldnorm/common/error.h"

namespace foldnorm {
namespace {

namespace jit = torch::jit;

at::ScalarType scalarTypeOf(const std::string& dtype) {
  if (dtype == "float32") return at::kFloat;
  if (dtype == "float64") return at::kDouble;
  if (dtype == "float16") return at::kHalf;
  if (dtype == "bfloat16") return at::kBFloat16;
  if (dtype == "int64") return at::kLong;
  if (dtype == "int32") return at::kInt;
  if (dtype == "bool") return at::kBool;
  throw Error("unknown dtype " + dtype);
}

void flattenTensors(const c10::IValue& iv, std::vector<at::Tensor>& out) {
  if (iv.isTensor()) out.push_back(iv.toTensor());
  else if (iv.isTuple())
    for (const auto& e : iv.toTupleRef().elements()) flattenTensors(e, out);
  else if (iv.isList())
    for (const auto& e : iv.toListRef()) flattenTensors(e, out);
  else if (iv.isGenericDict())
    for (const auto& kv : iv.toGenericDict()) flattenTensors(kv.value(), out);
}

}  // namespace

std::string dtypeName(at::ScalarType type) {
  switch (type) {
    case at::kFloat: return "float32";
    case at::kDouble: return "float64";
    case at::kHalf: return "float16";
    case at::kBFloat16: return "bfloat16";
    case at::kLong: return "int64";
    case at::kInt: return "int32";
    case at::kShort: return "int16";
    case at::kChar: return "int8";
    case at::kByte: return "uint8";
    case at::kBool: return "bool";
    default: return c10::toString(type);
  }
}

std::vector<at::Tensor> makeInputs(const std::vector<InputSpec>& specs, uint64_t seed) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed + 0x5eed);
  std::vector<at::Tensor> out;
  for (const auto& spec : specs) {
    auto type = scalarTypeOf(spec.dtype);
    auto opts = at::TensorOptions().dtype(type);
    at::Tensor t;
    if (spec.isFloating()) {
      if (spec.low && spec.high)
        t = at::empty(spec.shape, opts.dtype(at::kDouble)).uniform_(*spec.low, *spec.high, gen).to(type);
      else
        t = at::randn(spec.shape, gen, opts.dtype(at::kDouble)).to(type);
    } else {
      int64_t lo = spec.low ? static_cast<int64_t>(*spec.low) : 0;
      int64_t hi = spec.high ? static_cast<int64_t>(*spec.high) : 2;
      t = at::randint(lo, hi, spec.shape, gen, opts.dtype(at::kLong)).to(type);
    }
    out.push_back(t);
  }
  return out;
}

std::vector<at::Tensor> outputTensors(const c10::IValue& value) {
  std::vector<at::Tensor> out;
  flattenTensors(value, out);
  return out;
}

std::vector<at::Tensor> runGraph(const torch::jit::Module& module,
                                 const std::shared_ptr<torch::jit::Graph>& graph,
                                 const std::vector<at::Tensor>& inputs) {
  jit::GraphOptimizerEnabledGuard noOptimize(false);
  // Parameters loaded from a trace require grad: with autograd on, every output would keep the
  // whole forward alive through its grad_fn (each op's saved inputs: every upcast weight of a
  // float64 run, every activation), as much again as the model until the outputs are dropped.
  at::NoGradGuard noGrad;
  jit::GraphFunction fn("foldnorm_run", graph->copy(), nullptr);
  jit::Stack stack;
  stack.emplace_back(module._ivalue());
  for (const auto& t : inputs) stack.emplace_back(t);
  fn.run(stack);
  std::vector<at::Tensor> out;
  for (const auto& iv : stack) flattenTensors(iv, out);
  return out;
}

namespace {

bool writesAnArgument(const jit::Node* n) {
  const auto* schema = n->maybeSchema();
  if (!schema) return false;
  for (const auto& a : schema->arguments())
    if (a.alias_info() && a.alias_info()->isWrite()) return true;
  return false;
}

/// Removes the top-level nodes whose results nothing reads, but LayerNorms. A trace holds its
/// submodules' calls whole, so once inlined a call's results that the caller ignores are dead
/// code (a linear reading the stream whose result nothing reads made a centering look unsafe);
/// a .pt2 is imported the same way (src/import/export/nodes.cpp). LayerNorms stay, read or not:
/// each is a call the eager forward makes and gets a verdict. Kept too: nodes with side effects,
/// with blocks, or writing into an argument (in place, out=, through a view). Deterministic, so a
/// fresh copy inlined again has the importer's nodes, node for node.
void eliminateDeadCode(jit::Graph& graph) {
  auto nodes = graph.nodes().reverse();
  for (auto it = nodes.begin(); it != nodes.end();) {
    jit::Node* n = *it;
    ++it;
    if (n->kind() == c10::Symbol::fromQualString("aten::layer_norm") || n->hasSideEffects() ||
        !n->blocks().empty() || n->outputs().empty() || writesAnArgument(n))
      continue;
    bool read = false;
    for (const auto* o : n->outputs()) read = read || o->hasUses();
    if (!read) n->destroy();
  }
}

}  // namespace

std::string constantsToCpu(torch::jit::Graph& graph) {
  std::string named;
  for (auto* n : graph.nodes()) {
    if (n->kind() != c10::prim::Constant || n->outputs().size() != 1 || !n->hasAttribute(c10::attr::value) ||
        n->output()->type()->kind() != c10::TypeKind::DeviceObjType)
      continue;
    const auto device = n->s(c10::attr::value);
    if (device == "cpu") continue;
    if (named.empty()) named = device;
    n->s_(c10::attr::value, "cpu");  // in place: no node is added, the node order stays the importer's
  }
  return named;
}

std::shared_ptr<torch::jit::Graph> inlinedForward(const torch::jit::Module& module) {
  auto method = module.find_method("forward");
  if (!method) throw Error("the module has no forward method");
  auto graph = jit::toGraphFunction(method->function()).graph()->copy();
  jit::Inline(*graph);
  eliminateDeadCode(*graph);
  constantsToCpu(*graph);
  return graph;
}

std::shared_ptr<torch::jit::Graph> inlineForwardInPlace(torch::jit::Module& module) {
  auto graph = jit::toGraphFunction(module.get_method("forward").function()).graph();
  jit::Inline(*graph);
  eliminateDeadCode(*graph);
  constantsToCpu(*graph);
  return graph;
}

void methodsToCpu(const torch::jit::Module& module) {
  for (const auto& m : module.modules())
    for (auto* fn : m.type()->methods())
      if (auto* graphFn = dynamic_cast<jit::GraphFunction*>(fn)) constantsToCpu(*graphFn->graph());
}

std::string tracedDevice(const torch::jit::Module& module) {
  auto method = module.find_method("forward");
  if (!method) return "cpu";
  auto graph = jit::toGraphFunction(method->function()).graph()->copy();
  jit::Inline(*graph);
  auto named = constantsToCpu(*graph);
  return named.empty() ? "cpu" : named;
}

torch::jit::Module freshCopy(const TorchModel& model) {
  if (model.makeCopy) return model.makeCopy();
  if (!model.archive) throw std::logic_error("freshCopy: the model's archive bytes were released");
  std::istringstream in(*model.archive);
  return jit::load(in, c10::Device(c10::kCPU), model.debugRecords);
}

int64_t distinctStorageBytes(const std::vector<at::Tensor>& tensors) {
  std::set<const c10::StorageImpl*> seen;
  int64_t bytes = 0;
  for (const auto& t : tensors) {
    if (!t.defined() || !t.has_storage()) continue;
    if (seen.insert(t.storage().unsafeGetStorageImpl()).second) bytes += static_cast<int64_t>(t.storage().nbytes());
  }
  return bytes;
}

std::vector<at::Tensor> attributeTensors(const torch::jit::Module& module) {
  std::vector<at::Tensor> tensors;
  for (const auto& sub : module.modules())
    for (const auto& attribute : sub.named_attributes(/*recurse=*/false))
      if (attribute.value.isTensor()) tensors.push_back(attribute.value.toTensor());
  return tensors;
}

}  // namespace foldnorm
