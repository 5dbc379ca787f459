// Which LayerNorms fold into RMSNorm, which parameters to center, and why not.
//
// AnalyzeFoldability(graph) runs in three phases (docs/design.md):
//  1. Mean-zero facts, one forward pass in topological order (the paper's Algorithm 1,
//     generalised by the rule registry): every tensor value gets "mean-zero along axes B by
//     centering leaves L" or "broken at node N, because ...".
//  2. Candidates: an LN whose input is mean-zero along axes within its normalized axes.
//  3. Safety, to a fixed point: every leaf the candidates need is centered, and centering changes
//     its output by a shift constant along its axes for EVERY consumer. The shift is followed
//     forward (per leaf, meet over paths); it must end in absorbers. A leaf whose shift reaches
//     anything else (a model output, a linear reading the residual stream, a nonlinearity) is
//     unsafe, and so is every LN that needs it. A parameter read by anything other than the
//     centered leaves (tied weights, shared storage) is untied (copied) unless untie is
//     forbidden, in which case its LNs are not foldable. Removing an LN can only remove
//     leaves, so the loop ends.
// The solver's steps (analysis.cpp): computeFacts, findCandidates, then to a fixed point
// planLeaves, checkShiftSafety, resolveTies, rejectUnsafe. The plan it returns holds the whole
// decision, including how each parameter is untied and which reads see the centered copy; the
// fold executes it and re-derives nothing.
// Everything here is torch-free and linear in the graph for phases 1-2; phase 3 follows each
// centered leaf's shift through the part of the graph it reaches.
#pragma once

#include <map>
#include <nlohmann/json_fwd.hpp>
#include <set>
#include <string>
#include <vector>

#include "foldnorm/analysis/facts.h"
#include "foldnorm/common/error.h"
#include "foldnorm/graph/summary.h"

namespace foldnorm {

struct AnalysisOptions {
  bool allowUntie = true;           // false: a tied/shared parameter is never copied
  std::vector<std::string> only;    // if non-empty: fold only LNs whose module path is listed
  /// Absorb a per-channel scale after a weight leaf (gamma * (W h + b)) by centering the scaled
  /// map (docs/method.md section 7); false: such LNs keep with reason turned-off.
  bool scaleAbsorb = true;
  /// Insert one x - x.mean(axis) where a stream starts at a value no parameter centering makes
  /// mean-zero, when that frees at least two LNs (docs/method.md section 8).
  bool insertCentering = true;
};

/// AnalysisOptions::only names a module path no LayerNorm has. A user error: front ends add
/// how they spell the selection.
class UnknownLayerNormPath : public Error {
 public:
  explicit UnknownLayerNormPath(std::string path)
      : Error("no LayerNorm has module path " + path), path_(std::move(path)) {}
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

/// Where a centered leaf's shift went.
struct ShiftCheck {
  bool safe = true;
  NodeId consumer = kNone;          // unsafe: the node that sees the change
  std::string why;                  // unsafe: in words
  std::vector<NodeId> path;         // unsafe: leaf node ... consumer
  std::vector<NodeId> absorbers;    // the absorbers the shift reached
  std::size_t visited = 0;          // values visited (cost)
};

enum class VerdictReason { None, Breaker, Axes, UnsafeShift, SharedParameter, ParameterConflict,
                           NotSelected, NoAxes, TurnedOff };
const char* toString(VerdictReason reason);

struct LayerNormVerdict {
  LayerNormInfo info;
  bool foldable = false;
  std::vector<LeafId> leaves;       // the leaves its input depends on (to center when foldable)
  VerdictReason reason = VerdictReason::None;
  std::string explanation;          // one line
  NodeId breaker = kNone;           // Breaker: the breaking node
  std::vector<NodeId> path;         // Breaker: LN, ..., breaker. UnsafeShift: leaf, ..., consumer
  LeafId unsafeLeaf = kNone;        // UnsafeShift / SharedParameter: the leaf
  NodeId consumer = kNone;          // UnsafeShift: who sees the change
  ParamId sharedParameter = kNone;  // SharedParameter / ParameterConflict
};

/// How the fold gives the centered leaves their centered copy of a parameter.
enum class UntieMode {
  /// Nothing but the leaves reads the storage: center it in place (every name sharing the
  /// storage sees the centered values, and only leaves read any of them).
  InPlace,
  /// This attribute (or constant) is read by the leaves alone, other names sharing its storage
  /// (tied weights) by others: this attribute gets the centered copy, the other names keep the
  /// original.
  OwnAttribute,
  /// This very attribute is also read outside the leaves: a new attribute on the root module,
  /// `foldnorm_centered_<path>` (or a new constant), holds the centered copy, and the covered
  /// reads are redirected to it.
  RedirectReads,
};
const char* toString(UntieMode mode);

/// One parameter the fold changes: the whole decision, which the fold executes as it stands.
struct ParameterPlan {
  ParamId param = kNone;
  std::vector<CenterAction> actions;  // applied in order (commuting projections)
  std::vector<LeafId> leaves;         // the centered leaves that read it
  bool untie = false;                 // other reads keep the original; the leaves get a copy
  UntieMode untieMode = UntieMode::InPlace;  // untie == (untieMode != InPlace)
  /// The (read, consuming node) pairs of this parameter's storage group that belong to the
  /// leaves (leafParameterUses): the reads that see the centered values.
  std::vector<std::pair<ValueId, NodeId>> coveredReads;
  std::vector<ValueId> otherReads;    // untie: the reads that keep the original
  int64_t untieBytes = 0;
};

/// One inserted centering the analysis considered (docs/method.md section 8): x - x.mean(axes,
/// keepdim) at `value`, the output of node `after`. Inserted when the shift walk from there ends
/// in absorbers and it frees at least two LNs; otherwise refused, with why.
struct InsertedCentering {
  ValueId value = kNone;
  NodeId after = kNone;
  AxisSet axes;
  bool inserted = false;
  LeafId leaf = kNone;               // inserted: the InsertedCentering leaf the LNs depend on
  std::vector<NodeId> frees;         // inserted: the LNs that fold because of it
  std::vector<NodeId> blamedBy;      // the LNs whose input breaks at this value (without it)
  std::string why;                   // refused: in words
  NodeId consumer = kNone;           // refused by the walk: the reader that sees the change
  std::vector<NodeId> path;          // refused by the walk: after ... consumer
};

struct AnalysisResult {
  std::vector<MeanZeroFact> facts;   // per value
  std::vector<Leaf> leaves;
  std::vector<LayerNormVerdict> layerNorms;  // graph order
  std::vector<ParameterPlan> plan;           // parameters to change
  std::map<LeafId, ShiftCheck> shiftChecks;  // for every leaf that was a candidate's
  std::set<LeafId> centeredLeaves;
  std::vector<InsertedCentering> insertions;  // considered, inserted or refused (graph order)
  int iterations = 0;
  double milliseconds = 0;

