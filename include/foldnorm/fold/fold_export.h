// The fold for torch.export programs (.pt2): the same plan the TorchScript fold executes, applied
// to the archive's program JSON and its tensors, written back as an archive torch.export.load
// accepts.
//
//   Before (program JSON)                         After
//   linear(x, p_fc_weight, p_fc_bias)             linear(x, p_fc_weight, p_fc_bias)  (centered data)
//   layer_norm(h, [C], p_w, p_b, eps)             rms_norm(h, [C], p_w, eps) -> add.Tensor(., p_b)
//                                                 or foldnorm::rms_norm(h, [C], p_w, p_b, eps)
//
// Centering is done in float64 and cast back (ParameterPlan's actions, in order; a scaled one
// reads its scale by FQN from the archive). Ties, as the plan says: in place (every name of the
// storage is centered), own name (this FQN gets its own storage), or redirected reads (a new
// parameter `foldnorm_centered_<fqn>` with its own graph input and signature entry; the covered
// reads use it, one inside a wrap_with_set_grad_enabled subgraph through a new operand and
// subgraph input). Each inserted centering (AnalysisResult::insertions) is aten.mean.dim(x,
// axes, True) + aten.sub.Tensor after x's producer, every later reader of x reading the result.
// With foldnorm::rms_norm and options.fuseAddNorm, each residual aten.add.Tensor read by a
// folded norm becomes one foldnorm::add_rms_norm (two outputs) where that is exact
// (src/fold/export_fuse.cpp). A native_layer_norm is replaced only when its mean and rstd
// outputs have no users. Every new value gets a tensor_values entry, every name is unique,
// outputs and every untouched field stay as read; a changed tensor keeps its recorded device.
//
// Verification runs original and folded programs through the interpreter (torch/
// export_interpreter.h) on the example inputs and random inputs from the spec, with the
// FoldReport/Verification of the TorchScript fold: float32 (original vs folded), float64 (the
// plan applied to float64 state, nothing rounded to float32: the verdict), saved-float64 (the
// folded float32 state, the tensors saveFoldedExport writes, run in float64) and the prediction
// flips of float32 outputs, each classed as within float32 rounding or not.
#pragma once

#include <ATen/core/Tensor.h>

#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "foldnorm/fold/fold.h"

namespace foldnorm {

struct FoldedExport {
  nlohmann::json program;                    // the edited ExportedProgram
  std::map<std::string, at::Tensor> state;   // every weight and constant by name, after the fold
  std::map<std::string, std::string> added;  // names the fold added -> parameter | buffer | constant
  FoldReport report;
  std::shared_ptr<const VerificationRuns> runs;  // null unless verified (fold.h)
};

/// Applies `analysis` (made on `model.graph`, a model importExport read) to copies of the
/// archive's program and tensors; `model` is not modified. Verifies unless options.verify is
/// false. What a foldable LayerNorm becomes is options.rmsOp (unset: aten.rms_norm.default, plus
/// aten.add.Tensor for a bias, which torch.export.load reads with torch alone; foldnorm::rms_norm
/// needs libfoldnorm_ops loaded first). Throws std::logic_error when `model` is not a .pt2 import.
/// Callers that hold a model of either format use Model::fold (fold/model.h).
FoldedExport foldExport(const ImportedModel& model, const AnalysisResult& analysis, const FoldOptions& options = {});

/// Verifies `folded` (made from `model` by `analysis` with `options`) again: what foldExport does
/// when options.verify is set, on folded.program and folded.state as they are now. Exposed so a
/// fold changed after the fact can be checked (the tests perturb the saved state).
Verification verifyExportFold(const ImportedModel& model, const AnalysisResult& analysis, const FoldedExport& folded,
                              const FoldOptions& options = {});

/// Writes the folded archive to `outPath` atomically (a temporary file in the output's
/// directory, then a rename): every record of `original` that the fold did not change is copied
/// byte for byte; changed tensors get new storage records and config entries. The fold report
/// is stored as extra/foldnorm_fold_report.json. A verified fold's archive is read back by the
/// .pt2 reader before the rename and checked as saveFolded checks a TorchScript file (its
/// tensors bit for bit, its program run by the interpreter in the model's dtype and in
/// float64). Throws foldnorm::Error (the output removed) when `outPath` is the input, cannot be
/// written, or the written archive fails that check.
SavedFileCheck saveFoldedExport(const FoldedExport& folded, const ImportedModel& original, const std::string& outPath);

}  // namespace foldnorm
