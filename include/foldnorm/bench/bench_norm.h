// `foldnorm bench-norm`: the norm kernels side by side in one run. Per shape and dtype, our RMSNorm,
// aten::layer_norm, aten::rms_norm, our fused LayerNorm, the residual-add + norm pair (our fused
// add_rms_norm, aten::add + our rms_norm, aten::add + aten::layer_norm) and a memory copy are
// timed interleaved (the variant order rotates every round), after warm-up; each variant reports
// median and p10-p90 over the rounds and effective bandwidth (bytes read + written / median).
//
// Outputs: ours and the copy write into preallocated outputs. ATen's ops have no out= form, so on
// the CPU they allocate per call from a heap kept warm (glibc mmap off, no trimming: no page faults
// of fresh >= 32 MiB allocations are timed, see /work/shared/notes.md); on CUDA from the caching
// allocator. On CUDA every sample is timed with events on the current stream and, unless warm L2
// is asked for, a 256 MiB buffer (over twice the L2 of any current NVIDIA GPU) is zeroed before it, outside
// the events, as Triton's do_bench does.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

namespace foldnorm::bench {

struct BenchNormOptions {
  std::string device = "cpu";  // cpu | cuda
  std::vector<std::string> dtypes{"float32", "bfloat16"};
  std::vector<int64_t> hidden{768, 1024, 2048, 4096, 8192};
  std::vector<int64_t> rows{512, 2048, 8192, 16384};
  int reps = 30;
  int warmup = 3;
  double eps = 1e-5;
  bool flushL2 = true;  // CUDA only
  int threads = 0;      // CPU intra-op threads; 0: LibTorch's default
  // Instruction set of our CPU kernels for the run: auto (the library's choice), avx512, avx2 or
  // portable; one this CPU lacks is a SettingError("cpu-isa"). ATen's own kernels are untouched,
  // so the copy and aten variants stay the same between runs that differ only here.
  std::string cpuIsa = "auto";
  // Weight and bias in float32 whatever the input's dtype (autocast-style 16-bit models; on the
  // CPU our kernels take such parameters as they are, on CUDA the register path loads them as two
  // 16-byte vectors per vector of x). Off: the input's dtype.
  bool float32Params = false;
};

struct VariantTiming {
  std::string name;
  double bytes = 0;  // read + written per call
  double medianMs = 0;
  double p10Ms = 0;
  double p90Ms = 0;
  double gbPerSecond = 0;  // bytes / median
};

struct BenchNormCase {
  std::string dtype;
  int64_t rows = 0;
  int64_t hidden = 0;
  std::vector<VariantTiming> variants;  // kVariantNames order

  const VariantTiming& variant(const std::string& name) const;
};

struct BenchNormReport {
  std::string device;
  bool float32Params = false;
  int threads = 0;
  std::string cpuKernelIsa;
  bool l2Flushed = false;
  int reps = 0;
  int warmup = 0;
  std::string outputs;  // how outputs were provided, said with the numbers
  std::vector<BenchNormCase> cases;
};

inline constexpr const char* kCopyVariant = "copy";
inline constexpr const char* kOursRmsVariant = "foldnorm::rms_norm";
inline constexpr const char* kOursLayerVariant = "foldnorm::layer_norm";
inline constexpr const char* kAtenLayerVariant = "aten::layer_norm";
inline constexpr const char* kAtenRmsVariant = "aten::rms_norm";
// The residual-add + norm pair: fused, and the two unfused forms it replaces.
inline constexpr const char* kOursAddRmsVariant = "foldnorm::add_rms_norm";
inline constexpr const char* kAtenAddOursRmsVariant = "aten::add+foldnorm::rms_norm";
inline constexpr const char* kAtenAddLayerVariant = "aten::add+aten::layer_norm";
// What the fold writes for an inserted centering (docs/method.md section 8): x - x.mean(-1, keepdim).
inline constexpr const char* kAtenCenterVariant = "aten::mean+sub (centering)";

/// Checks the options (throws foldnorm::Error naming the bad one) and runs every shape;
/// progress lines go to `progress`.
BenchNormReport runNormBench(const BenchNormOptions& options, std::ostream& progress);

nlohmann::json toJson(const BenchNormReport& report);

/// A plain-text table: one block per case, ratios against the copy and against aten::layer_norm.
std::string formatNormBenchTable(const BenchNormReport& report);

}  // namespace foldnorm::bench
