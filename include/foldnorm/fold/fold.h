// The fold: apply an analysis' plan to a model, verify it, save it.
//
//   Before                                   After
//   x -> linear(W, b) -> ... -> layer_norm    x -> linear(W - mean_out W, b - mean b) -> ...
//                                                  -> foldnorm::rms_norm (same shape, weight,
//                                                     bias, eps)
// Requirements: the analysis decided everything (which LNs, which parameters, which axes, which
// untie); the fold never re-decides. Centering is done in float64 and cast back.
// Verification runs original and folded on the example inputs and on random inputs drawn from
// the spec, in float32 (practical equivalence) and on float64 copies of both (true
// equivalence: the plan applied to a float64 copy of the original, so nothing is rounded to
// float32 on the way).
#pragma once

#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

#include "foldnorm/analysis/analysis.h"
#include "foldnorm/import/torchscript.h"

namespace foldnorm {

/// What a folded LayerNorm becomes. Foldnorm: our fused foldnorm::rms_norm (fast; the saved model
/// needs libfoldnorm_ops.so loaded). Aten: aten::rms_norm plus an aten::add of the LN's bias where
/// it had one, so the saved model runs in plain PyTorch (ATen's CPU rms_norm is unfused and
/// slower: docs/performance.md).
enum class RmsOp { Foldnorm, Aten };
const char* toString(RmsOp op);
/// The setting's names, in RmsOp's order: what a CLI flag, the GUI's choice and the Python
/// bindings offer.
inline constexpr const char* kRmsOpNames[] = {"foldnorm", "aten"};
/// RmsOp from its setting name (the one parser of it); SettingError("rms_op") otherwise.
RmsOp parseRmsOp(const std::string& name);

struct FoldOptions {
  bool verify = true;
  /// Unset: the model format's default (Model::defaultRmsOp, fold/model.h: foldnorm for a .pt,
  /// aten for a .pt2).
  std::optional<RmsOp> rmsOp;
  int randomInputs = 3;          // extra input sets drawn from the spec (besides the example)
  std::string device = "cpu";    // where verification runs: cpu | cuda
  uint64_t seed = 0;
  double float64Tolerance = 1e-9;  // relative; above it the fold is a bug
  /// Relative error expected at most of the saved float32 file run in float64: its centered
  /// weights are rounded to float32 (unit roundoff 2^-24 = 6.0e-8 each), amplified by the
  /// model's conditioning (GPT-2: 3e-8 measured). A property of the dtype, not a verdict: above
  /// it the report says so, and flips of predictions are no longer excused by it. A model whose
  /// centered weights are 16-bit gets this bound scaled by the unit roundoff of their dtype
  /// (savedBoundFor in fold_support.h: float16 x 2^13, bfloat16 x 2^16).
  double savedFloat64Bound = 1e-5;
  // Each residual add read by a folded norm becomes one foldnorm::add_rms_norm with it (exact:
  // bitwise equal to add + rms_norm), in the saved model and in both verification runs.
  bool fuseAddNorm = true;
  ProgressFn progress;
};

/// Max errors of one model output, over all verification runs, in one comparison:
///   "float32"        original vs folded, both in the model's dtype (what a user runs; the name
///                    stays "float32" for a 16-bit model too, Verification::modelDtype says which)
///   "float64"        original vs the plan, both in float64 (centering not rounded): the verdict
///   "saved-float64"  original vs the saved file (float32 weights, rounded after centering),
///                    both run in float64 arithmetic
struct OutputCheck {
  std::string dtype;
  std::size_t output = 0;   // index in the flattened outputs
  std::string shape;
  double maxAbs = 0;
  double maxRel = 0;        // max |folded - original| / max |original|, per run, worst run
  bool hasPredictions = false;
  double argmaxAgreement = 1;  // fraction of rows whose argmax over the last axis is unchanged
  int64_t rows = 0;            // rows (all but the last axis) over all runs; with predictions
  int64_t flippedRows = 0;     // float32 only: rows whose argmax differs
  int64_t unexplainedFlips = 0;  // of those, flips whose margin exceeds the row's error bound
};

/// One row whose float32 argmax flipped. Within float32 rounding when margin <= errorBound:
///   margin     = top-2 margin of the original's row in float64 (z),
///   errorBound = 2 (|a - z| + |b - s| + min(|s - z|, savedFloat64Bound * max|z|)), each a max
///                over the row, with a, b the original and folded float32 rows and s the saved
///                file's row in float64. A flip whose only cause is float32 rounding (of the
///                arithmetic, or of the centered weights within the stated bound) always meets it.
struct PredictionFlip {
  std::size_t output = 0;
  int run = 0;       // input set (0: the example inputs)
  int64_t row = 0;   // row index within that run's output, all but the last axis flattened
  double margin = 0;
  double errorBound = 0;
  bool withinRounding() const { return margin <= errorBound; }
};

struct Verification {
  bool ran = false;
  int runs = 0;                     // input sets
  std::vector<OutputCheck> checks;
  bool float64Equivalent = true;    // every float64 output within float64Tolerance
  bool predictionsUnchanged = true;
  double worstRelative64 = 0;       // the plan in float64: the pass/fail figure
  double worstRelative32 = 0;
  double worstRelativeSaved64 = 0;  // the saved float32 file run in float64
  double savedFloat64Bound = 0;     // the bound it is compared with (savedBoundFor(FoldOptions'))
  /// The dtype the centered parameters are saved in, the coarsest of the plan's ("float32" where
  /// the plan centers none): the model's own dtype, in which the "float32" comparison runs.
  std::string modelDtype = "float32";
  bool savedWithinBound = true;
  int64_t predictionRows = 0;       // rows of outputs with predictions, all runs
  int64_t flippedRows = 0;
  int64_t unexplainedFlips = 0;     // > 0: a flip float32 rounding cannot explain (a bug)
  std::vector<PredictionFlip> worstFlips;  // at most kWorstFlips, largest margin/errorBound first
  std::string device;
  /// The fold is right: float64 equivalent and every flip within float32 rounding.
  bool passed() const { return float64Equivalent && unexplainedFlips == 0; }
};

inline constexpr std::size_t kWorstFlips = 5;

/// The written file loaded back as a user loads it and run (saveFolded, saveFoldedExport): what
/// torch.jit.load / torch.export.load gets is what was verified. A file that does not load, whose
/// tensors are not the verified fold's bits, or whose own forward computes something else, is
/// removed and refused (foldnorm::Error, one line naming the loader's reason).
struct SavedFileCheck {
  bool ran = false;             // false: the fold was saved unverified (nothing to compare with)
  std::string loader;           // "torch::jit::load" | "the .pt2 reader"
  int runs = 0;                 // input sets (the verification's)
  int64_t tensors = 0;          // tensors of the file compared bit for bit with the verified fold's
  /// The reloaded file's own forward (its code as the loader compiled it) against the verified
  /// folded model, in the model's dtype: the same weights and ops, so rounding-level at most.
  double worstRelative32 = 0;
  double tolerance32 = 0;       // above it the file is refused
  /// The reloaded file run in float64 against the original in float64 (the report's "saved file
  /// in float64", now measured on the file itself).
  double worstRelativeSaved64 = 0;
};

struct FoldReport {
  std::string input;
  std::vector<std::string> folded;     // LN module paths replaced by RMSNorm
  std::vector<std::string> kept;       // LN module paths left as LayerNorm, with reasons
  std::vector<std::string> keptReasons;
  std::vector<std::string> centered;   // parameter paths changed
  std::vector<std::string> untied;     // parameter paths copied for the centered side
  std::vector<std::string> inserted;   // inserted centerings, described (docs/method.md section 8)
  int64_t untieBytes = 0;
  int fusedAddNorms = 0;               // aten::add + rms_norm pairs now one foldnorm::add_rms_norm
  RmsOp rmsOp = RmsOp::Foldnorm;       // what the folded LNs became (both kinds: .pt and .pt2)
  /// The device the input's constants named, and the one the saved fold's constants name (the
  /// CPU, where foldnorm runs a model: a GPU trace is retargeted; the report says so).
  std::string tracedDevice = "cpu";
  std::string savedDevice = "cpu";
  Verification verification;
  SavedFileCheck savedFile;            // set by the caller from saveFolded's result (not embedded in the file)
};

struct TorchModel;
/// What a verification ran, kept for the check of the written file: the input sets, the folded
/// model's outputs in its dtype and the original's in float64, per set (defined in fold_support.h).
struct VerificationRuns;
struct FoldedModel {
  std::shared_ptr<TorchModel> torch;  // the folded module and its forward graph
  FoldReport report;
  std::shared_ptr<const VerificationRuns> runs;  // null unless verified
};

/// Applies `analysis` (made on `model.graph`) to a fresh copy of the model; never modifies
/// `model`. Verifies unless options.verify is false.
FoldedModel foldModel(const ImportedModel& model, const AnalysisResult& analysis,
                      const FoldOptions& options = {});

/// Verifies `folded` (made from `model` by `analysis`) again: what foldModel does when
/// options.verify is set. Exposed so a fold changed after the fact can be checked.
Verification verifyFold(const ImportedModel& model, const AnalysisResult& analysis, const FoldedModel& folded,
                        const FoldOptions& options = {});

/// Writes the folded module to `outPath` atomically (temporary file + rename) with the input
/// spec and the fold report embedded. A verified fold's file is loaded back with
/// torch::jit::load before the rename and checked (SavedFileCheck): its tensors bit for bit,
/// its own forward in the model's dtype, and in float64 against the original. Throws
/// foldnorm::Error (the output removed, the input untouched) when `outPath` is the input, cannot
/// be written, or the written file fails that check.
SavedFileCheck saveFolded(const FoldedModel& folded, const ImportedModel& original, const std::string& outPath);

/// Checks `outPath` before any work is done (same file as input, directory not writable).
void checkOutputPath(const std::string& inputPath, const std::string& outPath);

/// Refuses (foldnorm::Error, one line) an output whose ending does not match the kind of fold: a
/// .pt2 import folds into a .pt2 (torch.export.load warns on another ending, and foldnorm reads a
/// file by its .pt2 ending as torch.export), a TorchScript import into anything but a .pt2 (a
/// TorchScript file named .pt2 would be read back as a torch.export archive and refused).
/// (Defined with the model handle, src/fold/model.cpp.)
void checkFoldedOutputKind(const ImportedModel& model, const std::string& outPath);


nlohmann::json toJson(const FoldReport& report);
std::string toText(const FoldReport& report);
/// The verdict lines of a verification (float64, the saved file in float64, float32, prediction
/// flips), no newlines: the end of toText's report, and what the GUI's Fold panel lists.
std::vector<std::string> verificationSummary(const Verification& v);

inline constexpr const char* kFoldReportExtraFile = "foldnorm_fold_report.json";

}  // namespace foldnorm
