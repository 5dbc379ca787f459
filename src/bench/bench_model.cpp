// `foldnorm bench`: original vs folded model end to end (see include/foldnorm/bench/bench_model.h).
#include "foldnorm/bench/bench_model.h"

#include "foldnorm/common/measure.h"

#include <ATen/Parallel.h>
#include <c10/core/Event.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <malloc.h>
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
#include <cstdio>
#include <fstream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <ostream>
#include <sstream>

#include "foldnorm/analysis/analysis.h"
#include "foldnorm/common/error.h"
#include "foldnorm/common/setting_error.h"
#include "foldnorm/import/torchscript.h"
#include "foldnorm/ops/rms_norm.h"
#include "foldnorm/torch/model_surgery.h"
#include "foldnorm/torch/torch_model.h"

namespace foldnorm::bench {
namespace {

namespace jit = torch::jit;

at::ScalarType parseDtype(const std::string& name) {
  if (name == "float32") return at::kFloat;
  if (name == "bfloat16") return at::kBFloat16;
  if (name == "float16") return at::kHalf;
  throw SettingError("dtype", "unknown timing dtype '" + name + "' (float32, bfloat16 or float16)");
}

void checkOptions(const BenchModelOptions& o) {
  if (o.device != "cpu" && o.device != "cuda")
    throw SettingError("device", "unknown device '" + o.device + "' (cpu or cuda)");
  if (o.device == "cuda" && !torch::cuda::is_available())
    throw SettingError("device", "timing on cuda needs a CUDA device, but LibTorch sees none here "
                                 "(torch::cuda::is_available() is false); time on cpu");
  parseDtype(o.dtype);
  for (auto s : o.seqs)
    if (s <= 0) throw SettingError("seq", "sequence lengths must be positive, got " + std::to_string(s));
  if (o.batch < 0) throw SettingError("batch", "the batch size must be positive (or 0 for the spec's batch)");
  // The profiling executor profiles on run 1 and optimises on run 2; fewer would time those.
  if (o.warmup < 2)
    throw SettingError("warmup", "at least 2 warm-up forwards are needed (the TorchScript executor profiles "
                                 "on the first run and optimises on the second)");
  if (o.reps < 2) throw SettingError("reps", "at least 2 timed rounds are needed for a median and a spread");
  if (o.threads < 0) throw SettingError("threads", "the thread count must not be negative (0: LibTorch's default)");
}

/// The intra-op thread count for one bench, restored afterwards: the host's own setting (the
/// GUI's) is not changed behind its back.
class ScopedThreads {
 public:
  explicit ScopedThreads(int threads) : previous_(at::get_num_threads()) {
    if (threads > 0 && threads != previous_) {
      at::set_num_threads(threads);
      changed_ = true;
    }
  }
  ~ScopedThreads() {
    if (changed_) at::set_num_threads(previous_);
  }
  ScopedThreads(const ScopedThreads&) = delete;
  ScopedThreads& operator=(const ScopedThreads&) = delete;

 private:
  int previous_;
  bool changed_ = false;
};

bool largeBuffersOnHeap = false;  // set by keepLargeBuffersOnHeap(), reported

/// The line of a TorchScript interpreter error that names the cause: the interpreter's first line
/// ("The following operation failed ...") says nothing; the cause ("RuntimeError: index out of
/// range in self") is its last non-empty line.
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

// ---- fresh, comparable copies of both models ----

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

std::vector<c10::IValue> toIValues(const std::vector<at::Tensor>& tensors, at::ScalarType dtype,
                                   const c10::Device& device) {
  std::vector<c10::IValue> out;
  for (const auto& t : retargetInputs(tensors, {dtype, device})) out.emplace_back(t);
  return out;
}

// ---- timing ----

/// One forward per sample. CPU: wall clock around the synchronous call. CUDA: events on the
/// current stream around it, then a synchronize (the forward only enqueues kernels).
class ForwardTimer {
 public:
  explicit ForwardTimer(const c10::Device& device) : device_(device) {}

  double timeMs(jit::Module& m, const std::vector<c10::IValue>& inputs) {
    if (!device_.is_cuda()) {
      const auto start = std::chrono::steady_clock::now();
      m.forward(inputs);
      const auto stop = std::chrono::steady_clock::now();
      return std::chrono::duration<double, std::milli>(stop - start).count();
    }
    c10::impl::VirtualGuardImpl impl(c10::DeviceType::CUDA);
    const c10::Stream stream = impl.getStream(device_);
    c10::Event start(c10::DeviceType::CUDA, c10::EventFlag::BACKEND_DEFAULT);
    c10::Event stop(c10::DeviceType::CUDA, c10::EventFlag::BACKEND_DEFAULT);
    start.record(stream);
    m.forward(inputs);
    stop.record(stream);
    stop.synchronize();
    return start.elapsedTime(stop);
  }

