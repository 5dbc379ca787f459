// `foldnorm bench` on a TorchScript model: fresh copies of original and fold on the graph executor
// (see include/foldnorm/bench/bench_model.h); the timing loop they share with the .pt2 runner is
// bench_timing.cpp.
#include "foldnorm/bench/bench_model.h"

#include "bench_model_internal.h"
#include "device_timer.h"

#include "foldnorm/common/measure.h"

#include <ATen/Parallel.h>
#include <malloc.h>
#include <unistd.h>
#include <torch/csrc/jit/passes/tensorexpr_fuser.h>
#include <torch/csrc/jit/python/update_graph_executor_opt.h>
#include <torch/csrc/jit/runtime/graph_executor.h>
#include <torch/cuda.h>
#include <torch/script.h>
#include <torch/version.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <stdexcept>
#include <nlohmann/json.hpp>
#include <ostream>
#include <sstream>

#include "foldnorm/analysis/analysis.h"
#include "foldnorm/common/error.h"
#include "foldnorm/common/memory.h"
#include "foldnorm/common/setting_error.h"
#include "foldnorm/fold/fold_export.h"
#include "foldnorm/fold/model.h"
#include "foldnorm/import/export.h"
#include "foldnorm/import/torchscript.h"
#include "foldnorm/ops/rms_norm.h"
#include "foldnorm/torch/model_surgery.h"
#include "foldnorm/torch/torch_model.h"

