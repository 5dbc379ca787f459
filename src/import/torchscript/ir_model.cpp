// A real TorchScript module built from IR text (tests and docs), imported like a loaded .pt.
#include <torch/csrc/jit/ir/irparser.h>

#include <functional>

#include "foldnorm/common/error.h"
#include "steps.h"

namespace foldnorm {
namespace {

namespace jit = torch::jit;


jit::Module buildIrModule(const IrModel& model, uint64_t seed) {
  auto graph = std::make_shared<jit::Graph>();
  try {
    jit::parseIR(model.ir, graph.get());
  } catch (const std::exception& e) {
    throw Error(std::string("cannot parse IR: ") + firstLine(e.what()));
  }
  // A module whose parameters are the named graph inputs; `self` is prepended.
  jit::Module module("__torch__.foldnorm.IrModel");
  std::map<std::string, jit::Module> submodules;
  std::function<jit::Module(const std::string&)> moduleAt = [&](const std::string& path) -> jit::Module {
    if (path.empty()) return module;
    auto it = submodules.find(path);
    if (it != submodules.end()) return it->second;
    auto parent = moduleAt(parentModule(path));
    auto name = path.substr(path.rfind('.') == std::string::npos ? 0 : path.rfind('.') + 1);
    jit::Module sub("__torch__.foldnorm.IrModel_" + std::to_string(submodules.size()));
    parent.register_module(name, sub);
    submodules.emplace(path, sub);
    return sub;
  };
  auto* self = graph->insertInput(0, "self");
  self->setType(module.type());
  std::vector<std::size_t> paramInputs;
  for (std::size_t i = 1; i < graph->inputs().size(); ++i) {
    auto* in = graph->inputs()[i];
    auto spec = std::find_if(model.parameters.begin(), model.parameters.end(),
                             [&](const auto& p) { return p.first == in->debugName(); });
    if (spec == model.parameters.end()) continue;
    std::string path = spec->first;
    for (std::size_t pos; (pos = path.find("__")) != std::string::npos;) path.replace(pos, 2, ".");
    auto owner = moduleAt(parentModule(path));
    auto leaf = path.substr(path.rfind('.') == std::string::npos ? 0 : path.rfind('.') + 1);
    auto t = makeInputs({spec->second}, seed + i).at(0);
    owner.register_parameter(leaf, t, false);
    // Replace the input by a GetAttr chain from self.
    graph->setInsertPoint(graph->block()->nodes().front());
    jit::Value* cur = self;
    std::string prefix;
    std::size_t start = 0;
    while (true) {
      auto dot = path.find('.', start);
      auto name = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
      prefix = prefix.empty() ? name : prefix + "." + name;
      auto* getattr = graph->insertNode(graph->createGetAttr(cur, name));
      if (dot == std::string::npos) getattr->output()->setType(c10::TensorType::get());
      else getattr->output()->setType(moduleAt(prefix).type());
      cur = getattr->output();
      if (dot == std::string::npos) break;
      start = dot + 1;
    }
    in->replaceAllUsesWith(cur);
    paramInputs.push_back(i);
  }
  for (auto it = paramInputs.rbegin(); it != paramInputs.rend(); ++it) graph->eraseInput(*it);
  auto fn = module.type()->compilation_unit()->create_function(
      c10::QualifiedName(*module.type()->name(), "forward"), graph);
  module.type()->addMethod(fn);
  return module;
}
}  // namespace

ImportedModel importIrModel(const IrModel& model, uint64_t seed) {
  ImportOptions options;
  options.seed = seed;
  auto module = buildIrModule(model, seed);
  // Fresh copies are built again from the IR (same seed, same graph, node for node); a save/load
  // round trip would re-print IR int arithmetic as tensor ops.
  auto result = torchscript::importModule(module, nullptr, "<ir>", model.inputs, false, options);
  result.torch->makeCopy = [model, seed] { return buildIrModule(model, seed); };
  return result;
}

}  // namespace foldnorm
