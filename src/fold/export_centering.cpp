// Centering and untie of the planned parameters of a .pt2 (see export_internal.h).
#include <map>
#include <stdexcept>
#include <utility>

#include "export_internal.h"
#include "foldnorm/common/error.h"
#include "foldnorm/fold/fold_support.h"
#include "foldnorm/import/export.h"

namespace foldnorm::export_fold {
namespace {

/// The signature entry of `fqn` among the input specs, as its index.
std::size_t specIndex(const json& specs, const std::string& fqn) {
  for (std::size_t i = 0; i < specs.size(); ++i) {
    const json& s = specs[i].begin().value();
    for (const char* key : {"parameter_name", "buffer_name", "tensor_constant_name"})
      if (s.contains(key) && s.at(key) == fqn) return i;
  }
  throw std::logic_error("fold: '" + fqn + "' is not in the program's signature");
}

/// The subgraph of a higher-order op node.
json& subgraphOf(json& hop) {
  for (auto& in : hop.at("inputs"))
    if (in.at("arg").contains("as_graph")) return in["arg"]["as_graph"]["graph"];
  throw std::logic_error("fold: node location does not lead into a subgraph");
}

/// The subgraph input that the higher-order op `hop` binds its operand `outerName` to; "" when
/// it is no operand. wrap_with_set_grad_enabled (the op the importer inlines, as a disabled
/// autocast) passes the operands after its graph argument to the subgraph's inputs in order.
std::string subgraphInputFor(json& hop, const std::string& outerName) {
  const auto& ins = hop.at("inputs");
  std::size_t graphArg = 0;
  while (graphArg < ins.size() && !ins[graphArg].at("arg").contains("as_graph")) ++graphArg;
  const auto& subInputs = subgraphOf(hop).at("inputs");
  for (std::size_t k = graphArg + 1; k < ins.size() && k - graphArg - 1 < subInputs.size(); ++k)
    if (readsTensor(ins[k].at("arg"), outerName))
      return subInputs[k - graphArg - 1].at("as_tensor").at("name").get<std::string>();
  return {};
}

/// Makes `outerName` one more operand of the higher-order op at `hopLoc`, bound to a fresh
/// input of its subgraph (one more operand and one more input keep the pairing); returns the
/// input's name.
std::string threadIntoSubgraph(ProgramEdit& edit, const Location& hopLoc, const std::string& outerName) {
  json& hop = edit.node(hopLoc);
  json& sub = subgraphOf(hop);
  auto inner = edit.names.fresh(outerName + "_in");
  hop["inputs"].push_back({{"name", ""}, {"arg", tensorArg(outerName)}, {"kind", 1}});
  sub["inputs"].push_back(tensorArg(inner));
  sub["tensor_values"][inner] = edit.graphHolding(hopLoc).at("tensor_values").at(outerName);
  return inner;
}

}  // namespace

void centerParameters(ProgramEdit& edit, const AnalysisResult& analysis, FoldReport* report) {
  const Graph& g = edit.model.graph;
  auto& r = edit;
  auto& graph = edit.graph();
  auto& specs = edit.program.at("graph_module").at("signature").at("input_specs");
  // Scales are never centered (the analysis refuses that): the state holds the model's values.
  ScaleLookup scaleOf = [&](ParamId p) {
    auto it = r.state.find(g.parameter(p).path);
    if (it == r.state.end()) throw std::logic_error("fold: the archive has no scale '" + g.parameter(p).path + "'");
    return it->second;
  };

  for (const auto& plan : analysis.plan) {
    const auto& param = g.parameter(plan.param);
    auto it = r.state.find(param.path);
    if (it == r.state.end()) throw std::logic_error("fold: the archive has no tensor '" + param.path + "'");
    const at::Tensor original = it->second;
    auto value = centeredCopy(original, plan.actions, scaleOf);
    switch (plan.untieMode) {
      case UntieMode::InPlace: {
        // As a write through the storage: every name viewing it sees the centered values.
        auto base = flatStorage(original).clone();
        base.as_strided(original.sizes(), original.strides(), original.storage_offset()).copy_(value);
        for (auto& [name, t] : r.state)
          if (t.defined() && storageOf(t) == storageOf(original) && name != param.path)
            t = base.as_strided(t.sizes(), t.strides(), t.storage_offset());
        r.state[param.path] = base.as_strided(original.sizes(), original.strides(), original.storage_offset());
        break;
      }
      case UntieMode::OwnAttribute:  // this FQN has its own graph input: it alone gets the copy
        r.state[param.path] = value;
        break;
      case UntieMode::RedirectReads: {
        // A new lifted input of the same kind, placed after the spec it copies.
        const std::size_t at = specIndex(specs, param.path);
        json spec = specs[at];
        const std::string kind = spec.begin().key();
        json& s = spec.begin().value();
        auto fqn = "foldnorm_centered_" + sanitized(param.path);
        while (r.state.count(fqn)) fqn += "_";
        auto inputName = r.names.fresh((kind == "parameter" ? "p_" : kind == "buffer" ? "b_" : "c_") + fqn);
        auto oldInputName = s.at("arg").at("name").get<std::string>();
        s["arg"]["name"] = inputName;
        for (const char* key : {"parameter_name", "buffer_name", "tensor_constant_name"})
          if (s.contains(key)) s[key] = fqn;
        specs.insert(specs.begin() + static_cast<std::ptrdiff_t>(at) + 1, spec);
        auto& inputs = graph.at("inputs");
        inputs.insert(inputs.begin() + static_cast<std::ptrdiff_t>(at) + 1, tensorArg(inputName));
        const auto& old = graph.at("tensor_values").at(oldInputName);
        graph["tensor_values"][inputName] = tensorMeta(value, old.value("requires_grad", false), old.at("device"));
        r.state[fqn] = value;
        r.added[fqn] = kind == "tensor_constant" || (kind == "buffer" && !s.value("persistent", true)) ? "constant" : kind;
        // Inside higher-order ops' subgraphs (nested ones too) the node reads its subgraph's own
        // input: at every level the centered copy enters as one more operand and subgraph input
        // (once per op), bound to the input the original enters as.
        std::map<std::pair<Location, std::string>, std::string> threaded;
        for (const auto& [read, consumer] : plan.coveredReads) {
          const auto& loc = edit.location(consumer);
          std::string original = g.value(read).name, copy = inputName;
          for (std::size_t depth = 1; depth < loc.size(); ++depth) {
            const Location hopLoc(loc.begin(), loc.begin() + static_cast<std::ptrdiff_t>(depth));
            auto innerRead = subgraphInputFor(edit.node(hopLoc), original);
            if (innerRead.empty())
              throw std::logic_error("fold: '" + param.path + "' does not enter the subgraph that reads it");
            auto& inner = threaded[{hopLoc, copy}];
            if (inner.empty()) inner = threadIntoSubgraph(edit, hopLoc, copy);
            original = innerRead;
            copy = inner;
          }
          bool renamed = false;
          for (auto& in : edit.node(loc).at("inputs")) renamed = renameTensor(in.at("arg"), original, copy) || renamed;
          if (!renamed)
            throw std::logic_error("fold: node " + g.describeNode(consumer) + " does not read '" + param.path + "'");
        }
        break;
      }
    }
    if (report) reportCentered(*report, param.path, plan);
  }
}

}  // namespace foldnorm::export_fold
