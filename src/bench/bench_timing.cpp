// What both runners of `foldnorm bench` share (bench_model_internal.h): the options, the report
// header and the timing loop (warm-up, interleaved rounds, spreads), and the process-wide memory
// settings a bench asks for (keepLargeBuffersOnHeap, useHugePages).
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

at::ScalarType parseDtype(const std::string& name) {
  if (name == "float32") return at::kFloat;
  if (name == "bfloat16") return at::kBFloat16;
  if (name == "float16") return at::kHalf;
  throw SettingError("dtype", "unknown timing dtype '" + name + "' (float32, bfloat16 or float16)");
}

RmsOp rmsOpOf(const BenchModelOptions& o) { return parseRmsOp(o.rmsOp); }

c10::Device deviceOf(const BenchModelOptions& o) { return c10::Device(o.device == "cuda" ? c10::kCUDA : c10::kCPU); }

ScopedThreads::ScopedThreads(int threads) : previous_(at::get_num_threads()) {
  if (threads > 0 && threads != previous_) {
    at::set_num_threads(threads);
    changed_ = true;
  }
}

ScopedThreads::~ScopedThreads() {
  if (changed_) at::set_num_threads(previous_);
}

void requireSomethingFolds(const ImportedModel& model, const AnalysisResult& analysis) {
  if (analysis.foldableCount() == 0) {
    // Two copies of one model: any measured difference would be noise (or warm-up order)
    // presented as a speed-up.
    throw Error("no LayerNorm of " + model.path + " folds (" + std::to_string(analysis.layerNorms.size()) +
                " found), so original and folded would be the same model; nothing to compare");
  }
}

FoldOptions foldOptionsFor(const BenchModelOptions& options, std::ostream& progress) {
  FoldOptions foldOptions;
  foldOptions.verify = true;
  foldOptions.randomInputs = options.verifyRandomInputs;
  foldOptions.device = "cpu";  // the model's own device; the float64 check is about the method
  foldOptions.seed = options.seed;
  foldOptions.fuseAddNorm = options.fuseAddNorm;
  foldOptions.rmsOp = rmsOpOf(options);
  foldOptions.progress = [&progress](const std::string& m) { progress << "[bench] " << m << "\n" << std::flush; };
  return foldOptions;
}

