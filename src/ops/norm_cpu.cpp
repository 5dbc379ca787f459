// CPU implementation of foldnorm::rms_norm / foldnorm::layer_norm (+ .out): argument checks,
// contiguity, the choice of instruction set, and the CPU column of the op table (norm_op_table.h).
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/Context.h>
#include <ATen/Version.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <array>
#include <atomic>
#include <string>
#include <tuple>

#include "foldnorm/ops/rms_norm.h"
#include "norm_common.h"
#include "norm_cpu_kernels.h"
#include "norm_op_table.h"

namespace foldnorm::ops {
namespace {

bool cpuHasAvx2() {
#if defined(__x86_64__) || defined(_M_X64)
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
         __builtin_cpu_supports("f16c");
#else
  return false;
#endif
}

bool cpuHasAvx512() {
#if defined(__x86_64__) || defined(_M_X64)
  return cpuHasAvx2() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
#else
  return false;
#endif
}

CpuKernelIsa automaticIsa() {
  // Follow ATen's own choice, so ATEN_CPU_CAPABILITY=default (or avx2) turns ours down too.
  static const CpuKernelIsa isa = [] {
    const std::string aten = at::get_cpu_capability();
    if (cpuHasAvx512() && aten == "AVX512") return CpuKernelIsa::kAvx512;
    if (cpuHasAvx2() && aten != "DEFAULT") return CpuKernelIsa::kAvx2;
    return CpuKernelIsa::kPortable;
  }();
  return isa;
}

// -1: automatic; otherwise a forced CpuKernelIsa.
std::atomic<int> forcedIsa{-1};

void runNormCpu(const NormCpuCall& call) {
  if (cpuKernelIsa() == CpuKernelIsa::kAvx512) return normCpuAvx512(call);
  if (cpuKernelIsa() == CpuKernelIsa::kAvx2) return normCpuAvx2(call);
  normCpuPortable(call);
}

// Rows from which a 16-bit weight/bias is widened to float32 once per call: the kernels then
// convert only x and y per chunk instead of x, w, b and y (the conversions, not memory, bounded
// 16-bit rows on this CPU). Exact: every 16-bit value is a float32 value, and the 16-bit input
// with float32 parameters path computes the same float expressions, so the bits do not change.
// Fewer rows keep the parameters as they are (the widening would cost more than it saves).
constexpr int64_t kWidenParametersMinRows = 16;

at::Tensor kernelParameter(const at::Tensor& x, const NormShape& shape,
                           const std::optional<at::Tensor>& param) {
  at::Tensor p = contiguousOrUndefined(param);
  const bool reduced = x.scalar_type() == at::kBFloat16 || x.scalar_type() == at::kHalf;
  if (p.defined() && reduced && p.scalar_type() == x.scalar_type() &&
      shape.rows >= kWidenParametersMinRows) {
    return p.to(at::kFloat);
  }
  return p;
}

// The CPU column of the op table (norm_op_table.h); the backward is norm_backward.cpp's.
struct CpuKernels {
  static constexpr const char* kName = "CPU";
  static bool holds(const at::Tensor& input) { return input.device().is_cpu(); }

  static void normRows(NormKind kind, const NormShape& shape, const at::Tensor& input,
                       const std::optional<at::Tensor>& weight,
                       const std::optional<at::Tensor>& bias, double eps, at::Tensor& out) {
    const at::Tensor x = input.contiguous();
    paramTypeOf(opName(kind), x, weight.value_or(at::Tensor()), bias.value_or(at::Tensor()));
    const at::Tensor w = kernelParameter(x, shape, weight);
    const at::Tensor b = kernelParameter(x, shape, bias);

    NormCpuCall call;
    call.kind = kind;
    call.dataType = x.scalar_type();
    call.paramType = paramTypeOf(opName(kind), x, w, b);  // after widening (checked above)
    describeRows(call, shape, x, w, b, out, eps);
    runNormCpu(call);
  }

  static void addRmsNormRows(const NormShape& shape, const at::Tensor& input,
                             const at::Tensor& residual, const std::optional<at::Tensor>& weight,
                             const std::optional<at::Tensor>& bias, double eps, at::Tensor& out,
                             at::Tensor& sum) {
    // Non-contiguous operands are copied once; the kernel reads rows at any alignment.
    const at::Tensor x = input.contiguous();
    const at::Tensor r = residual.contiguous();
    paramTypeOf(kAddRmsNormName, x, weight.value_or(at::Tensor()), bias.value_or(at::Tensor()));
    const at::Tensor w = kernelParameter(x, shape, weight);
    const at::Tensor b = kernelParameter(x, shape, bias);

    NormCpuCall call;
    call.kind = NormKind::kRms;
    call.dataType = x.scalar_type();
    call.paramType = paramTypeOf(kAddRmsNormName, x, w, b);  // after widening
    describeRows(call, shape, x, w, b, out, eps);
    call.residual = r.const_data_ptr();
    call.sum = sum.mutable_data_ptr();
    runNormCpu(call);
  }

  static std::tuple<at::Tensor, at::Tensor, at::Tensor> normBackward(
      NormKind kind, const at::Tensor& gradOut, const at::Tensor& input,
      at::IntArrayRef normalizedShape, const std::optional<at::Tensor>& weight,
      const std::optional<at::Tensor>& bias, double eps, std::array<bool, 3> outputMask) {
    return normBackwardCpu(kind, gradOut, input, normalizedShape, weight, bias, eps, outputMask);
  }
};

}  // namespace

void runNormBackwardCpu(const NormBackwardCpuCall& call) {
  // The backward has no AVX-512 rows: AVX2 there.
  if (cpuKernelIsa() != CpuKernelIsa::kPortable) return normBackwardCpuAvx2(call);
  normBackwardCpuPortable(call);
}

CpuKernelIsa cpuKernelIsa() {
  const int forced = forcedIsa.load();
  return forced < 0 ? automaticIsa() : static_cast<CpuKernelIsa>(forced);
}

void setCpuKernelIsa(std::optional<CpuKernelIsa> isa) {
  if (isa == CpuKernelIsa::kAvx2) {
    TORCH_CHECK(cpuHasAvx2(), "setCpuKernelIsa: this CPU has no AVX2/FMA/F16C; use kPortable");
  }
  if (isa == CpuKernelIsa::kAvx512) {
    TORCH_CHECK(cpuHasAvx512(), "setCpuKernelIsa: this CPU has no AVX-512 F/BW/VL/DQ; use kAvx2 or kPortable");
  }
  forcedIsa.store(isa ? static_cast<int>(*isa) : -1);
}

const char* toString(CpuKernelIsa isa) {
  if (isa == CpuKernelIsa::kAvx512) return "avx512";
  return isa == CpuKernelIsa::kAvx2 ? "avx2" : "portable";
}

TORCH_LIBRARY_IMPL(foldnorm, CPU, m) { NormOpTable<CpuKernels>::registerKernels(m); }

}  // namespace foldnorm::ops
