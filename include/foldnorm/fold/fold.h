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

struct FoldOptions {
  bool verify = true;
  RmsOp rmsOp = RmsOp::Foldnorm;
  int randomInputs = 3;          // extra input sets drawn from the spec (besides the example)
  std::string device = "cpu";    // where verification runs: cpu | cuda
  uint64_t seed = 0;
  double float64Tolerance = 1e-9;  // relative; above it the fold is a bug
  ProgressFn progress;
};

/// Max errors of one model output, over all verification runs, in one dtype.
struct OutputCheck {
  std::string dtype;        // "float32" | "float64"
  std::size_t output = 0;   // index in the flattened outputs
  std::string shape;
  double maxAbs = 0;
  double maxRel = 0;        // max |folded - original| / max |original|, per run, worst run
  bool hasPredictions = false;
  double argmaxAgreement = 1;  // fraction of rows whose argmax over the last axis is unchanged
};

struct Verification {
  bool ran = false;
  int runs = 0;                     // input sets
  std::vector<OutputCheck> checks;
  bool float64Equivalent = true;    // every float64 output within float64Tolerance
  bool predictionsUnchanged = true;
  double worstRelative64 = 0;
  double worstRelative32 = 0;
  std::string device;
};

struct FoldReport {
  std::string input;
  std::vector<std::string> folded;     // LN module paths replaced by RMSNorm
  std::vector<std::string> kept;       // LN module paths left as LayerNorm, with reasons
  std::vector<std::string> keptReasons;
  std::vector<std::string> centered;   // parameter paths changed
  std::vector<std::string> untied;     // parameter paths copied for the centered side
  int64_t untieBytes = 0;
  Verification verification;
};

struct TorchModel;
struct FoldedModel {
  std::shared_ptr<TorchModel> torch;  // the folded module and its forward graph
  FoldReport report;
};

/// Applies `analysis` (made on `model.graph`) to a fresh copy of the model; never modifies
/// `model`. Verifies unless options.verify is false.
FoldedModel foldModel(const ImportedModel& model, const AnalysisResult& analysis,
                      const FoldOptions& options = {});

/// Writes the folded module to `outPath` atomically (temporary file + rename) with the input
/// spec and the fold report embedded. Throws foldnorm::Error when `outPath` is the input or
/// cannot be written.
void saveFolded(const FoldedModel& folded, const ImportedModel& original, const std::string& outPath);

/// Checks `outPath` before any work is done (same file as input, directory not writable).
void checkOutputPath(const std::string& inputPath, const std::string& outPath);

nlohmann::json toJson(const FoldReport& report);
std::string toText(const FoldReport& report);

inline constexpr const char* kFoldReportExtraFile = "foldnorm_fold_report.json";

}  // namespace foldnorm