namespace foldnorm::bench {
namespace detail {

namespace jit = torch::jit;

namespace {

std::string executorSettings() {
  return format("%s executor, optimisation %s, TensorExpr fuser %s (both models alike)",
                jit::getExecutorMode() ? (jit::getProfilingMode() ? "profiling" : "simple")
                                       : "legacy",
                jit::getGraphExecutorOptimize() ? "on" : "off",
                jit::tensorExprFuserEnabled() ? "on" : "off");
}

/// `m` with its forward inlined in place, in `dtype` on `device`, in eval mode.
jit::Module prepareCopy(jit::Module m, at::ScalarType dtype, const c10::Device& device) {
  auto graph = inlineForwardInPlace(m);
  if (dtype != at::kFloat || !device.is_cpu()) {
    const RetargetOptions to{dtype, device};
    retargetAttributes(m, to);
    retargetGraph(graph, to);
  }
  m.eval();
  return m;
}

Bind bindModule(jit::Module& m) {
  return [&m](const std::vector<at::Tensor>& tensors) -> Forward {
    std::vector<c10::IValue> inputs(tensors.begin(), tensors.end());
    return [&m, inputs] { m.forward(inputs); };
  };
}

}  // namespace
}  // namespace detail

using namespace detail;

FoldedModel foldForBench(const ImportedModel& model, const AnalysisResult& analysis,
                         const BenchModelOptions& options, std::ostream& progress) {
  checkOptions(options);
  requireSomethingFolds(model, analysis);
  return foldModel(model, analysis, foldOptionsFor(options, progress));
}

namespace {

/// What a bench that owns its import and fold frees while it loads the timed copies (the CLI's
/// path); both empty for a host's models (benchModel). Each returns the bytes it freed.
struct SourceRelease {
  std::function<int64_t()> import;  // before the copies load: they come from the file, not from it
  std::function<int64_t()> fold;    // once the folded copy has loaded (it is copied through a file)
};

/// Drops every tensor `t` holds (module, graph constants, recorded inputs and outputs) and says how
/// many bytes of storage that was; how to make a fresh copy (makeCopy, archive) stays.
int64_t releaseTensors(TorchModel& t) {
  auto tensors = attributeTensors(t.module);
  for (const auto* held : {&t.parameterTensors, &t.exampleInputs, &t.exampleOutputs})
    tensors.insert(tensors.end(), held->begin(), held->end());
  const auto bytes = distinctStorageBytes(tensors);
  tensors.clear();
  t.module = jit::Module();
  t.nodes.clear();
  t.values.clear();
  t.graph.reset();
  t.parameterTensors.clear();
  t.exampleInputs.clear();
  t.exampleOutputs.clear();
  releaseFreedHeap();  // large buffers live on the heap (keepLargeBuffersOnHeap): give their pages back
  return bytes;
}

ModelBenchReport runTorchScriptBench(const ImportedModel& model, const FoldedModel& folded,
                                     const BenchModelOptions& options, std::ostream& progress,
                                     const SourceRelease& release) {
  checkOptions(options);
  if (!model.torch) throw std::logic_error("bench: a TorchScript fold of a model that is not TorchScript");
  const auto dtype = parseDtype(options.dtype);
  const c10::Device device = deviceOf(options);
  const ScopedThreads threads(options.threads);
  auto report = startReport(model, folded.report, options, "torchscript", executorSettings(), progress);

  // Both models afresh, alike in every way but the fold.
  progress << "[bench] loading fresh copies of both models (" << options.dtype << " on " << options.device << ")\n"
           << std::flush;
  // Two more copies of a model beside the fold's (and the import's, where the host keeps it); an
  // owner frees the fold once the folded copy is in, so it needs one copy's room more than now.
  // Refuse in one line where that cannot fit (GPT-2 XL: 6.3 GB a copy), rather than be killed by
  // the kernel while loading them.
  const auto modelBytes = distinctStorageBytes(attributeTensors(model.torch->module));
  if (release.import) report.releasedBytes += release.import();
  if (device.is_cpu()) {
    const auto need = (release.fold ? 1 : 2) * modelBytes, available = availableMemoryBytes();
    if (available >= 0 && need + need / 8 > available)
      throw Error(format("bench: the fresh copies this bench times need about %.2f GB more and %.2f GB are available; "
                         "time it on a machine with more memory",
                         static_cast<double>(need) / 1e9, static_cast<double>(available) / 1e9));
  }
  c10::InferenceMode inference;
  // The folded copy first: an owner frees the fold as soon as it has loaded, so at most two models'
  // tensors are held while either copy loads (GPT-2 XL peaked at 19.6 GB the other way round).
  auto foldedCopy = prepareCopy(copyThroughFile(folded.torch->module), dtype, device);
  if (release.fold) report.releasedBytes += release.fold();
  auto original = prepareCopy(freshCopy(*model.torch), dtype, device);
  if (report.releasedBytes > 0)
    progress << "[bench] freed the import's and the fold's tensors (" << humanBytes(report.releasedBytes)
             << "): only the timed copies stay\n"
             << std::flush;
  Runners runners{bindModule(original), bindModule(foldedCopy), {}, {}, {}};
  jit::Module control;
  // A third copy of a large model may not fit beside the two (GPT-2 XL: 3 x 6.3 GB on 24 GB): then
  // the bench runs without its null fold and says so, rather than being killed mid-run.
  const auto refusal = options.nullControl && device.is_cpu()
                           ? nullControlRefusal(distinctStorageBytes(attributeTensors(original)), availableMemoryBytes())
                           : std::string();
  if (!refusal.empty()) {
    report.nullControlSkipped = refusal;
    progress << "[bench] null fold skipped: " << refusal << "\n";
  } else if (options.nullControl) {
    // Loaded last, as a third model would be: the same file as the original, its own allocations.
    control = prepareCopy(freshCopy(*model.torch), dtype, device);
    runners.control = bindModule(control);
  }
  std::vector<jit::Module*> models{&original, &foldedCopy};
  if (runners.control) models.push_back(&control);  // not when its copy was left out
  int64_t modelsBytes = 0;
  for (const auto* m : models) modelsBytes += distinctStorageBytes(attributeTensors(*m));
  report.layoutsSkipped = options.layouts > 1 && device.is_cpu() ? layoutsRefusal(modelsBytes, availableMemoryBytes()) : "";
  if (!report.layoutsSkipped.empty()) progress << "[bench] parameter layouts skipped: " << report.layoutsSkipped << "\n";
  if (options.layouts > 1 && report.layoutsSkipped.empty()) {
    // Every model alike, the original included: none keeps the layout its load happened to give it.
    auto rng = std::make_shared<std::mt19937_64>(options.seed);
    runners.relayout = [rng, models] {
      for (auto* m : models) relocateParameters(*m, *rng);
    };
    report.layouts = options.layouts;
  }
  timeCases(report, model, runners, options, progress);
  return report;
}

}  // namespace

ModelBenchReport runModelBench(const ImportedModel& model, const FoldedModel& folded,
                               const BenchModelOptions& options, std::ostream& progress) {
  return runTorchScriptBench(model, folded, options, progress, {});
}

ModelBenchReport runModelBench(const std::string& modelPath, const BenchModelOptions& options,
                               std::ostream& progress) {
  checkOptions(options);
  ImportOptions importOptions;
  importOptions.seed = options.seed;
  importOptions.progress = [&](const std::string& m) { progress << "[bench] " << m << "\n" << std::flush; };
  for (const auto& s : options.inputSpecs) importOptions.inputs.push_back(parseInputSpec(s));
  const Model model = Model::open(modelPath, importOptions);
  // Copies load the file again (as `foldnorm fold` does): the archive's bytes need not stay.
  model.releaseFileBytes();
  AnalysisOptions analysisOptions;
  analysisOptions.scaleAbsorb = options.scaleAbsorb;
  analysisOptions.insertCentering = options.insertCentering;
  const auto analysis = analyzeFoldability(model.graph(), analysisOptions);
  requireSomethingFolds(model.imported(), analysis);
  const ModelFold fold = model.fold(analysis, foldOptionsFor(options, progress));
  const ImportedModel& imported = model.imported();
  struct Timers {
    const ImportedModel& model;
    const BenchModelOptions& options;
    std::ostream& progress;
    // A TorchScript fold: this path owns the import and the fold, and neither is read once the
    // timed copies exist.
    ModelBenchReport operator()(const std::shared_ptr<const FoldedModel>& folded) const {
      SourceRelease release;
      release.import = [this] { return releaseTensors(*model.torch); };
      release.fold = [&folded] { return releaseTensors(*folded->torch); };
      return runTorchScriptBench(model, *folded, options, progress, release);
    }
    ModelBenchReport operator()(const std::shared_ptr<const FoldedExport>& folded) const {
      return runModelBench(model, *folded, options, progress);
    }
  };
  return std::visit(Timers{imported, options, progress}, fold.parts());
}

bool cudaAvailable() { return torch::cuda::is_available(); }

}  // namespace foldnorm::bench
