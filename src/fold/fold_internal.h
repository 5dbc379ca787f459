// Internal to src/fold: the pieces of the TorchScript fold (see include/foldnorm/fold/fold.h).
//   apply_plan.cpp     node/value tables, centering and untie of the planned parameters
//   rewrite_norms.cpp  foldable LayerNorms -> foldnorm::rms_norm
//   fuse_add_norm.cpp  aten::add -> folded rms_norm pairs -> foldnorm::add_rms_norm
//   verify.cpp         original vs folded, float32 and float64
//   fold.cpp           orchestration and the atomic save;  fold_report.cpp  text and JSON
//   saved_file.cpp     the written file loaded back and checked (SavedFileCheck)
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "foldnorm/fold/fold.h"
#include "foldnorm/fold/fold_export.h"
#include "foldnorm/torch/model_surgery.h"
#include "foldnorm/torch/torch_model.h"

namespace foldnorm::fold_detail {

namespace jit = torch::jit;

/// printf-style formatting: fmt's headers here would be LibTorch's bundled copy, whose symbols
/// the system libfmt does not have.
std::string strf(const char* format, ...);

/// Node and value tables of `graph` in the order the importer walked them, checked against the
/// imported model's tables (same code, same inlining => same order).
struct GraphTables {
  std::vector<jit::Node*> nodes;    // by Node::origin
  std::vector<jit::Value*> values;  // by ValueId
};

GraphTables tablesFor(const std::shared_ptr<jit::Graph>& graph, const TorchModel& reference);

/// A tensor the fold centred: `centered` (what the folded module or graph holds) is `original`
/// (the imported model's tensor, never written) centred by `actions` with `scales`
/// (centeringScales) and rounded. What the float64 check centres again, unrounded, at each read.
struct CenteredTensor {
  at::Tensor original, centered;
  std::vector<CenterAction> actions;
  std::vector<at::Tensor> scales;
};

/// Centers and unties the planned parameters of `m` (its forward inlined in place as `graph`);
/// each centred tensor is added to `centered` (when given).
void centerParameters(jit::Module& m, const std::shared_ptr<jit::Graph>& graph, GraphTables& tables,
                      const ImportedModel& model, const AnalysisResult& analysis, FoldReport* report,
                      std::vector<CenteredTensor>* centered = nullptr);

/// Replaces each foldable LayerNorm node by foldnorm::rms_norm (same inputs), or by aten::rms_norm
/// and a bias add (RmsOp::Aten); records kept ones.
void replaceLayerNorms(const std::shared_ptr<jit::Graph>& graph, const GraphTables& tables,
                       const ImportedModel& model, const AnalysisResult& analysis, RmsOp rmsOp,
                       FoldReport* report);

/// Replaces each residual add read by a folded rms_norm (and the norm) by one
/// foldnorm::add_rms_norm where that is exact (conditions in fuse_add_norm.cpp); counts them in
/// report->fusedAddNorms (report may be null).
void fuseAddNorms(const std::shared_ptr<jit::Graph>& graph, const GraphTables& tables, const ImportedModel& model,
                  FoldReport* report);

/// The whole rewrite: centerParameters, replaceLayerNorms, fuseAddNorms (unless
/// options.fuseAddNorm is off), dead-code elimination.
void applyPlan(jit::Module& m, const std::shared_ptr<jit::Graph>& graph, const ImportedModel& model,
               const AnalysisResult& analysis, const FoldOptions& options, FoldReport* report,
               std::vector<CenteredTensor>* centered = nullptr);

/// Rows of each float32 output whose argmax flipped, and whether float32 rounding explains each
/// (PredictionFlip in fold.h): `a`, `b` original and folded in float32, `z` the original in
/// float64, `s` the saved file in float64, all of input set `run`. Counts go into the "float32"
/// checks, the flips into `worst` (trimmed now and then; keepWorst trims it at the end). Both
/// folds' verifications call it (verify.cpp, fold_export.cpp).
void checkPredictions(int run, const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b,
                      const std::vector<at::Tensor>& z, const std::vector<at::Tensor>& s, double savedBound,
                      std::vector<OutputCheck>& checks, std::vector<PredictionFlip>& worst);

/// Keeps the `keep` worst flips (largest margin / errorBound first).
void keepWorst(std::vector<PredictionFlip>& flips, std::size_t keep);

/// Runs original and folded (float32 on the options' device, and float64 copies) and compares.
/// `centered`: what the fold centred (centerParameters): on the CPU the float64 plan is then
/// the folded graph itself, each read of a centred tensor replaced by the original centred in
/// float64 at that use (no float64 copy of the planned tensors exists). Without it (or on CUDA,
/// or where a centred storage is also read through another view) the plan is made again on a
/// clone holding float64 copies of the planned tensors.
/// With `keep`, the runs' inputs and outputs are kept there for the check of the written file.
Verification verify(const ImportedModel& model, const AnalysisResult& analysis, const jit::Module& folded,
                    const std::shared_ptr<jit::Graph>& foldedGraph, const FoldOptions& options,
                    const std::vector<CenteredTensor>* centered = nullptr, VerificationRuns* keep = nullptr);

/// Loads the TorchScript file `path` (just written from `folded`) back with torch::jit::load and
/// checks it against the verification's `runs` (SavedFileCheck in fold.h): every tensor bit for
/// bit against the folded module's (the reloaded copy then reads the folded module's tensors:
/// no second copy of the model stays resident), its own forward in the model's dtype, and its
/// forward in float64 against the original's. Throws foldnorm::Error naming the cause.
SavedFileCheck checkSavedTorchScript(const std::string& path, const FoldedModel& folded, const VerificationRuns& runs,
                                     const ProgressFn& progress);

/// The same for a written .pt2 (`path`, from `folded`): read back by the .pt2 reader, every
/// tensor bit for bit against folded.state, the archive's own program run by the interpreter in
/// the model's dtype and in float64 on the verified fold's tensors.
SavedFileCheck checkSavedExport(const std::string& path, const FoldedExport& folded, const VerificationRuns& runs);

}  // namespace foldnorm::fold_detail
