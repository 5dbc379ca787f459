// The .pt2 fold: orchestration and verification (see fold/fold_export.h; the steps are listed in
// export_internal.h).
#include "foldnorm/fold/fold_export.h"

#include <ATen/ATen.h>

#include <unordered_map>

#include "export_internal.h"
#include "fold_internal.h"
#include "foldnorm/common/error.h"
#include "foldnorm/common/memory.h"
#include "foldnorm/common/setting_error.h"
#include "foldnorm/fold/fold_support.h"
#include "foldnorm/fold/model.h"
#include "foldnorm/import/export.h"
#include "foldnorm/import/export_archive.h"
#include "foldnorm/interpreter/export_interpreter.h"

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
                     const AnalysisResult& analysis, const FoldOptions& options, FoldReport* report) {
  export_fold::ProgramEdit edit(model, program, state);
  export_fold::centerParameters(edit, analysis, report);
  export_fold::insertCenterings(edit, analysis, report);
  const RmsOp rmsOp = rmsOpFor(model, options);
  export_fold::replaceLayerNorms(edit, analysis, rmsOp, report);
  if (options.fuseAddNorm && rmsOp == RmsOp::Foldnorm) export_fold::fuseAddNorms(edit, report);
  edit.splice();
  return {std::move(edit.program), std::move(edit.state), std::move(edit.added)};
}

State archiveState(const ExportArchive& archive) {
  State state;
  for (const auto& t : archive.tensors) state[t.name] = t.tensor;
  return state;
}

/// The comparisons of the TorchScript fold (fold_detail::verify), one model at a time so at most
/// two float64 copies of the weights live at once: float32 (original vs folded), float64 (the
/// original vs the plan on float64 state), saved-float64 (the original vs folded.state, the
/// float32 tensors the archive gets, run in float64), then the flips of each float32 output.
Verification verify(const ImportedModel& model, const ExportArchive& archive, const AnalysisResult& analysis,
                    const FoldedExport& folded, const FoldOptions& options,
                    VerificationRuns* keep = nullptr) {
  auto setup = startVerification(model, analysis, archive.hasExampleInputs ? &archive.exampleInputs : nullptr, options);
  auto& v = setup.verification;
  const auto& sets = setup.inputSets;
  const std::size_t n = sets.size();
  auto progress = [&](const std::string& m) { if (options.progress) options.progress(m); };
  auto step = [&](const char* what, std::size_t r) {
    releaseFreedHeap();  // the last run's freed values are not kept under the next (common/memory.h)
    progress(std::string("verifying ") + what + ": input set " + std::to_string(r + 1) + "/" + std::to_string(n));
  };
  const State state = archiveState(archive);
  std::vector<std::vector<at::Tensor>> a(n), b(n), z(n);  // original32, folded32, original64 outputs
  {
    ExportInterpreter original32(archive.program, state, {std::nullopt, setup.device});
    ExportInterpreter folded32(folded.program, folded.state, {std::nullopt, setup.device});
    for (std::size_t r = 0; r < n; ++r) {
      step("in the model's dtype", r);
      a[r] = original32.run(sets[r]);
      b[r] = folded32.run(sets[r]);
      compareOutputs(a[r], b[r], "float32", v.checks);
    }
  }
  {
    // float64: the plan applied to float64 state, so the centering is never rounded to float32.
    progress("verifying in float64 (copies of both programs)");
    auto state64 = castState(state, at::kDouble);
    ExportInterpreter original64(archive.program, state64, {at::kDouble, setup.device});
    auto plan64 = applyPlan(model, archive.program, state64, analysis, options, nullptr);
    ExportInterpreter folded64(plan64.program, plan64.state, {at::kDouble, setup.device});
    for (std::size_t r = 0; r < n; ++r) {
      step("in float64", r);
      z[r] = original64.run(sets[r]);
      compareOutputs(z[r], folded64.run(sets[r]), "float64", v.checks);
    }
  }
  // The saved file in float64: what a user who checks the written .pt2 in float64 sees.
  ExportInterpreter saved64(folded.program, folded.state, {at::kDouble, setup.device});
  for (std::size_t r = 0; r < n; ++r) {
    step("the saved file in float64", r);
    auto s = saved64.run(sets[r]);
    compareOutputs(z[r], s, "saved-float64", v.checks);
    fold_detail::checkPredictions(static_cast<int>(r), a[r], b[r], z[r], s, v.savedFloat64Bound, v.checks,
                                  v.worstFlips);
  }
  fold_detail::keepWorst(v.worstFlips, kWorstFlips);
  summarizeChecks(v, options.float64Tolerance, v.savedFloat64Bound);
  if (keep) {
    auto cpu = [](std::vector<std::vector<at::Tensor>>& sets) {
      for (auto& outs : sets)
        for (auto& t : outs) t = t.detach().to(at::kCPU);
      return std::move(sets);
    };
    keep->device = setup.device;
    keep->inputSets = sets;
    keep->folded = cpu(b);
    keep->original64 = cpu(z);
    keep->tolerance = savedBoundFor(1e-5, v.modelDtype);
    keep->progress = options.progress;
  }
  return setup.verification;
}

}  // namespace

FoldedExport foldExport(const ImportedModel& model, const AnalysisResult& analysis, const FoldOptions& options) {
  if (!model.exported || !model.exported->archive) throw std::logic_error("fold: the model is not a .pt2 import");
  const auto& archive = *model.exported->archive;
  const State state = archiveState(archive);
  if (options.progress)
    options.progress("centering " + std::to_string(analysis.plan.size()) + " parameter(s), replacing " +
                     std::to_string(analysis.foldableCount()) + " LayerNorm(s)");
  FoldedExport folded;
  folded.report.input = model.path;
  folded.report.rmsOp = rmsOpFor(model, options);
  // The interpreter runs the program wherever it is asked; the written program keeps the devices
  // its file named (a GPU export stays one).
  folded.report.tracedDevice = folded.report.savedDevice = namedDevice(archive);
  auto r = applyPlan(model, archive.program, state, analysis, options, &folded.report);
  folded.program = std::move(r.program);
  folded.state = std::move(r.state);
  folded.added = std::move(r.added);
  if (options.verify) {
    auto runs = std::make_shared<VerificationRuns>();
    folded.report.verification = verify(model, archive, analysis, folded, options, runs.get());
    folded.runs = runs;
  }
  return folded;
}

Verification verifyExportFold(const ImportedModel& model, const AnalysisResult& analysis, const FoldedExport& folded,
                              const FoldOptions& options) {
  if (!model.exported || !model.exported->archive) throw std::logic_error("fold: the model is not a .pt2 import");
  return verify(model, *model.exported->archive, analysis, folded, options);
}

}  // namespace foldnorm
