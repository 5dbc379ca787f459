// The fold: orchestration and the atomic save (see include/foldnorm/fold/fold.h; the pieces are
// listed in fold_internal.h).
#include "foldnorm/fold/fold.h"

#include <torch/csrc/jit/serialization/import.h>
#include <unistd.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "foldnorm/common/error.h"
#include "foldnorm/torch/model_surgery.h"
#include "fold_internal.h"

namespace foldnorm {

using fold_detail::strf;
namespace jit = torch::jit;

namespace {

/// The floating dtype every planned tensor has, if they share one.
std::optional<at::ScalarType> plannedDtype(const std::vector<at::Tensor>& planned) {
  std::optional<at::ScalarType> dtype;
  for (const auto& t : planned) {
    if (!t.defined() || !t.is_floating_point() || (dtype && *dtype != t.scalar_type())) return std::nullopt;
    dtype = t.scalar_type();
  }
  return dtype;
}

}  // namespace

FoldedModel foldModel(const ImportedModel& model, const AnalysisResult& analysis, const FoldOptions& options) {
  if (!model.torch)
    throw Error("'" + model.path + "' is a torch.export archive (.pt2): it is folded by foldExport (fold_export.h)");
  auto progress = [&](const std::string& m) { if (options.progress) options.progress(m); };
  progress("copying the model");
  // A clone with its own types and objects that shares every tensor with the original except
  // the planned ones, which get copies of their own (centering writes into them): a fold needs
  // the model's bytes once more only for what it changes. The clone's forward is the original's
  // graph copied, so inlined in place it has the node order the importer walked (tablesFor checks).
  // So the folded model's unplanned tensors ARE the original's: replace them, never write into them.
  std::vector<at::Tensor> planned;
  for (const auto& plan : analysis.plan) planned.push_back(model.torch->parameterTensors.at(plan.param));
  // Verified on the CPU, the fold is made in float64 and is itself the float64 plan the check
  // needs; rounded to the model's dtype after the check, it is the float32 fold (centeredCopy
  // computes in float64 and rounds once, so the bits are those a float32 fold writes). One copy
  // of the planned tensors in float64 instead of that copy plus one in float32: about half the
  // model less at the peak. Needs one dtype for all planned tensors (what they round back to).
  const auto dtype = plannedDtype(planned);
  const bool held64 = options.verify && options.device != "cuda" && dtype;
  auto m = cloneSharing(model.torch->module, planned, {held64 ? std::optional(at::kDouble) : std::nullopt, c10::kCPU});
  auto graph = inlineForwardInPlace(m);
  FoldedModel result;
  result.report.input = model.path;
  progress(strf("centering %zu parameter(s), replacing %zu LayerNorm(s)", analysis.plan.size(),
                analysis.foldableCount()));
  fold_detail::applyPlan(m, graph, model, analysis, options, &result.report);
  shareUnchanged(m, model.torch->module);
  if (held64) {
    // The fold's own tensors: the planned copies and what the plan registered (untied copies).
    ReadRounding own{tensorStorages(m), *dtype};
    for (const auto* shared : tensorStorages(model.torch->module)) own.storages.erase(shared);
    result.report.verification = fold_detail::verify(model, analysis, m, graph, options, &own);
    progress(strf("rounding the fold's %zu own tensor(s) to %s", own.storages.size(), dtypeName(*dtype).c_str()));
    if (*dtype != at::kDouble) retargetStorages(m, own.storages, {*dtype, c10::kCPU});
  }
  auto tm = std::make_shared<TorchModel>();
  tm->module = m;
  tm->graph = graph;
  tm->exampleInputs = model.torch->exampleInputs;
  result.torch = tm;
  if (options.verify && !held64)
    result.report.verification = fold_detail::verify(model, analysis, m, graph, options);
  return result;
}

Verification verifyFold(const ImportedModel& model, const AnalysisResult& analysis, const FoldedModel& folded,
                        const FoldOptions& options) {
  return fold_detail::verify(model, analysis, folded.torch->module, folded.torch->graph, options);
}

void checkOutputPath(const std::string& inputPath, const std::string& outPath) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (outPath.empty()) throw Error("no output path (-o OUT.pt)");
  if (fs::exists(outPath, ec) && fs::exists(inputPath, ec) && fs::equivalent(inputPath, outPath, ec))
    throw Error("refusing to overwrite the input model '" + inputPath + "': choose another -o");
  if (fs::weakly_canonical(inputPath, ec) == fs::weakly_canonical(outPath, ec))
    throw Error("refusing to overwrite the input model '" + inputPath + "': choose another -o");
  auto dir = fs::path(outPath).parent_path();
  if (dir.empty()) dir = ".";
  if (!fs::is_directory(dir, ec)) throw Error("output directory '" + dir.string() + "' does not exist");
  if (::access(dir.c_str(), W_OK) != 0) throw Error("output directory '" + dir.string() + "' is not writable");
  if (fs::is_directory(outPath, ec)) throw Error("output path '" + outPath + "' is a directory");
}

void saveFolded(const FoldedModel& folded, const ImportedModel& original, const std::string& outPath) {
  namespace fs = std::filesystem;
  checkOutputPath(original.path, outPath);
  jit::ExtraFilesMap extra;
  extra[kInputSpecExtraFile] = inputSpecsToJson(original.inputSpecs);
  extra[kFoldReportExtraFile] = toJson(folded.report).dump(2);
  auto tmp = outPath + ".tmp-" + std::to_string(::getpid());
  try {
    folded.torch->module.save(tmp, extra);
  } catch (const c10::Error& e) {
    std::error_code ec;
    fs::remove(tmp, ec);
    throw Error("cannot write '" + outPath + "': " + e.what_without_backtrace());
  }
  std::error_code ec;
  fs::rename(tmp, outPath, ec);
  if (ec) {
    fs::remove(tmp, ec);
    throw Error("cannot move the output into place at '" + outPath + "': " + ec.message());
  }
}

}  // namespace foldnorm