  std::size_t foldableCount() const;
  int64_t untieBytes() const;
  const LayerNormVerdict* verdictFor(NodeId lnNode) const;
};

AnalysisResult analyzeFoldability(const Graph& graph, const AnalysisOptions& options = {});

/// The solver for a given set of inserted centerings (value, axes): the facts of those values
/// are replaced by an InsertedCentering leaf. analyzeFoldability searches the set
/// (insert_centering.cpp) and calls this; `insertions` of the result are left empty.
AnalysisResult solveFoldability(const Graph& graph, const AnalysisOptions& options,
                                const std::vector<std::pair<ValueId, AxisSet>>& inserted);

/// The (parameter read, consuming node) pairs that belong to a leaf: a parameter leaf's read
/// and all its uses; a weight leaf's weight/bias reads entering its chain or node. Every other
/// use of a centered parameter's storage forces an untie.
std::vector<std::pair<ValueId, NodeId>> leafParameterUses(const Graph& graph, const Leaf& leaf);

/// Nodes of the path, rendered "aten::add @ h.0 <- aten::addmm @ h.0.attn.c_proj ...".
std::string describePath(const Graph& graph, const std::vector<NodeId>& path, const char* arrow);

// Reports (report.cpp). JSON schema "foldnorm-analysis/1" is documented in docs/json-schema.md.
nlohmann::json toJson(const Graph& graph, const AnalysisResult& result, const std::string& modelPath);
std::string toText(const Graph& graph, const AnalysisResult& result, bool verbose = false);
std::string describeLeaf(const Graph& graph, const Leaf& leaf);
/// "insert centering after aten::layer_norm @ embeddings.norm along {2}: frees 5 LNs, saves 4
/// mean subtractions", or why none was inserted there.
std::string describeInsertion(const Graph& graph, const InsertedCentering& insertion);

/// The file name of the source range the fold gives an inserted centering's nodes (aten::mean,
/// aten::sub), so a re-imported folded model shows them at "foldnorm_inserted_centering:1" and
/// the folded view can mark them.
inline constexpr const char* kInsertedCenteringSource = "foldnorm_inserted_centering";

}  // namespace foldnorm
