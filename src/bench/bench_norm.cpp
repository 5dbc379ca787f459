#include "foldnorm/bench/bench_norm.h"

#include "foldnorm/common/measure.h"

#include <ATen/Parallel.h>
#include <malloc.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <functional>
#include <optional>
#include <nlohmann/json.hpp>
#include <ostream>

#include "foldnorm/common/error.h"
#include "foldnorm/common/setting_error.h"
#include "foldnorm/ops/rms_norm.h"
#include "device_timer.h"

namespace foldnorm::bench {
namespace {

torch::Dtype parseDtype(const std::string& name) {
  if (name == "float32") return torch::kFloat32;
  if (name == "float64") return torch::kFloat64;
  if (name == "bfloat16") return torch::kBFloat16;
  if (name == "float16") return torch::kFloat16;
  throw SettingError("dtype", "unknown dtype '" + name + "' (float32, float64, bfloat16 or float16)");
}

void checkOptions(const BenchNormOptions& o) {
  if (o.device != "cpu" && o.device != "cuda") {
    throw SettingError("device", "unknown device '" + o.device + "' (cpu or cuda)");
  }
  if (o.device == "cuda" && !torch::cuda::is_available()) {
    throw SettingError("device", "timing on cuda needs a CUDA device, but torch::cuda::is_available() "
                                 "is false here; time on cpu");
  }
  if (o.dtypes.empty() || o.hidden.empty() || o.rows.empty()) {
    const char* empty = o.dtypes.empty() ? "dtype" : o.hidden.empty() ? "hidden" : "rows";
    throw SettingError(empty, "at least one value is needed (the shapes and dtypes timed are their product)");
  }
  for (const auto& d : o.dtypes) parseDtype(d);
  for (auto h : o.hidden) {
    if (h <= 0) throw SettingError("hidden", "row widths must be positive, got " + std::to_string(h));
  }
  for (auto r : o.rows) {
    if (r <= 0) throw SettingError("rows", "row counts must be positive, got " + std::to_string(r));
  }
  if (o.reps < 3) throw SettingError("reps", "at least 3 timed samples are needed for a median and a spread");
  if (o.warmup < 0) throw SettingError("warmup", "the number of untimed rounds must not be negative");
}

// Fresh allocations >= 32 MiB are mmapped and page-faulted on first touch by glibc; ATen's ops
// allocate their outputs per call, so keep the heap instead: no mmap, no trimming. Freed outputs
// are then handed back with their pages already mapped.
void keepHeapWarm() {
  mallopt(M_MMAP_MAX, 0);
  mallopt(M_TRIM_THRESHOLD, std::numeric_limits<int>::max());
}

// Forces our CPU kernels' instruction set for one run and restores the automatic choice after it.
class CpuIsaScope {
 public:
  explicit CpuIsaScope(const std::string& name) {
    if (name == "auto") return;
    std::optional<foldnorm::ops::CpuKernelIsa> isa;
    for (auto candidate : {foldnorm::ops::CpuKernelIsa::kAvx512, foldnorm::ops::CpuKernelIsa::kAvx2,
                           foldnorm::ops::CpuKernelIsa::kPortable}) {
      if (name == foldnorm::ops::toString(candidate)) isa = candidate;
    }
    if (!isa) {
      throw SettingError("cpu-isa", "unknown CPU kernel instruction set '" + name +
                                        "' (auto, avx512, avx2 or portable)");
    }
    try {
      foldnorm::ops::setCpuKernelIsa(*isa);
    } catch (const c10::Error&) {
      throw SettingError("cpu-isa", "this CPU cannot run the " + name + " kernels (auto picks what it can)");
    }
    forced_ = true;
  }
  ~CpuIsaScope() {
    if (forced_) foldnorm::ops::setCpuKernelIsa(std::nullopt);
  }
  CpuIsaScope(const CpuIsaScope&) = delete;
  CpuIsaScope& operator=(const CpuIsaScope&) = delete;