namespace {

bool largeBuffersOnHeap = false;  // set by keepLargeBuffersOnHeap(), reported
bool hugePages = false;           // set by useHugePages(), reported

/// The line of an interpreter error that names the cause: TorchScript's first line ("The
/// following operation failed ...") says nothing; the cause ("RuntimeError: index out of range
/// in self") is its last non-empty line.
std::string causeLine(const std::string& s) {
  std::istringstream in(s);
  std::string line, last;
  while (std::getline(in, line))
    if (line.find_first_not_of(" \t") != std::string::npos) last = line;
  return last.substr(std::min(last.find_first_not_of(" \t"), last.size()));
}

Spread spreadOf(const std::vector<double>& v) {
  return {quantile(v, 0.5), quantile(v, 0.1), quantile(v, 0.9)};
}

// ---- inputs ----

bool hasSequence(const InputSpec& s) { return !s.isFloating() && !s.shape.empty(); }

std::vector<InputSpec> specsFor(const std::vector<InputSpec>& base, int64_t seq, int64_t batch) {
  auto specs = base;
  for (auto& s : specs) {
    if (seq > 0 && hasSequence(s)) s.shape.back() = seq;
    if (batch > 0 && s.shape.size() >= 2) s.shape.front() = batch;
  }
  return specs;
}

int64_t itemsPerForward(const std::vector<InputSpec>& specs, bool seqApplies) {
  for (const auto& s : specs) {
    if (seqApplies && hasSequence(s)) {
      int64_t n = 1;
      for (auto d : s.shape) n *= d;
      return n;
    }
    if (!seqApplies && !s.shape.empty()) return s.shape.front();
  }
  return 1;
}

// ---- timing ----

ModelBenchCase runCase(const Runners& runners, const std::vector<InputSpec>& specs, int64_t seq, bool seqApplies,
                       const BenchModelOptions& options, std::ostream& progress) {
  ModelBenchCase c;
  c.seq = seqApplies ? seq : 0;
  for (const auto& s : specs) c.inputShapes.push_back(s.toString());
  c.items = itemsPerForward(specs, seqApplies);
  const std::string label = seqApplies ? format("seq %lld", static_cast<long long>(seq)) : "spec shape";
  if (runners.refuse) {
    c.skipped = runners.refuse(specs);
    if (!c.skipped.empty()) {
      progress << "[bench] " << label << ": skipped, " << c.skipped << "\n";
      return c;
    }
  }
  const c10::Device device = deviceOf(options);
  const auto dtype = parseDtype(options.dtype);
  const auto inputs = retargetInputs(makeInputs(specs, options.seed), {dtype, device});
  // Index 0 the original, 1 the folded model, 2 (with a null control) the original's second copy.
  std::vector<Forward> forwards{runners.original(inputs), runners.folded(inputs)};
  if (runners.control) forwards.push_back(runners.control(inputs));
  DeviceTimer timer(device);  // one forward per sample

  progress << format("[bench] %s: warm-up %d forwards of each model ...\n", label.c_str(), options.warmup)
           << std::flush;
  const int layouts = runners.relayout ? std::max(options.layouts, 1) : 1;
  try {
    if (layouts > 1) runners.relayout();
    for (int i = 0; i < options.warmup; ++i)
      for (const auto& forward : forwards) forward();
    timer.settle();
  } catch (const std::exception& e) {
    const auto* c10error = dynamic_cast<const c10::Error*>(&e);
    c.skipped = causeLine(c10error ? c10error->what_without_backtrace() : e.what());
    progress << "[bench] " << label << ": skipped, the model fails on these inputs: " << c.skipped << "\n";
    return c;
  }

  // The order of the runs in a round, by round: two models alternate (AB, BA); three take the six
  // orders in turn, so over a cycle each model is equally often in each position and equally often
  // before and after each other one (a drift in clocks or load falls on all alike).
  const std::vector<std::vector<std::size_t>> orders =
      forwards.size() == 2 ? std::vector<std::vector<std::size_t>>{{0, 1}, {1, 0}}
                           : std::vector<std::vector<std::size_t>>{{0, 1, 2}, {1, 2, 0}, {2, 0, 1},
                                                                   {0, 2, 1}, {2, 1, 0}, {1, 0, 2}};
  // ms[layout][model]: each layout's share of the rounds, its own cycles of orders.
  std::vector<std::vector<std::vector<double>>> ms(layouts, std::vector<std::vector<double>>(forwards.size()));
  const auto minRounds = static_cast<std::size_t>((options.reps + layouts - 1) / layouts);
  const double shareSeconds = options.caseSeconds / layouts;
  auto lastReport = std::chrono::steady_clock::now();
  for (int layout = 0; layout < layouts; ++layout) {
    if (layout > 0) {
      runners.relayout();
      for (const auto& forward : forwards) forward();  // the moved weights through the caches once
      timer.settle();
    }
    const auto shareStart = std::chrono::steady_clock::now();
    // At least minRounds; with caseSeconds, more until this share's rounds have taken their part of
    // it, finishing the cycle of orders so every order is equally often timed.
    auto moreRounds = [&](std::size_t done) {
      if (done < minRounds) return true;
      if (options.caseSeconds <= 0) return false;
      if (done % orders.size() != 0) return true;
      return std::chrono::duration<double>(std::chrono::steady_clock::now() - shareStart).count() < shareSeconds;
    };
    for (std::size_t round = 0; moreRounds(round); ++round) {
      std::vector<double> t(forwards.size());
      for (auto i : orders[round % orders.size()]) t[i] = timer.timeMs(forwards[i]);
      for (std::size_t i = 0; i < t.size(); ++i) ms[layout][i].push_back(t[i]);
      const auto now = std::chrono::steady_clock::now();
      if (now - lastReport > std::chrono::seconds(5)) {
        progress << format("[bench] %s: layout %d/%d, round %zu (original %.2f ms, folded %.2f ms%s)\n", label.c_str(),
                           layout + 1, layouts, round + 1, t[0], t[1],
                           t.size() > 2 ? format(", copy %.2f ms", t[2]).c_str() : "")
                 << std::flush;
        lastReport = now;
      }
    }
  }
  // Per layout, the per-round ratios original / model i; and every round's times pooled.
  auto ratiosTo = [&](std::size_t i) {
    std::vector<std::vector<double>> r(ms.size());
    for (std::size_t l = 0; l < ms.size(); ++l)
      for (std::size_t k = 0; k < ms[l][0].size(); ++k) r[l].push_back(ms[l][0][k] / ms[l][i][k]);
    return r;
  };
  auto pooled = [](const std::vector<std::vector<double>>& groups) {
    std::vector<double> all;
    for (const auto& g : groups) all.insert(all.end(), g.begin(), g.end());
    return all;
  };
  auto timesOf = [&](std::size_t i) {
    std::vector<std::vector<double>> byLayout;
    for (const auto& l : ms) byLayout.push_back(l[i]);
    return pooled(byLayout);
  };
  const auto ratios = ratiosTo(1);
  c.originalMs = spreadOf(timesOf(0));
  c.foldedMs = spreadOf(timesOf(1));
  c.speedup = spreadOf(pooled(ratios));
  c.paired = pairedRatioByLayout(ratios, options.seed);
  if (forwards.size() > 2) {
    c.controlMs = spreadOf(timesOf(2));
    c.control = pairedRatioByLayout(ratiosTo(2), options.seed);
  }
  c.originalItemsPerSecond = static_cast<double>(c.items) / (c.originalMs.median * 1e-3);
  c.foldedItemsPerSecond = static_cast<double>(c.items) / (c.foldedMs.median * 1e-3);
  return c;
}

}  // namespace

