// The program importer's state (private to src/import/export/): one object walks the program's
// graph (and the subgraphs of inlined higher-order ops) into our Graph.
#pragma once

#include <ATen/core/function_schema.h>

#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "foldnorm/graph/graph.h"
#include "foldnorm/graph/module_paths.h"
#include "foldnorm/torch/torch_model.h"

namespace foldnorm {
struct ExportArchive;
struct ExportModel;
}  // namespace foldnorm

namespace foldnorm::export_detail {

class ProgramImporter {
 public:
  ProgramImporter(const ExportArchive& archive, Graph& graph, ExportModel& model);

  /// The whole program: inputs and placeholders, nodes, return. Sets module paths.
  void run();

 private:
  NodeId addNode(const std::string& kind, const std::vector<std::size_t>& location, const std::string& name,
                 const nlohmann::json* metadata);
  ValueId constant(ConstantValue c, ValueKind kind, const std::string& typeName);
  ValueId tensorRef(const std::string& name, const std::string& where);
  ValueId symRef(const nlohmann::json& symArgument, const std::string& where);
  ValueId listOf(const std::vector<ValueId>& items, ValueKind kind, const std::string& typeName);
  ValueId argumentValue(const nlohmann::json& arg, const std::string& where);
  ValueId defaultValue(const c10::Argument& argument, const std::string& where);
  void setTensorInfo(ValueId v, const std::string& name, const nlohmann::json& graph);
  std::optional<ConstantValue> symbolic(const std::string& name, const nlohmann::json& graph, ValueKind& kind);
  void addOutputs(NodeId id, const nlohmann::json& outputs, const std::string& nodeName, const nlohmann::json& graph,
                  std::vector<ValueId>& produced);

  void placeholders(const nlohmann::json& graphModule);
  void nodes(const nlohmann::json& graph, const std::vector<std::size_t>& prefix);
  void node(const nlohmann::json& n, const nlohmann::json& graph, const std::vector<std::size_t>& location);
  void opNode(const nlohmann::json& n, const nlohmann::json& graph, const std::vector<std::size_t>& location,
              const std::string& kind, const c10::FunctionSchema* schema);
  void higherOrder(const nlohmann::json& n, const std::string& op, const std::vector<std::size_t>& location);
  void scalarNode(const nlohmann::json& n, const nlohmann::json& graph, const std::vector<std::size_t>& location);

  const ExportArchive& archive_;
  Graph& g_;
  ExportModel& model_;
  ModuleEvidence evidence_;
  std::map<std::string, std::size_t> callSites_;  // one per module path of nn_module_stack
  std::map<std::string, ValueId> scope_;           // value names of the graph being walked
  std::map<ValueId, std::string> poisoned_;        // bases written through a view: what wrote them
  std::map<ValueId, ValueId> viewBase_;            // a view's output -> the tensor it aliases
};

}  // namespace foldnorm::export_detail
