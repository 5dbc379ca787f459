// Internal to src/fold: the pieces of the .pt2 fold (see include/foldnorm/fold/fold_export.h).
//   export_program.cpp    JSON helpers: names, tensor metadata, renames, node locations, splicing
//   export_centering.cpp  centering (scaled ones too) and untie of the planned parameters
//   export_rewrite.cpp    inserted centerings, LayerNorm -> RMSNorm, add + RMSNorm fusion
//   fold_export.cpp       orchestration and verification;  export_write.cpp  the atomic save
#pragma once

#include <ATen/ATen.h>

#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "foldnorm/fold/fold_export.h"

namespace foldnorm::export_fold {

using nlohmann::json;
using State = std::map<std::string, at::Tensor>;
using Location = std::vector<std::size_t>;

const at::StorageImpl* storageOf(const at::Tensor& t);

/// The whole storage of `t` as a flat tensor of t's dtype.
at::Tensor flatStorage(const at::Tensor& t);

/// Every name the program uses for a value or a node, so new ones can be made unique.
class Names {
 public:
  explicit Names(const json& graph) { collect(graph); }
  std::string fresh(const std::string& base);

 private:
  void collect(const json& graph);
  std::set<std::string> used_;
};

/// `path` with every character that is not a letter or digit replaced by '_'.
std::string sanitized(const std::string& path);

json symInts(at::IntArrayRef v);

/// A tensor_meta for `t` on `device` (a serialized Device, kept from the tensor it replaces).
json tensorMeta(const at::Tensor& t, bool requiresGrad, const json& device);

/// Renames tensor references `from` -> `to` inside one serialized Argument; true when it did.
bool renameTensor(json& arg, const std::string& from, const std::string& to);
bool readsTensor(const json& arg, const std::string& name);

const json* namedInput(const json& node, const std::string& name);
json positional(const std::string& name, json arg);
json tensorArg(const std::string& name);

/// A new node with `like`'s stack trace and module stack, one tensor output per name in `outputs`.
json newNode(const json& like, const std::string& target, json inputs, const std::vector<std::string>& outputs);

/// True when the node's op writes into one of its arguments (in-place or out=), by its schema.
bool mutatesArgument(const json& node);

/// The program being edited: a copy of the archive's program and of a state, the node locations
/// of the import, and the edits to splice in at the end (so every location stays valid until then).
class ProgramEdit {
 public:
  ProgramEdit(const ImportedModel& model, const json& program, const State& state);

  const ImportedModel& model;
  json program;
  State state;
  std::map<std::string, std::string> added;  // new names -> parameter | buffer | constant
  Names names;
  std::vector<Location> foldedNorms;  // LayerNorms replaced by foldnorm::rms_norm (fusion candidates)

  json& graph() { return program.at("graph_module").at("graph"); }
  /// Where node `id` of the Graph is in the program; logic_error for a node the importer made.
  const Location& location(NodeId id) const;
  bool hasLocation(NodeId id) const;
  /// The graph whose node list holds the node at `loc` (the top graph or a subgraph).
  json& graphHolding(const Location& loc);
  json& node(const Location& loc) { return graphHolding(loc).at("nodes").at(loc.back()); }
  json& node(NodeId id) { return node(location(id)); }

  /// The node at `loc` becomes `nodes` (empty: removed); nodes inserted after it stay after.
  void replace(const Location& loc, std::vector<json> nodes) { slots_[loc].self = std::move(nodes); }
  /// What replaces the node at `loc` so far, when something does.
  std::vector<json>* replacement(const Location& loc);
  /// `nodes` go right after the node at `loc` (after its replacement).
  void insertAfter(const Location& loc, const std::vector<json>& nodes);
  /// `nodes` go before the first node of the top graph (after its inputs).
  void insertAtFront(const std::vector<json>& nodes);
  /// Applies the replacements and insertions (deepest subgraphs first, each from its end).
  void splice();

 private:
  struct Slot {
    std::optional<std::vector<json>> self;
    std::vector<json> after;
  };
  std::map<Location, Slot> slots_;
  std::vector<json> front_;
};

/// Centers and unties the planned parameters (scaled centerings read their scale by FQN).
void centerParameters(ProgramEdit& edit, const AnalysisResult& analysis, FoldReport* report);

/// x - x.mean(axes, keepdim=True) (aten.mean.dim + aten.sub.Tensor) at each inserted centering,
/// every later reader of x redirected. Before replaceLayerNorms: it renames readers in place.
void insertCenterings(ProgramEdit& edit, const AnalysisResult& analysis, FoldReport* report);

/// Each foldable LayerNorm becomes aten.rms_norm (+ aten.add.Tensor for a bias) or
/// foldnorm::rms_norm; kept ones are reported with their reason.
void replaceLayerNorms(ProgramEdit& edit, const AnalysisResult& analysis, RmsOp rmsOp, FoldReport* report);

/// Each aten.add.Tensor read by a folded foldnorm::rms_norm, with it, becomes one
/// foldnorm::add_rms_norm where that is exact (conditions in export_fuse.cpp); the count in
/// report->fusedAddNorms. After replaceLayerNorms (RmsOp::Foldnorm only).
void fuseAddNorms(ProgramEdit& edit, FoldReport* report);

}  // namespace foldnorm::export_fold