ModelBenchReport startReport(const ImportedModel& model, const FoldReport& fold, const BenchModelOptions& options,
                             const std::string& runner, const std::string& executor, std::ostream& progress) {
  const auto& v = fold.verification;
  if (fold.folded.empty())
    throw Error("no LayerNorm of " + model.path + " was folded, so original and folded are the same model; "
                "nothing to compare");
  if (!v.ran) throw Error("the fold of " + model.path + " was not verified; only a verified fold is timed");
  if (!v.float64Equivalent) {
    throw Error(format("the fold of %s is not float64-equivalent (worst relative error %.3e > %.0e); not "
                       "timing a wrong model (the fold report has the details)",
                       model.path.c_str(), v.worstRelative64, FoldOptions{}.float64Tolerance));
  }
  ModelBenchReport report;
  report.model = model.path;
  report.device = options.device;
  report.dtype = options.dtype;
  report.torchVersion = TORCH_VERSION;
  report.cpuKernelIsa = foldnorm::ops::toString(foldnorm::ops::cpuKernelIsa());
  report.threads = at::get_num_threads();
  report.warmup = options.warmup;
  report.reps = options.reps;
  report.caseSeconds = options.caseSeconds;
  report.runner = runner;
  report.executor = executor;
  report.rmsOp = toString(fold.rmsOp);  // what the fold itself recorded, not the option asked for
  report.largeBuffersOnHeap = largeBuffersOnHeap;
  report.hugePages = hugePages;
  if (deviceOf(options).is_cpu()) report.loadBefore = loadAverage();
  report.foldedLayerNorms = static_cast<int>(fold.folded.size());
  report.keptLayerNorms = static_cast<int>(fold.kept.size());
  report.fusedAddNorms = fold.fusedAddNorms;
  report.worstRelative32 = v.worstRelative32;
  report.worstRelative64 = v.worstRelative64;
  report.predictionsUnchanged = v.predictionsUnchanged;
  progress << format("[bench] fold verified: %d LayerNorm(s) folded, %d kept; float64 worst relative error "
                     "%.2e, float32 %.2e, predictions %s\n",
                     report.foldedLayerNorms, report.keptLayerNorms, v.worstRelative64, v.worstRelative32,
                     v.predictionsUnchanged ? "unchanged" : "CHANGED in float32")
           << std::flush;
  return report;
}

void timeCases(ModelBenchReport& report, const ImportedModel& model, const Runners& runners,
               const BenchModelOptions& options, std::ostream& progress) {
  auto say = [&](const std::string& m) { progress << "[bench] " << m << "\n" << std::flush; };
  // Sequence dimension and lengths.
  const auto& base = model.inputSpecs;
  const auto seqSpec = std::find_if(base.begin(), base.end(), hasSequence);
  report.seqApplies = seqSpec != base.end();
  std::vector<int64_t> seqs = options.seqs;
  if (report.seqApplies) {
    report.itemUnit = "tokens";
    report.seqNote = "sequence = last dim of every integer/bool input";
    if (seqs.empty()) seqs = {seqSpec->shape.back()};
  } else {
    report.itemUnit = "images";
    report.seqNote = "no integer input (image model): sequence lengths do not apply; the spec shape is timed";
    if (!options.seqs.empty()) say("sequence lengths ignored: " + report.seqNote);
    seqs = {0};
  }
  for (auto seq : seqs) {
    const auto specs = specsFor(base, seq, options.batch);
    report.cases.push_back(runCase(runners, specs, seq, report.seqApplies, options, progress));
    const auto& c = report.cases.back();
    if (c.skipped.empty()) {
      say(format("%s: original %.2f ms, folded %.2f ms, speed-up %.3fx (p10-p90 %.3f-%.3f; 95%% interval "
                 "%.3f-%.3f over %d rounds: %s)",
                 report.seqApplies ? format("seq %lld", static_cast<long long>(seq)).c_str() : "spec shape",
                 c.originalMs.median, c.foldedMs.median, c.speedup.median, c.speedup.p10, c.speedup.p90,
                 c.paired.low, c.paired.high, c.paired.rounds, c.paired.verdict.c_str()));
    }
  }
  if (deviceOf(options).is_cpu()) report.loadAfter = loadAverage();
}

