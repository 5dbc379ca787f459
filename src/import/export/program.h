// The program importer's state (private to src/import/export/): one object walks the program's
// graph (and the subgraphs of inlined higher-order ops) into our Graph.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
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
              const std::string& kind, const c10::OperatorHandle* op);
  void higherOrder(const nlohmann::json& n, const std::string& op, const std::vector<std::size_t>& location);
  void normalizeLayerNorms();
  void scalarNode(const nlohmann::json& n, const nlohmann::json& graph, const std::vector<std::size_t>& location);

  // Functionalization (functionalize.cpp): every tensor value belongs to a storage, as a view
  // chain from the storage's root; an in-place write gives the storage a new value (the root
  // with the written region replaced: scatter nodes the importer makes), and a later read of a
  // value of an older version reads the view chain replayed on the new value.
  struct ViewStep {
    NodeId node = kNone;      // the program's view node (or the importer's replay of it)
    std::string kind;         // its functional op ("aten::unsqueeze" for unsqueeze_)
    bool replayable = true;   // false for an element of a multi-output view (split, unbind)
    std::string noInverse;    // why a write through it cannot be written back; "" when it can
  };
  struct Alias {
    std::size_t storage = 0;
    std::vector<ViewStep> chain;  // from the storage's root
    int version = 0;              // the storage version the value holds
    ValueId parent = kNone;       // the value it is a view of (same version), kNone at the root
  };
  struct Storage {
    ValueId current = kNone;  // the root's value at the latest version
    int version = 0;
    std::string name;         // the root's name in the program
    NodeId lastWrite = kNone;
    std::string poisoned;     // a write that could not be written back: what it was
  };
  Alias& aliasOf(ValueId v);
  /// `v`, or (when its storage was written since) its view chain replayed on the newest value.
  ValueId current(ValueId v, const std::string& name, const std::string& where);
  void viewCreated(NodeId id, ValueId view, ValueId base, const nlohmann::json& n, const nlohmann::json& graph,
                   const std::string& baseArgName, const std::string& where);
  void inPlaceWrite(NodeId id, ValueId self, ValueId result, bool metadataOnly, const std::string& where);
  ValueId replay(const ViewStep& step, ValueId base, const std::string& name, NodeId standsFor);
  std::optional<ValueId> writeBack(const ViewStep& step, ValueId base, ValueId src, NodeId write, std::string& why);
  NodeId syntheticNode(const std::string& kind, NodeId standsFor);

  const ExportArchive& archive_;
  Graph& g_;
  ExportModel& model_;
  ModuleEvidence evidence_;
  std::map<std::string, std::size_t> callSites_;  // one per module path of nn_module_stack
  std::map<std::string, ValueId> scope_;           // value names of the graph being walked
  std::map<ValueId, Alias> alias_;
  std::vector<Storage> storages_;
};

}  // namespace foldnorm::export_detail
