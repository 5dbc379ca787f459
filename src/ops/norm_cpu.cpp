// CPU implementation of foldnorm::rms_norm / foldnorm::layer_norm (+ .out): argument checks,
// contiguity, the choice of instruction set, and the dispatcher registration.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/Context.h>
#include <ATen/Version.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <atomic>

#include "foldnorm/ops/rms_norm.h"
#include "norm_common.h"
#include "norm_cpu_kernels.h"

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

CpuKernelIsa automaticIsa() {
  // Follow ATen's own choice, so ATEN_CPU_CAPABILITY=default turns ours off too.
  static const CpuKernelIsa isa = cpuHasAvx2() && at::get_cpu_capability() != "DEFAULT"
                                      ? CpuKernelIsa::kAvx2
                                      : CpuKernelIsa::kPortable;
  return isa;
}

// -1: automatic; otherwise a forced CpuKernelIsa.
std::atomic<int> forcedIsa{-1};

at::Tensor& normCpuOut(NormKind kind, const at::Tensor& input, at::IntArrayRef normalizedShape,
                       const std::optional<at::Tensor>& weight,
                       const std::optional<at::Tensor>& bias, double eps, at::Tensor& out) {
  const NormShape shape = checkNormInputs(kind, input, normalizedShape, weight, bias);
  prepareNormOut(kind, input, out);
  TORCH_CHECK(input.device().is_cpu(), opName(kind), ": the CPU kernel got a tensor on ",
              input.device());
  if (shape.rows == 0 || shape.cols == 0) return out;
  const at::Tensor x = input.contiguous();
  const at::Tensor w = contiguousOrUndefined(weight);
  const at::Tensor b = contiguousOrUndefined(bias);

  NormCpuCall call;
  call.kind = kind;
  call.dataType = x.scalar_type();
  call.paramType = w.defined() ? w.scalar_type() : (b.defined() ? b.scalar_type() : x.scalar_type());
  TORCH_CHECK(!w.defined() || !b.defined() || w.scalar_type() == b.scalar_type(), opName(kind),
              ": weight has dtype ", w.scalar_type(), " but bias has dtype ", b.scalar_type(),
              "; give both the same dtype");
  call.x = x.const_data_ptr();
  call.weight = w.defined() ? w.const_data_ptr() : nullptr;
  call.bias = b.defined() ? b.const_data_ptr() : nullptr;
  call.y = out.mutable_data_ptr();
  call.rows = shape.rows;
  call.cols = shape.cols;
  call.eps = eps;
  if (cpuKernelIsa() == CpuKernelIsa::kAvx2) {
    normCpuAvx2(call);
  } else {
    normCpuPortable(call);
  }
  return out;
}

at::Tensor normCpu(NormKind kind, const at::Tensor& input, at::IntArrayRef normalizedShape,
                   const std::optional<at::Tensor>& weight, const std::optional<at::Tensor>& bias,
                   double eps) {
  // Check before allocating so that a bad call reports its arguments, not an allocation.
  checkNormInputs(kind, input, normalizedShape, weight, bias);
  at::Tensor out = at::empty(input.sizes(), input.options().memory_format(at::MemoryFormat::Contiguous));
  return normCpuOut(kind, input, normalizedShape, weight, bias, eps, out);
}

at::Tensor rmsNormCpu(const at::Tensor& input, at::IntArrayRef normalizedShape,
                      const std::optional<at::Tensor>& weight,
                      const std::optional<at::Tensor>& bias, double eps) {
  return normCpu(NormKind::kRms, input, normalizedShape, weight, bias, eps);
}

at::Tensor& rmsNormCpuOut(const at::Tensor& input, at::IntArrayRef normalizedShape,
                          const std::optional<at::Tensor>& weight,
                          const std::optional<at::Tensor>& bias, double eps, at::Tensor& out) {
  return normCpuOut(NormKind::kRms, input, normalizedShape, weight, bias, eps, out);
}

at::Tensor layerNormCpu(const at::Tensor& input, at::IntArrayRef normalizedShape,
                        const std::optional<at::Tensor>& weight,
                        const std::optional<at::Tensor>& bias, double eps) {
  return normCpu(NormKind::kLayer, input, normalizedShape, weight, bias, eps);
}

at::Tensor& layerNormCpuOut(const at::Tensor& input, at::IntArrayRef normalizedShape,
                            const std::optional<at::Tensor>& weight,
                            const std::optional<at::Tensor>& bias, double eps, at::Tensor& out) {
  return normCpuOut(NormKind::kLayer, input, normalizedShape, weight, bias, eps, out);
}

}  // namespace

CpuKernelIsa cpuKernelIsa() {
  const int forced = forcedIsa.load();
  return forced < 0 ? automaticIsa() : static_cast<CpuKernelIsa>(forced);
}

void setCpuKernelIsa(std::optional<CpuKernelIsa> isa) {
  if (isa == CpuKernelIsa::kAvx2) {
    TORCH_CHECK(cpuHasAvx2(), "setCpuKernelIsa: this CPU has no AVX2/FMA/F16C; use kPortable");
  }
  forcedIsa.store(isa ? static_cast<int>(*isa) : -1);
}

const char* toString(CpuKernelIsa isa) { return isa == CpuKernelIsa::kAvx2 ? "avx2" : "portable"; }

TORCH_LIBRARY_IMPL(foldnorm, CPU, m) {
  m.impl("rms_norm", &rmsNormCpu);
  m.impl("rms_norm.out", &rmsNormCpuOut);
  m.impl("layer_norm", &layerNormCpu);
  m.impl("layer_norm.out", &layerNormCpuOut);
}

}  // namespace foldnorm::ops
