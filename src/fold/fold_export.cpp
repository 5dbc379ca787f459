// The .pt2 fold: orchestration and verification (see fold/fold_export.h; the steps are listed in
// export_internal.h).
#include "foldnorm/fold/fold_export.h"

#include <ATen/ATen.h>

#include <unordered_map>

#include "export_internal.h"
#include "foldnorm/common/setting_error.h"
#include "foldnorm/fold/fold_support.h"
#include "foldnorm/import/export.h"
#include "foldnorm/import/export_archive.h"
#include "foldnorm/torch/export_interpreter.h"

namespace foldnorm {

using nlohmann::json;
using export_fold::State;

namespace {

/// `state` with every floating tensor in `dtype`; names sharing a storage share the new one
/// (same views), so ties and in-place centering behave as in the original.
State castState(const State& state, at::ScalarType dtype) {
  std::unordered_map<const at::StorageImpl*, at::Tensor> bases;
  State out;
  for (const auto& [name, t] : state) {
    if (!t.is_floating_point()) {
      out[name] = t;
      continue;
    }
    auto& base = bases[export_fold::storageOf(t)];
    if (!base.defined()) base = export_fold::flatStorage(t).to(dtype);
    out[name] = base.as_strided(t.sizes(), t.strides(), t.storage_offset());
  }
  return out;
}

struct PlanResult {
  json program;
  State state;
  std::map<std::string, std::string> added;
};

/// The plan on a copy of the program and of `state` (whose dtype decides the centered dtype),
/// in the order of the TorchScript fold (apply_plan.cpp): centering and untie, inserted
/// centerings (before the LN rewrite, which replaces nodes an insertion may follow), the LN
/// rewrite, the fusion of our op (the portable aten form stays unfused).
PlanResult applyPlan(const ImportedModel& model, const json& program, const State& state,
                     const AnalysisResult& analysis, const FoldOptions& options, ExportRmsOp rmsOp,
                     FoldReport* report) {
  export_fold::ProgramEdit edit(model, program, state);
  export_fold::centerParameters(edit, analysis, report);
  export_fold::insertCenterings(edit, analysis, report);
  export_fold::replaceLayerNorms(edit, analysis, rmsOp, report);
  if (options.fuseAddNorm && rmsOp == ExportRmsOp::Foldnorm) export_fold::fuseAddNorms(edit, report);
  edit.splice();
  return {std::move(edit.program), std::move(edit.state), std::move(edit.added)};
}

Verification verify(const ImportedModel& model, const ExportArchive& archive, const AnalysisResult& analysis,
                    const FoldedExport& folded, const State& state, const FoldOptions& options, ExportRmsOp rmsOp) {
  auto setup = startVerification(model, archive.hasExampleInputs ? &archive.exampleInputs : nullptr, options);
  auto& v = setup.verification;
  const auto& sets = setup.inputSets;
  auto progress = [&](const std::string& m) { if (options.progress) options.progress(m); };

  ExportInterpreter original32(archive.program, state, {std::nullopt, setup.device});
  ExportInterpreter folded32(folded.program, folded.state, {std::nullopt, setup.device});
  for (std::size_t r = 0; r < sets.size(); ++r) {
    progress("verifying in the model's dtype: input set " + std::to_string(r + 1) + "/" + std::to_string(sets.size()));
    compareOutputs(original32.run(sets[r]), folded32.run(sets[r]), "float32", v.checks);
  }
  // float64: the plan applied to float64 state, so the centering is never rounded to float32.
  progress("verifying in float64 (copies of both programs)");
  auto state64 = castState(state, at::kDouble);
  auto plan64 = applyPlan(model, archive.program, state64, analysis, options, rmsOp, nullptr);
  ExportInterpreter original64(archive.program, state64, {at::kDouble, setup.device});
  ExportInterpreter folded64(plan64.program, plan64.state, {at::kDouble, setup.device});
  for (std::size_t r = 0; r < sets.size(); ++r) {
    progress("verifying in float64: input set " + std::to_string(r + 1) + "/" + std::to_string(sets.size()));
    compareOutputs(original64.run(sets[r]), folded64.run(sets[r]), "float64", v.checks);
  }
  summarizeChecks(v, options.float64Tolerance, options.savedFloat64Bound);
  return setup.verification;
}

}  // namespace

ExportRmsOp exportRmsOpFromName(const std::string& name) {
  if (name == "aten") return ExportRmsOp::Aten;
  if (name == "foldnorm") return ExportRmsOp::Foldnorm;
  throw SettingError("rms_op", "unknown RMSNorm op '" + name + "' for a .pt2 fold (aten | foldnorm)");
}

FoldedExport foldExport(const ImportedModel& model, const AnalysisResult& analysis, const FoldOptions& options,
                        ExportRmsOp rmsOp) {
  if (!model.exported || !model.exported->archive) throw std::logic_error("fold: the model is not a .pt2 import");
  const auto& archive = *model.exported->archive;
  State state;
  for (const auto& t : archive.tensors) state[t.name] = t.tensor;
  if (options.progress)
    options.progress("centering " + std::to_string(analysis.plan.size()) + " parameter(s), replacing " +
                     std::to_string(analysis.foldableCount()) + " LayerNorm(s)");
  FoldedExport folded;
  folded.report.input = model.path;
  auto r = applyPlan(model, archive.program, state, analysis, options, rmsOp, &folded.report);
  folded.program = std::move(r.program);
  folded.state = std::move(r.state);
  folded.added = std::move(r.added);
  if (options.verify) folded.report.verification = verify(model, archive, analysis, folded, state, options, rmsOp);
  return folded;
}

}  // namespace foldnorm