void markLargeBuffersOnHeap() { largeBuffersOnHeap = true; }
void markHugePages() { hugePages = true; }
bool hugePagesInUse() { return hugePages; }

}  // namespace detail

using namespace detail;

void checkOptions(const BenchModelOptions& o) {
  if (o.device != "cpu" && o.device != "cuda")
    throw SettingError("device", "unknown device '" + o.device + "' (cpu or cuda)");
  if (o.device == "cuda" && !torch::cuda::is_available())
    throw SettingError("device", "timing on cuda needs a CUDA device, but LibTorch sees none here "
                                 "(torch::cuda::is_available() is false); time on cpu");
  parseDtype(o.dtype);
  rmsOpOf(o);
  for (auto s : o.seqs)
    if (s <= 0) throw SettingError("seq", "sequence lengths must be positive, got " + std::to_string(s));
  if (o.batch < 0) throw SettingError("batch", "the batch size must be positive (or 0 for the spec's batch)");
  // The profiling executor profiles on run 1 and optimises on run 2; fewer would time those.
  if (o.warmup < 2)
    throw SettingError("warmup", "at least 2 warm-up forwards are needed (the TorchScript executor profiles "
                                 "on the first run and optimises on the second)");
  if (o.reps < 2) throw SettingError("reps", "at least 2 timed rounds are needed for a median and a spread");
  if (!(o.caseSeconds >= 0))
    throw SettingError("case_seconds", "the timed seconds per length must not be negative (0: exactly reps rounds)");
  if (o.threads < 0) throw SettingError("threads", "the thread count must not be negative (0: LibTorch's default)");
  if (o.layouts < 1)
    throw SettingError("layouts", "at least 1 parameter layout per length is needed (1: where each load put them)");
}

void keepLargeBuffersOnHeap() {
  // Model outputs (e.g. [1, 2048, 50257] logits) are >= 32 MiB: glibc would mmap and page-fault
  // them afresh on every forward, timing the kernel's page faults, not the model. Keep the heap
  // instead (as bench-norm does), for both models alike.
  mallopt(M_MMAP_MAX, 0);
  mallopt(M_TRIM_THRESHOLD, std::numeric_limits<int>::max());
  markLargeBuffersOnHeap();
}

void useHugePages() {
  std::ifstream kernel("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string modes;
  std::getline(kernel, modes);
  if (modes.find("[never]") != std::string::npos)
    throw Error("transparent huge pages are off in this kernel (/sys/kernel/mm/transparent_hugepage/enabled: " +
                modes + "); time with 4 KiB pages instead");
  const char* before = std::getenv("THP_MEM_ALLOC_ENABLE");
  const std::string previous = before ? before : "";
  const bool wasSet = before != nullptr;
  ::setenv("THP_MEM_ALLOC_ENABLE", "1", 1);
  // LibTorch read the variable at its first CPU allocation; if that was before this call, its
  // allocations stay 64-byte aligned. Three large ones all page-aligned by chance: 1 in 64^3.
  const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
  std::vector<at::Tensor> probes;
  for (int64_t extra : {64, 192, 320}) probes.push_back(at::empty({(int64_t{2} << 20) + extra}, at::kByte));
  for (const auto& t : probes) {
    if (reinterpret_cast<std::uintptr_t>(t.data_ptr()) % page != 0) {
      // Leave the environment as it was: a child process must not inherit a setting that failed here.
      if (wasSet) ::setenv("THP_MEM_ALLOC_ENABLE", previous.c_str(), 1);
      else ::unsetenv("THP_MEM_ALLOC_ENABLE");
      throw Error("huge pages asked for after LibTorch's first CPU allocation (it reads THP_MEM_ALLOC_ENABLE "
                  "once): set THP_MEM_ALLOC_ENABLE=1 in the environment instead");
    }
  }
  markHugePages();
}

}  // namespace foldnorm::bench
