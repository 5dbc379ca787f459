// The fold: orchestration and the atomic save (see include/foldnorm/fold/fold.h; the pieces are
// listed in fold_internal.h).
#include "foldnorm/fold/fold.h"

#include <torch/csrc/jit/serialization/import.h>
#include <unistd.h>

#include <filesystem>
#include <set>
#include <nlohmann/json.hpp>

#include "foldnorm/common/error.h"
#include "foldnorm/common/memory.h"
#include "foldnorm/common/write_file.h"
#include "foldnorm/fold/fold_support.h"
#include "foldnorm/torch/model_surgery.h"
#include "fold_internal.h"

namespace foldnorm {

using fold_detail::strf;
namespace jit = torch::jit;

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
  auto m = cloneSharing(model.torch->module, planned, {std::nullopt, c10::kCPU});
  // Every method names the CPU, where the fold runs and verifies (a GPU trace names cuda:N).
  if (model.torch->tracedDevice != "cpu") methodsToCpu(m);
  auto graph = inlineForwardInPlace(m);
  FoldedModel result;
  result.report.input = model.path;
  result.report.tracedDevice = model.torch->tracedDevice;
  progress(strf("centering %zu parameter(s), replacing %zu LayerNorm(s)", analysis.plan.size(),
                analysis.foldableCount()));
  // What was centred, for the check: its float64 plan centres the originals again at each read
  // (verify), so the fold holds its planned tensors once, in the model's dtype, and no float64
  // copy of them ever exists whole.
  std::vector<fold_detail::CenteredTensor> centered;
  fold_detail::applyPlan(m, graph, model, analysis, options, &result.report, &centered);
  // A centred tensor stays the fold's own even where rounding gave back the original's bits:
  // the check reads it as the original centred in float64, which is not the original.
  std::set<const void*> own;
  for (const auto& c : centered)
    if (c.centered.has_storage()) own.insert(c.centered.storage().unsafeGetStorageImpl());
  shareUnchanged(m, model.torch->module, own);
  if (options.verify) {
    auto runs = std::make_shared<VerificationRuns>();
    result.report.verification = fold_detail::verify(model, analysis, m, graph, options, &centered, runs.get());
    result.runs = runs;
  }
  auto tm = std::make_shared<TorchModel>();
  tm->module = m;
  tm->graph = graph;
  tm->exampleInputs = model.torch->exampleInputs;
  result.torch = tm;
  return result;
}

Verification verifyFold(const ImportedModel& model, const AnalysisResult& analysis, const FoldedModel& folded,
                        const FoldOptions& options) {
  return fold_detail::verify(model, analysis, folded.torch->module, folded.torch->graph, options);
}

void checkOutputPath(const std::string& inputPath, const std::string& outPath) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (outPath.empty()) throw Error("no output path for the folded model");
  if (samePath(inputPath, outPath))
    throw Error("refusing to overwrite the input model '" + inputPath + "': choose another output path");
  auto dir = fs::path(outPath).parent_path();
  if (dir.empty()) dir = ".";
  if (!fs::is_directory(dir, ec)) throw Error("output directory '" + dir.string() + "' does not exist");
  if (::access(dir.c_str(), W_OK) != 0) throw Error("output directory '" + dir.string() + "' is not writable");
  if (fs::is_directory(outPath, ec)) throw Error("output path '" + outPath + "' is a directory");
}

SavedFileCheck saveFolded(const FoldedModel& folded, const ImportedModel& original, const std::string& outPath) {
  namespace fs = std::filesystem;
  checkOutputPath(original.path, outPath);
  jit::ExtraFilesMap extra;
  extra[kInputSpecExtraFile] = inputSpecsToJson(original.inputSpecs);
  extra[kFoldReportExtraFile] = toJson(folded.report).dump(2);
  const std::string tmpPrefix = fs::path(outPath).filename().string() + ".tmp-";
  removeStaleTemporaries(fs::path(outPath).parent_path().string(), tmpPrefix);  // what a killed save left
  auto tmp = outPath + ".tmp-" + std::to_string(::getpid());
  try {
    folded.torch->module.save(tmp, extra);
  } catch (const c10::Error& e) {
    std::error_code ec;
    fs::remove(tmp, ec);
    throw Error("cannot write '" + outPath + "': " + e.what_without_backtrace());
  }
  // What a user's torch.jit.load gets must be what was verified: loaded back before it is put
  // in place (a refused file never appears at outPath).
  SavedFileCheck check;
  if (folded.runs) {
    try {
      check = fold_detail::checkSavedTorchScript(tmp, folded, *folded.runs, folded.runs->progress);
      releaseFreedHeap();  // the reloaded copy's tensors, freed as each was found equal to the fold's
    } catch (...) {
      std::error_code ignored;
      fs::remove(tmp, ignored);
      throw;
    }
  }
  std::error_code ec;
  fs::rename(tmp, outPath, ec);
  if (ec) {
    fs::remove(tmp, ec);
    throw Error("cannot move the output into place at '" + outPath + "': " + ec.message());
  }
  return check;
}

}  // namespace foldnorm
