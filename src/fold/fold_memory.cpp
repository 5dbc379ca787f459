// A fold measured step by step (see include/foldnorm/fold/fold_memory.h). The steps are told
// apart by the progress lines the import, the fold and the verification already print, so what
// is measured is the code users run, not a copy of it.
#include "foldnorm/fold/fold_memory.h"

#include <filesystem>
#include <set>

#include "foldnorm/torch/torch_model.h"
#include "fold_internal.h"

namespace foldnorm {

using fold_detail::strf;

namespace {

/// The step a progress line starts; empty: the line belongs to the running step.
std::string stepOf(const std::string& line) {
  static const std::vector<std::pair<std::string, std::string>> kSteps{
      // Before "loading ": the save loads the file it wrote back (SavedFileCheck), part of the save.
      {"loading the written file back", "save: load the written file back and check it"},
      {"loading ", "import: read and load the file"},
      {"importing the forward graph", "import: load, inline, mirror"},
      {"recording shapes", "import: shape recording run"},
      {"copying the model", "fold: copy of the model"},
      {"centering ", "fold: apply the plan"},
      {"preparing the float64 runs", "verify: prepare the float64 runs"},
  };
  for (const auto& [prefix, step] : kSteps)
    if (line.rfind(prefix, 0) == 0) return step;
  // "verifying on input set 2/4: float64 (original, plan)": each kind of run a step of its own.
  static const std::string kRuns = "verifying on input set ";
  if (line.rfind(kRuns, 0) == 0) return "verify: set " + line.substr(kRuns.size());
  return {};
}

double gib(int64_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0); }

}  // namespace

double FoldMemoryReport::peakRatio() const {
  int64_t worst = 0;
  for (const auto& s : steps) worst = std::max(worst, s.peak);
  return modelBytes > 0 ? static_cast<double>(worst - baseline) / static_cast<double>(modelBytes) : 0;
}

FoldMemoryReport measureFoldMemory(const std::string& modelPath, const std::string& outPath,
                                   const FoldMemoryOptions& options) {
  FoldMemoryReport report;
  report.model = modelPath;
  std::error_code ec;
  report.fileBytes = static_cast<int64_t>(std::filesystem::file_size(modelPath, ec));
  checkOutputPath(modelPath, outPath);
  StepMemory memory;
  report.baseline = memory.baseline();
  auto onProgress = [&](const std::string& line) {
    auto step = stepOf(line);
    if (!step.empty()) memory.begin(step);
    if (options.fold.progress) options.fold.progress(line);
  };
  ImportOptions io;
  io.inputs = options.inputs;
  io.progress = onProgress;
  {
    auto model = importTorchScript(modelPath, io);
    model.torch->archive.reset();  // as `foldnorm fold` does: the fold clones the loaded module
    report.modelBytes = distinctStorageBytes(model.torch->parameterTensors);
    memory.begin("analysis");
    auto analysis = analyzeFoldability(model.graph);
    auto fo = options.fold;
    fo.progress = onProgress;
    auto folded = foldModel(model, analysis, fo);
    const auto& v = folded.report.verification;
    report.verified = v.ran && v.passed();
    report.worstRelative64 = v.worstRelative64;
    report.worstRelativeSaved64 = v.worstRelativeSaved64;
    report.worstRelative32 = v.worstRelative32;
    report.foldedLayerNorms = static_cast<int>(folded.report.folded.size());
    if (report.verified) {
      memory.begin("save");
      saveFolded(folded, model, outPath);
    }
    memory.end();
  }
  report.steps = memory.steps();
  report.exactPeaks = memory.exactPeaks();
  return report;
}

std::string memoryTable(const FoldMemoryReport& r) {
  std::string out = strf("%s: %.2f GiB of tensors (file %.2f GiB); %d LayerNorm(s) folded; %s (float64 plan %.2e, "
                         "saved file in float64 %.2e, float32 %.2e). Resident before the import: %.2f GiB.\n\n",
                         r.model.c_str(), gib(r.modelBytes), gib(r.fileBytes), r.foldedLayerNorms,
                         r.verified ? "verified and saved" : "NOT verified, not saved", r.worstRelative64,
                         r.worstRelativeSaved64, r.worstRelative32, gib(r.baseline));
  out += "| step | peak resident (GiB) | peak above start / model bytes | resident after (GiB) | seconds |\n";
  out += "|---|---:|---:|---:|---:|\n";
  for (const auto& s : r.steps)
    out += strf("| %s | %.2f | %.2fx | %.2f | %.1f |\n", s.name.c_str(), gib(s.peak),
                r.modelBytes ? static_cast<double>(s.peak - r.baseline) / static_cast<double>(r.modelBytes) : 0.0,
                gib(s.after), s.seconds);
  out += strf("\nWorst step: %.2fx the model's bytes above the starting resident size%s.\n", r.peakRatio(),
              r.exactPeaks ? "" : " (the kernel kept the high-water mark: peaks are upper bounds)");
  return out;
}

}  // namespace foldnorm