 private:
  bool forced_ = false;
};

struct Variant {
  std::string name;
  double bytes;
  std::function<void()> run;
};

// Times one call per sample (device_timer.h), with the L2 flush (when on, CUDA only) done before
// the start event.
class SampleTimer {
 public:
  SampleTimer(const BenchNormOptions& options, torch::Device device) : timer_(device) {
    if (!device.is_cuda()) return;
    if (options.flushL2) {
      // No L2 query without CUDA headers here; 256 MiB is at least twice the L2 of every current
      // NVIDIA GPU (H100/H200: 50 MB; B200: 126 MB), as Triton's do_bench uses.
      flush_ = torch::empty({256 << 20}, torch::TensorOptions().dtype(torch::kUInt8).device(device));
    }
  }

  double timeMs(const std::function<void()>& fn) {
    if (!flush_.defined()) return timer_.timeMs(fn);
    return timer_.timeMs(fn, [this] { flush_.zero_(); });
  }

  void settle() { timer_.settle(); }

 private:
  DeviceTimer timer_;
  torch::Tensor flush_;  // defined when the L2 is flushed before each sample
};

BenchNormCase runCase(const BenchNormOptions& options, torch::Device device,
                      const std::string& dtypeName, int64_t rows, int64_t hidden,
                      SampleTimer& timer) {
  const auto dtype = parseDtype(dtypeName);
  const auto opts = torch::TensorOptions().dtype(dtype).device(device);
  torch::manual_seed(0);
  const auto x = torch::randn({rows, hidden}, opts);
  const auto paramOpts = options.float32Params ? opts.dtype(torch::kFloat32) : opts;
  const auto w = torch::randn({hidden}, paramOpts);
  const auto b = torch::randn({hidden}, paramOpts);
  // ATen's variants take the parameters in the input's dtype (not every ATen norm kernel mixes
  // dtypes on every device), so a float32-parameter run changes only our kernels' inputs.
  const auto wAten = w.to(dtype), bAten = b.to(dtype);
  const auto residual = torch::randn({rows, hidden}, opts);
  auto out = torch::empty_like(x);
  auto sum = torch::empty_like(x);
  const double eps = options.eps;
  const std::vector<int64_t> shape{hidden};

  const double element = static_cast<double>(x.element_size());
  const double activations = 2.0 * static_cast<double>(rows * hidden) * element;
  const double params = static_cast<double>(hidden) * static_cast<double>(w.element_size());
  std::vector<Variant> variants{
      {kCopyVariant, activations, [&] { out.copy_(x); }},
      {kOursRmsVariant, activations + 2 * params,
       [&] { foldnorm::ops::rmsNormOut(out, x, shape, w, b, eps); }},
      {kAtenLayerVariant, activations + 2 * params, [&] { torch::layer_norm(x, shape, wAten, bAten, eps); }},
      {kAtenRmsVariant, activations + params, [&] { at::rms_norm(x, shape, wAten, eps); }},
      // An inserted centering as the fold writes it; an op of ours could at best reach the copy.
      {kAtenCenterVariant, activations, [&] { at::sub_out(out, x, x.mean(-1, /*keepdim=*/true)); }},
      {kOursLayerVariant, activations + 2 * params,
       [&] { foldnorm::ops::layerNormOut(out, x, shape, w, b, eps); }},
      // The residual-add + norm pair. Bytes: what the pair must move at least (read x and the
      // residual, write the norm and the sum: 4 passes), for all three, so GB/s compares them.
      {kOursAddRmsVariant, 2 * activations + 2 * params,
       [&] { foldnorm::ops::addRmsNormOut(out, sum, x, residual, shape, w, b, eps); }},
      {kAtenAddOursRmsVariant, 2 * activations + 2 * params,
       [&] {
         at::add_out(sum, x, residual);
         foldnorm::ops::rmsNormOut(out, sum, shape, w, b, eps);
       }},
      {kAtenAddLayerVariant, 2 * activations + 2 * params,
       [&] {
         at::add_out(sum, x, residual);
         torch::layer_norm(sum, shape, wAten, bAten, eps);
       }},
  };

  for (int i = 0; i < options.warmup; ++i) {
    for (auto& v : variants) v.run();
  }
  timer.settle();
  std::vector<std::vector<double>> samples(variants.size());
  for (int rep = 0; rep < options.reps; ++rep) {
    // Rotate the order so no variant always follows the same neighbour (caches, frequency).
    for (std::size_t k = 0; k < variants.size(); ++k) {
      const std::size_t i = (k + static_cast<std::size_t>(rep)) % variants.size();
      samples[i].push_back(timer.timeMs(variants[i].run));
    }
  }

  BenchNormCase result;
  result.dtype = dtypeName;
  result.rows = rows;
  result.hidden = hidden;
  for (std::size_t i = 0; i < variants.size(); ++i) {
    VariantTiming t;
    t.name = variants[i].name;
    t.bytes = variants[i].bytes;
    t.medianMs = quantile(samples[i], 0.5);
    t.p10Ms = quantile(samples[i], 0.1);
    t.p90Ms = quantile(samples[i], 0.9);
    t.gbPerSecond = t.bytes / (t.medianMs * 1e-3) / 1e9;
    result.variants.push_back(t);
  }
  return result;
}

}  // namespace

const VariantTiming& BenchNormCase::variant(const std::string& name) const {
  for (const auto& v : variants) {
    if (v.name == name) return v;
  }
  throw Error("bench-norm: no variant named " + name);
}

BenchNormReport runNormBench(const BenchNormOptions& options, std::ostream& progress) {
  checkOptions(options);
  if (options.threads < 0) throw SettingError("threads", "the thread count must not be negative (0: LibTorch's default)");
  if (options.threads > 0) at::set_num_threads(options.threads);
  const torch::Device device(options.device == "cuda" ? torch::kCUDA : torch::kCPU);
  const CpuIsaScope isaScope(options.cpuIsa);
  BenchNormReport report;
  report.device = options.device;
  report.float32Params = options.float32Params;
  report.threads = at::get_num_threads();
  report.cpuKernelIsa = foldnorm::ops::toString(foldnorm::ops::cpuKernelIsa());
  report.l2Flushed = device.is_cuda() && options.flushL2;
  report.reps = options.reps;
  report.warmup = options.warmup;
  if (device.is_cuda()) {
    report.outputs = "ours and copy write into preallocated outputs; ATen ops allocate per call "
                     "from the CUDA caching allocator";
  } else {
    keepHeapWarm();
    report.outputs = "ours and copy write into preallocated outputs; ATen ops allocate per call "
                     "from a warm heap (glibc mmap off, no trim), so no page faults are timed";
  }

  torch::NoGradGuard noGrad;
  SampleTimer timer(options, device);
  const std::size_t total = options.dtypes.size() * options.hidden.size() * options.rows.size();
  std::size_t done = 0;
  for (const auto& dtype : options.dtypes) {
    for (auto hidden : options.hidden) {
      for (auto rows : options.rows) {
        ++done;
        progress << format("[%zu/%zu] %s %lld x %lld ...", done, total, dtype.c_str(),
                           static_cast<long long>(rows), static_cast<long long>(hidden))
                 << std::flush;
        report.cases.push_back(runCase(options, device, dtype, rows, hidden, timer));
        const auto& c = report.cases.back();
        progress << format(" rms %.3f ms, aten LN %.3f ms, copy %.3f ms\n",
                                c.variant(kOursRmsVariant).medianMs,
                                c.variant(kAtenLayerVariant).medianMs,
                                c.variant(kCopyVariant).medianMs);
      }
    }
  }
  return report;
}

nlohmann::json toJson(const BenchNormReport& report) {
  nlohmann::json cases = nlohmann::json::array();
  for (const auto& c : report.cases) {
    nlohmann::json variants = nlohmann::json::array();
    const double copyMs = c.variant(kCopyVariant).medianMs;
    const double copyGbPerSecond = c.variant(kCopyVariant).gbPerSecond;
    const double atenLnMs = c.variant(kAtenLayerVariant).medianMs;
    for (const auto& v : c.variants) {
      variants.push_back({{"name", v.name},
                          {"bytes", v.bytes},
                          {"median_ms", v.medianMs},
                          {"p10_ms", v.p10Ms},
                          {"p90_ms", v.p90Ms},
                          {"gb_per_s", v.gbPerSecond},
                          {"time_vs_copy", v.medianMs / copyMs},
                          {"bandwidth_vs_copy", v.gbPerSecond / copyGbPerSecond},
                          {"speedup_vs_aten_layer_norm", atenLnMs / v.medianMs}});
    }
    const double fusedMs = c.variant(kOursAddRmsVariant).medianMs;
    cases.push_back(
        {{"dtype", c.dtype},
         {"rows", c.rows},
         {"hidden", c.hidden},
         {"variants", variants},
         {"fused_speedup_vs_aten_add_rms_norm", c.variant(kAtenAddOursRmsVariant).medianMs / fusedMs},
         {"fused_speedup_vs_aten_add_layer_norm", c.variant(kAtenAddLayerVariant).medianMs / fusedMs}});
  }
  return {{"device", report.device},
          {"threads", report.threads},
          {"float32_params", report.float32Params},
          {"cpu_kernel_isa", report.cpuKernelIsa},
          {"l2_flushed", report.l2Flushed},
          {"reps", report.reps},
          {"warmup", report.warmup},
          {"outputs", report.outputs},
          {"cases", cases}};
}

std::string formatNormBenchTable(const BenchNormReport& report) {
  const char* l2 = "";
  if (report.device == "cuda") {
    l2 = report.l2Flushed ? ", L2 flushed before each sample" : ", L2 warm";
  }
  std::string s = format(
      "device %s, %d threads, CPU kernels %s, %d rounds after %d warm-up%s%s\n%s\n"
      "median and p10-p90 over the rounds; GB/s = bytes read + written / median (the add "
      "variants: the 4 passes the pair needs at least); /copy = time / copy time; BW/copy = GB/s / "
      "copy GB/s\n",
      report.device.c_str(), report.threads, report.cpuKernelIsa.c_str(), report.reps,
      report.warmup, l2, report.float32Params ? ", float32 weight and bias" : "", report.outputs.c_str());
  for (const auto& c : report.cases) {
    const double copyMs = c.variant(kCopyVariant).medianMs;
    const double atenLnMs = c.variant(kAtenLayerVariant).medianMs;
    s += format("\n%s [%lld x %lld]\n", c.dtype.c_str(), static_cast<long long>(c.rows),
                static_cast<long long>(c.hidden));
    const double copyGbPerSecond = c.variant(kCopyVariant).gbPerSecond;
    s += format("  %-29s %10s %21s %8s %8s %8s %10s\n", "variant", "median ms", "p10-p90 ms",
                "GB/s", "/copy", "BW/copy", "x aten LN");
    for (const auto& v : c.variants) {
      const std::string spread = format("%.3f-%.3f", v.p10Ms, v.p90Ms);
      s += format("  %-29s %10.3f %21s %8.1f %8.2f %8.2f %10.2f\n", v.name.c_str(), v.medianMs,
                  spread.c_str(), v.gbPerSecond, v.medianMs / copyMs,
                  v.gbPerSecond / copyGbPerSecond, atenLnMs / v.medianMs);
    }
    const double fusedMs = c.variant(kOursAddRmsVariant).medianMs;
    s += format("  fused add+RMSNorm: %.2fx aten::add+foldnorm::rms_norm, %.2fx "
                "aten::add+aten::layer_norm\n",
                c.variant(kAtenAddOursRmsVariant).medianMs / fusedMs,
                c.variant(kAtenAddLayerVariant).medianMs / fusedMs);
  }
  return s;
}

}  // namespace foldnorm::bench
