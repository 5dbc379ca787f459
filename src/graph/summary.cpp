#include "foldnorm/graph/summary.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <set>

#include "foldnorm/common/error.h"
#include "foldnorm/common/measure.h"

namespace foldnorm {

std::vector<LayerNormInfo> findLayerNorms(const Graph& graph) {
  std::vector<LayerNormInfo> out;
  for (auto id : graph.topologicalOrder()) {
    const auto& n = graph.node(id);
    if (n.kind != "aten::layer_norm") continue;
    // aten::layer_norm(input, normalized_shape, weight, bias, eps, cudnn_enable): a hand-edited
    // or corrupted graph may hold fewer operands, which must be refused in one line, not read.
    if (n.inputs.size() < 5)
      throw Error("layer norm " + graph.describeNode(id) + " has " + std::to_string(n.inputs.size()) +
                  " operands, not the 6 of aten::layer_norm(input, normalized_shape, weight, bias, eps, "
                  "cudnn_enable)");
    LayerNormInfo ln;
    ln.node = id;
    ln.modulePath = n.modulePath;
    auto shape = graph.constantIntList(n.inputs.at(1));
    auto eps = graph.constantDouble(n.inputs.at(4));
    if (!shape || !eps)
      throw Error("layer norm " + graph.describeNode(id) +
                  " has a normalized_shape or eps that is not a constant");
    ln.normalizedShape = *shape;
    ln.eps = *eps;
    ln.hasWeight = !graph.isNoneValue(n.inputs.at(2));
    ln.hasBias = !graph.isNoneValue(n.inputs.at(3));
    ln.weight = graph.value(n.inputs.at(2)).param;
    ln.bias = graph.value(n.inputs.at(3)).param;
    ln.inputShape = graph.describeTensor(n.inputs.at(0));
    out.push_back(ln);
  }
  return out;
}

ModelSummary summarize(const Graph& graph, const std::string& path,
                       const std::vector<std::string>& inputSpecs) {
  ModelSummary s;
  s.path = path;
  s.inputSpecs = inputSpecs;
  for (const auto& n : graph.nodes()) {
    if (n.kind == "prim::Param" || n.kind == "prim::Return") continue;
    ++s.nodes;
    if (isPlumbing(n)) ++s.plumbingNodes;
    else ++s.opHistogram[n.kind];
  }
  s.layerNorms = findLayerNorms(graph);
  std::set<int> countedGroups;
  for (const auto& p : graph.parameters()) {
    if (p.isConstant) continue;
    if (p.tiedGroup >= 0 && !countedGroups.insert(p.tiedGroup).second) continue;
    if (p.isBuffer) {
      s.bufferBytes += p.bytes;
    } else {
      int64_t numel = 1;
      for (auto d : p.shape) numel *= d;
      s.parameterCount += numel;
      s.parameterBytes += p.bytes;
    }
  }
  for (const auto& group : graph.tiedGroups()) {
    std::vector<std::string> names;
    for (auto id : group) names.push_back(graph.parameter(id).path);
    s.tiedGroups.push_back(names);
  }
  for (auto v : graph.modelInputs()) s.inputs.emplace_back(graph.value(v).name, graph.describeTensor(v));
  for (auto v : graph.modelOutputs()) {
    const auto& val = graph.value(v);
    if (val.kind == ValueKind::Tensor) {
      s.outputs.emplace_back(val.name, graph.describeTensor(v));
    } else if (val.producer != kNone && (graph.node(val.producer).kind == "prim::TupleConstruct" ||
                                         graph.node(val.producer).kind == "prim::ListConstruct")) {
      for (auto in : graph.node(val.producer).inputs)
        s.outputs.emplace_back(graph.value(in).name, graph.describeTensor(in));
    } else {
      s.outputs.emplace_back(val.name, val.typeName);
    }
  }
  return s;
}

nlohmann::json toJson(const ModelSummary& s) {
  nlohmann::json j;
  j["schema"] = "foldnorm-inspect/1";
  j["model"] = s.path;
  j["input_specs"] = s.inputSpecs;
  j["nodes"] = s.nodes;
  j["plumbing_nodes"] = s.plumbingNodes;
  j["op_histogram"] = s.opHistogram;
  j["layer_norms"] = nlohmann::json::array();
  for (const auto& ln : s.layerNorms)
    j["layer_norms"].push_back({{"module", ln.modulePath},
                                {"normalized_shape", ln.normalizedShape},
                                {"eps", ln.eps},
                                {"has_weight", ln.hasWeight},
                                {"has_bias", ln.hasBias},
                                {"input", ln.inputShape}});
  j["parameters"] = {{"count", s.parameterCount}, {"bytes", s.parameterBytes},
                     {"buffer_bytes", s.bufferBytes}};
  j["tied_groups"] = s.tiedGroups;
  auto io = [](const auto& list) {
    auto a = nlohmann::json::array();
    for (const auto& [name, desc] : list) a.push_back({{"name", name}, {"tensor", desc}});
    return a;
  };
  j["inputs"] = io(s.inputs);
  j["outputs"] = io(s.outputs);
  return j;
}

std::string toText(const ModelSummary& s) {
  std::string out = fmt::format("model: {}\n", s.path);
  out += fmt::format("nodes: {} ({} dataflow ops, {} plumbing)\n", s.nodes, s.nodes - s.plumbingNodes,
                     s.plumbingNodes);
  for (const auto& [name, desc] : s.inputs) out += fmt::format("input  {:<16} {}\n", name, desc);
  for (const auto& [name, desc] : s.outputs) out += fmt::format("output {:<16} {}\n", name, desc);
  out += fmt::format("parameters: {} ({}), buffers {}\n", s.parameterCount, humanBytes(s.parameterBytes),
                     humanBytes(s.bufferBytes));
  if (s.tiedGroups.empty()) out += "tied parameters: none\n";
  for (const auto& g : s.tiedGroups) {
    std::string names;
    for (const auto& n : g) names += (names.empty() ? "" : " = ") + n;
    out += "tied parameters: " + names + "\n";
  }
  out += fmt::format("\nlayer norms: {}\n", s.layerNorms.size());
  for (const auto& ln : s.layerNorms)
    out += fmt::format("  {:<40} shape {} eps {:g} weight {} bias {}  input {}\n",
                       ln.modulePath.empty() ? "<top>" : ln.modulePath, formatShape(ln.normalizedShape),
                       ln.eps, ln.hasWeight ? "yes" : "no", ln.hasBias ? "yes" : "no", ln.inputShape);
  out += "\nop histogram:\n";
  std::vector<std::pair<int, std::string>> ops;
  for (const auto& [k, c] : s.opHistogram) ops.emplace_back(-c, k);
  std::sort(ops.begin(), ops.end());
  for (const auto& [c, k] : ops) out += fmt::format("  {:>5}  {}\n", -c, k);
  return out;
}

}  // namespace foldnorm