  void settle() {
    if (device_.is_cuda()) torch::cuda::synchronize();
  }

 private:
  c10::Device device_;
};

ModelBenchCase runCase(jit::Module& original, jit::Module& folded, const std::vector<InputSpec>& specs,
                       int64_t seq, bool seqApplies, const BenchModelOptions& options,
                       at::ScalarType dtype, const c10::Device& device, std::ostream& progress) {
  ModelBenchCase c;
  c.seq = seqApplies ? seq : 0;
  for (const auto& s : specs) c.inputShapes.push_back(s.toString());
  c.items = itemsPerForward(specs, seqApplies);
  const auto inputs = toIValues(makeInputs(specs, options.seed), dtype, device);
  ForwardTimer timer(device);
  const std::string label = seqApplies ? format("seq %lld", static_cast<long long>(seq)) : "spec shape";

  progress << format("[bench] %s: warm-up %d forwards of each model ...\n", label.c_str(), options.warmup)
           << std::flush;
  try {
    for (int i = 0; i < options.warmup; ++i) {
      original.forward(inputs);
      folded.forward(inputs);
    }
    timer.settle();
  } catch (const std::exception& e) {
    const auto* c10error = dynamic_cast<const c10::Error*>(&e);
    c.skipped = causeLine(c10error ? c10error->what_without_backtrace() : e.what());
    progress << "[bench] " << label << ": skipped, the model fails on these inputs: " << c.skipped << "\n";
    return c;
  }

  std::vector<double> originalMs, foldedMs, ratios;
  auto lastReport = std::chrono::steady_clock::now();
  for (int rep = 0; rep < options.reps; ++rep) {
    // Alternate the order (AB, BA, ...) so a drift in clocks or load falls on both alike.
    double a = 0, b = 0;
    if (rep % 2 == 0) {
      a = timer.timeMs(original, inputs);
      b = timer.timeMs(folded, inputs);
    } else {
      b = timer.timeMs(folded, inputs);
      a = timer.timeMs(original, inputs);
    }
    originalMs.push_back(a);
    foldedMs.push_back(b);
    ratios.push_back(a / b);
    const auto now = std::chrono::steady_clock::now();
    if (now - lastReport > std::chrono::seconds(5) || rep + 1 == options.reps) {
      progress << format("[bench] %s: round %d/%d (original %.2f ms, folded %.2f ms)\n", label.c_str(),
                         rep + 1, options.reps, a, b)
               << std::flush;
      lastReport = now;
    }
  }
  c.originalMs = spreadOf(originalMs);
  c.foldedMs = spreadOf(foldedMs);
  c.speedup = spreadOf(ratios);
  c.originalItemsPerSecond = static_cast<double>(c.items) / (c.originalMs.median * 1e-3);
  c.foldedItemsPerSecond = static_cast<double>(c.items) / (c.foldedMs.median * 1e-3);
  return c;
}

std::string executorSettings() {
  return format("%s executor, optimisation %s, TensorExpr fuser %s (both models alike)",
                jit::getExecutorMode() ? (jit::getProfilingMode() ? "profiling" : "simple")
                                       : "legacy",
                jit::getGraphExecutorOptimize() ? "on" : "off",
                jit::tensorExprFuserEnabled() ? "on" : "off");
}

}  // namespace

void keepLargeBuffersOnHeap() {
  // Model outputs (e.g. [1, 2048, 50257] logits) are >= 32 MiB: glibc would mmap and page-fault
  // them afresh on every forward, timing the kernel's page faults, not the model. Keep the heap
  // instead (as bench-norm does), for both models alike.
  mallopt(M_MMAP_MAX, 0);
  mallopt(M_TRIM_THRESHOLD, std::numeric_limits<int>::max());
  largeBuffersOnHeap = true;
}

FoldedModel foldForBench(const ImportedModel& model, const AnalysisResult& analysis,
                         const BenchModelOptions& options, std::ostream& progress) {
  checkOptions(options);
  if (analysis.foldableCount() == 0) {
    // Two copies of one model: any measured difference would be noise (or warm-up order)
    // presented as a speed-up.
    throw Error("no LayerNorm of " + model.path + " folds (" + std::to_string(analysis.layerNorms.size()) +
                " found), so original and folded would be the same model; nothing to compare");
  }
  FoldOptions foldOptions;
  foldOptions.verify = true;
  foldOptions.randomInputs = options.verifyRandomInputs;
  foldOptions.device = "cpu";  // the trace's own device; the float64 check is about the method
  foldOptions.seed = options.seed;
  foldOptions.fuseAddNorm = options.fuseAddNorm;
  foldOptions.progress = [&](const std::string& m) { progress << "[bench] " << m << "\n" << std::flush; };
  return foldModel(model, analysis, foldOptions);
}

ModelBenchReport runModelBench(const ImportedModel& model, const FoldedModel& folded,
                               const BenchModelOptions& options, std::ostream& progress) {
  checkOptions(options);
  const auto dtype = parseDtype(options.dtype);
  const c10::Device device(options.device == "cuda" ? c10::kCUDA : c10::kCPU);
  auto say = [&](const std::string& m) { progress << "[bench] " << m << "\n" << std::flush; };
  const auto& v = folded.report.verification;
  if (folded.report.folded.empty())
    throw Error("no LayerNorm of " + model.path + " was folded, so original and folded are the same model; "
                "nothing to compare");
  if (!v.ran) throw Error("the fold of " + model.path + " was not verified; only a verified fold is timed");
  if (!v.float64Equivalent) {
    throw Error(format("the fold of %s is not float64-equivalent (worst relative error %.3e > %.0e); not "
                       "timing a wrong model (the fold report has the details)",
                       model.path.c_str(), v.worstRelative64, FoldOptions{}.float64Tolerance));
  }
  const ScopedThreads threads(options.threads);

  ModelBenchReport report;
  report.model = model.path;
  report.device = options.device;
  report.dtype = options.dtype;
  report.torchVersion = TORCH_VERSION;
  report.cpuKernelIsa = foldnorm::ops::toString(foldnorm::ops::cpuKernelIsa());
  report.threads = at::get_num_threads();
  report.warmup = options.warmup;
  report.reps = options.reps;
  report.executor = executorSettings();
  report.largeBuffersOnHeap = largeBuffersOnHeap;
  if (device.is_cpu()) report.loadBefore = loadAverage();
  report.foldedLayerNorms = static_cast<int>(folded.report.folded.size());
  report.keptLayerNorms = static_cast<int>(folded.report.kept.size());
  report.fusedAddNorms = folded.report.fusedAddNorms;
  report.worstRelative32 = v.worstRelative32;
  report.worstRelative64 = v.worstRelative64;
  report.predictionsUnchanged = v.predictionsUnchanged;
  say(format("fold verified: %d LayerNorm(s) folded, %d kept; float64 worst relative error %.2e, "
             "float32 %.2e, predictions %s",
             report.foldedLayerNorms, report.keptLayerNorms, v.worstRelative64, v.worstRelative32,
             v.predictionsUnchanged ? "unchanged" : "CHANGED in float32"));

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

  // Both models afresh, alike in every way but the fold.
  say(format("loading fresh copies of both models (%s on %s)", options.dtype.c_str(), options.device.c_str()));
  const auto foldedBytes = serializeModule(folded.torch->module);
  c10::InferenceMode inference;
  auto original = prepareCopy(freshCopy(*model.torch), dtype, device);
  auto foldedCopy = prepareCopy(loadModule(foldedBytes), dtype, device);

  for (auto seq : seqs) {
    const auto specs = specsFor(base, seq, options.batch);
    report.cases.push_back(runCase(original, foldedCopy, specs, seq, report.seqApplies, options, dtype,
                                   device, progress));
    const auto& c = report.cases.back();
    if (c.skipped.empty()) {
      say(format("%s: original %.2f ms, folded %.2f ms, speed-up %.3fx (p10-p90 %.3f-%.3f)",
                 report.seqApplies ? format("seq %lld", static_cast<long long>(seq)).c_str() : "spec shape",
                 c.originalMs.median, c.foldedMs.median, c.speedup.median, c.speedup.p10, c.speedup.p90));
    }
  }
  if (device.is_cpu()) report.loadAfter = loadAverage();
  return report;
}

ModelBenchReport runModelBench(const std::string& modelPath, const BenchModelOptions& options,
                               std::ostream& progress) {
  checkOptions(options);
  ImportOptions importOptions;
  importOptions.seed = options.seed;
  importOptions.progress = [&](const std::string& m) { progress << "[bench] " << m << "\n" << std::flush; };
  for (const auto& s : options.inputSpecs) importOptions.inputs.push_back(parseInputSpec(s));
  const auto model = importTorchScript(modelPath, importOptions);
  const auto analysis = analyzeFoldability(model.graph);
  const auto folded = foldForBench(model, analysis, options, progress);
  return runModelBench(model, folded, options, progress);
}

bool cudaAvailable() { return torch::cuda::is_available(); }

nlohmann::json toJson(const ModelBenchReport& r) {
  auto spread = [](const Spread& s) { return nlohmann::json{{"median", s.median}, {"p10", s.p10}, {"p90", s.p90}}; };
  nlohmann::json cases = nlohmann::json::array();
  for (const auto& c : r.cases) {
    nlohmann::json j{{"seq", c.seq}, {"inputs", c.inputShapes}, {"items", c.items}};
    if (!c.skipped.empty()) {
      j["skipped"] = c.skipped;
    } else {
      j["original_ms"] = spread(c.originalMs);
      j["folded_ms"] = spread(c.foldedMs);
      j["speedup"] = spread(c.speedup);
      j["original_" + r.itemUnit + "_per_s"] = c.originalItemsPerSecond;
      j["folded_" + r.itemUnit + "_per_s"] = c.foldedItemsPerSecond;
    }
    cases.push_back(j);
  }
  nlohmann::json load = nullptr;
  if (r.loadBefore >= 0) load = {{"before", r.loadBefore}, {"after", r.loadAfter}};
  return {{"format", "foldnorm-bench"},
          {"version", 1},
          {"model", r.model},
          {"device", r.device},
          {"dtype", r.dtype},
          {"torch", r.torchVersion},
          {"cpu_kernel_isa", r.cpuKernelIsa},
          {"threads", r.threads},
          {"warmup", r.warmup},
          {"reps", r.reps},
          {"executor", r.executor},
          {"large_buffers_on_heap", r.largeBuffersOnHeap},
          {"item_unit", r.itemUnit},
          {"seq_applies", r.seqApplies},
          {"seq_note", r.seqNote},
          {"load_average", load},
          {"fold", {{"folded_layer_norms", r.foldedLayerNorms},
                    {"kept_layer_norms", r.keptLayerNorms},
                    {"fused_add_norms", r.fusedAddNorms},
                    {"worst_relative_float32", r.worstRelative32},
                    {"worst_relative_float64", r.worstRelative64},
                    {"predictions_unchanged", r.predictionsUnchanged}}},
          {"cases", cases}};
}

std::string formatModelBenchTable(const ModelBenchReport& r) {
  std::string s = format("%s: %d LayerNorm(s) folded, %d kept; fold verified (float64 worst relative "
                         "error %.2e, float32 %.2e, predictions %s)\n",
                         r.model.c_str(), r.foldedLayerNorms, r.keptLayerNorms, r.worstRelative64,
                         r.worstRelative32, r.predictionsUnchanged ? "unchanged" : "changed");
  s += format("device %s, %s, %d threads, CPU kernels %s, torch %s\n", r.device.c_str(), r.dtype.c_str(),
              r.threads, r.cpuKernelIsa.c_str(), r.torchVersion.c_str());
  s += format("%d warm-up forwards per model and length, then %d rounds, each running both models "
              "(order alternating)\n%s; allocator: %s\n%s\n",
              r.warmup, r.reps, r.executor.c_str(),
              r.largeBuffersOnHeap ? "large buffers kept on the heap" : "glibc's default (large buffers mmapped)",
              r.seqNote.c_str());
  if (r.loadBefore >= 0)
    s += format("1-minute load average %.2f before, %.2f after (others' work on this machine)\n",
                r.loadBefore, r.loadAfter);
  s += "median ms (p10-p90); speed-up = per-round original/folded, median (p10-p90)\n\n";
  const std::string unit = r.itemUnit == "tokens" ? "tok/s" : "img/s";
  s += format("%6s %8s %24s %24s %11s %11s %22s\n", "seq", r.itemUnit.c_str(), "original ms",
              "folded ms", ("orig " + unit).c_str(), ("fold " + unit).c_str(), "speed-up");
  for (const auto& c : r.cases) {
    const std::string seq = r.seqApplies ? std::to_string(c.seq) : "-";
    if (!c.skipped.empty()) {
      s += format("%6s %8lld  skipped: %s\n", seq.c_str(), static_cast<long long>(c.items), c.skipped.c_str());
      continue;
    }
    auto cell = [](const Spread& x, const char* f) {
      return format(f, x.median, x.p10, x.p90);
    };
    s += format("%6s %8lld %24s %24s %11.1f %11.1f %22s\n", seq.c_str(), static_cast<long long>(c.items),
                cell(c.originalMs, "%.2f (%.2f-%.2f)").c_str(), cell(c.foldedMs, "%.2f (%.2f-%.2f)").c_str(),
                c.originalItemsPerSecond, c.foldedItemsPerSecond,
                cell(c.speedup, "%.3f (%.3f-%.3f)").c_str());
  }
  return s;
}

}  // namespace foldnorm::bench
