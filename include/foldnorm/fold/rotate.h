// Rotation-ready models (issue 30; docs/method.md section 10): after the fold, each folded norm is
// RMSNorm(x) * g + b. Two exact steps on the folded TorchScript module:
//
//   absorb   Before: n = rms_norm(x, g, b);  y = W n + c          (every reader linear in n)
//            After:  r = rms_norm(x);        y = (W diag(g)) r + (c + W b)
//   rotate   Before: stream h written by E, P, W_o (+ b_o), read by rms_norm and by W_r
//            After:  h' = Q h: writers' output fibers times Q (E Q^T, Q W_o, Q b_o), readers'
//                    input fibers times Q (W_r Q^T), every norm of the stream weightless
//
// Requirements: absorb, per norm: every reader of its output (through views and reshapes that
// keep the last axis, and eval dropout) is aten::linear, aten::addmm (GPT-2's Conv1D) or
// aten::matmul with a parameter; otherwise the norm keeps its affine and the reader is named.
// Rotate, per stream (the values joined by residual adds around weightless norms): every writer
// an embedding, a parameter (a position table), a linear, addmm or a convolution through layout
// ops, every reader a weightless norm or a linear map; where another op writes or reads it, a
// rotation is inserted as an op (Q after a writer, Q^T before a reader; RotateOptions::
// insertRotations, else the stream is refused with the reason). A stream a LayerNorm the fold
// kept reads, or that no linear map reads, is refused. Arithmetic in float64, one rounding to the model's dtype per tensor; a tensor
// read by readers that need different edits (a tied LM head) is untied: the other reads get an
// attribute of their own on the root module (foldnorm_rotated_<path>).
#pragma once

#include <ATen/core/Tensor.h>
#include <nlohmann/json_fwd.hpp>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "foldnorm/fold/fold.h"

namespace foldnorm {

enum class RotationKind { Hadamard, Random };
const char* toString(RotationKind kind);

/// The orthogonal matrix of a stream of `width` channels, float64 [width, width], rows the new
/// channels: Hadamard: H diag(s) / sqrt(width), H a Hadamard matrix of order `width` (Sylvester
/// 2^k, or Paley's construction of order q + 1 for a prime q = 3 mod 4, times 2^k: 12, 20, 24,
/// 44, 48, 60, 68, 72, 80, 84, ... times powers of two), s random signs; Random: the Q of a QR of
/// a Gaussian matrix, signs fixed by R's diagonal. Seeded. `kindUsed` says which it built: a
/// Hadamard asked for a width without a construction falls back to Random.
at::Tensor rotationMatrix(int64_t width, RotationKind kind, uint64_t seed, RotationKind* kindUsed = nullptr);

/// The Hadamard order of `width` (true when one is built: hadamardFactor gives the Paley order).
bool hasHadamard(int64_t width);

struct RotateOptions {
  bool rotate = true;                   // false: absorb only (foldnorm fold --absorb-affine)
  RotationKind kind = RotationKind::Hadamard;
  uint64_t seed = 0;
  int randomInputs = 1;                 // input sets besides the example inputs
  /// Where a non-linear op writes or reads a stream (a GELU stem, a norm keeping its affine, the
  /// model's output), insert Q (after the writer) or Q^T (before the reader) as an op instead of
  /// refusing the stream: exact, one [width x width] product per token there.
  bool insertRotations = true;
  double float64Tolerance = 1e-12;      // relative, the rotated plan in float64 against the original
  ProgressFn progress;
  /// Test-only: leave the `skipReader`-th reader unrotated, or the `dropBias`-th bias edit out
  /// (counted over all streams and norms; -1 = none). Verification must then fail.
  int skipReader = -1;
  int dropBias = -1;
  int skipInserted = -1;                // leave the `skipInserted`-th inserted rotation out
};

/// What became of one folded norm's affine.
struct AbsorbVerdict {
  std::string norm;                     // module path (the fold report's name)
  bool absorbed = false;
  std::vector<std::string> readers;     // absorbed: the parameters that took g and b
  std::string reason;                   // refused: the reader that is not linear, and where
};

/// What became of one residual stream.
struct StreamVerdict {
  int64_t width = 0;
  bool rotated = false;
  std::string rotation;                 // "hadamard" | "random" (what was built)
  uint64_t seed = 0;
  int norms = 0, writers = 0, readers = 0;
  std::vector<std::string> writerNames, readerNames;
  /// Rotations inserted as ops where a non-linear op writes the stream ("after aten::gelu
  /// (model.py:3)": Q) or reads it ("before the model's output": Q^T, the stream as it was).
  std::vector<std::string> inserted;
  std::string reason;                   // refused: why
};

struct RotateReport {
  std::vector<AbsorbVerdict> absorbed;
  std::vector<StreamVerdict> streams;
  std::vector<std::string> untied;      // tensors whose reads now differ: attributes of their own
  /// Float64: original vs the fold + absorb + rotation made in float64 (nothing rounded).
  double worstRelative64 = 0;
  /// The model in its dtype (rounded) run in float64 against the original in float64, and in its
  /// dtype against the original in its dtype.
  double worstRelativeSaved64 = 0, worstRelative32 = 0;
  int runs = 0;
  bool passed = false;                  // worstRelative64 within the tolerance
  double tolerance = 0;
};

struct RotatedModel {
  FoldedModel folded;                   // the fold (its report and verification) + the stage
  RotateReport report;
  std::shared_ptr<const VerificationRuns> runs;
};

/// Folds `model` as `analysis` says (with foldOptions; add+norm fusion is off: the stage reads
/// plain norms), then absorbs and (options.rotate) rotates, and verifies in float64 against the
/// original. Never modifies `model`. Throws foldnorm::Error when the fold itself fails.
RotatedModel rotateModel(const ImportedModel& model, const AnalysisResult& analysis, FoldOptions foldOptions,
                         const RotateOptions& options);

/// Writes the rotated model atomically, loads it back and runs it against the verified model
/// (its tensors, its forward); refused (nothing at outPath) when the check fails or the float64
/// verification did not pass. Returns the reloaded file's relative error in float64 against the
/// original in float64 (its weights rounded to the model's dtype).
double saveRotated(const RotatedModel& rotated, const ImportedModel& original, const std::string& outPath);

nlohmann::json toJson(const RotateReport& report);
std::string toText(const RotateReport& report);

inline constexpr const char* kRotateReportExtraFile = "foldnorm_rotate_report.json";

}  // namespace foldnorm
