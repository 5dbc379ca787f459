// Entry points of the CPU row kernels, compiled once per instruction set
// (norm_cpu_portable.cpp, norm_cpu_avx2.cpp) and picked at run time by norm_cpu.cpp.
#pragma once

#include <c10/core/ScalarType.h>

#include <cstdint>

#include "norm_common.h"

namespace foldnorm::ops {

/// One call on contiguous rows: y[r, :] = norm(x[r, :]) * w + b for r < rows.
/// w and b may be null; they have `paramType` (the input's type, or float for 16-bit inputs).
/// With `residual` (RMS only: foldnorm::add_rms_norm) the row normalized is
/// s = x + residual rounded to the data type, and s is written to `sum` as well.
struct NormCpuCall {
  NormKind kind = NormKind::kRms;
  c10::ScalarType dataType = c10::ScalarType::Float;
  c10::ScalarType paramType = c10::ScalarType::Float;
  const void* x = nullptr;
  const void* weight = nullptr;
  const void* bias = nullptr;
  void* y = nullptr;
  const void* residual = nullptr;
  void* sum = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;
  double eps = 0;
};

void normCpuPortable(const NormCpuCall& call);
void normCpuAvx2(const NormCpuCall& call);
/// 16-bit RMS rows with float32 parameters in AVX-512, the AVX2 kernel's bits; everything else is
/// normCpuAvx2 (norm_cpu_avx512.cpp).
void normCpuAvx512(const NormCpuCall& call);

/// The backward of one norm call on contiguous rows. gradInput, gradWeightPartial and
/// gradBiasPartial may each be null (not asked for). The partial buffers hold one row of
/// accumulation type (float, double for double) per block of `rowsPerBlock` rows, zeroed by the
/// caller, which sums them in block order: the result does not depend on the thread count.
struct NormBackwardCpuCall {
  NormKind kind = NormKind::kRms;
  c10::ScalarType dataType = c10::ScalarType::Float;
  c10::ScalarType paramType = c10::ScalarType::Float;
  const void* gradOut = nullptr;
  const void* x = nullptr;
  const void* weight = nullptr;
  void* gradInput = nullptr;
  void* gradWeightPartial = nullptr;
  void* gradBiasPartial = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t rowsPerBlock = 1;
  double eps = 0;
};

void normBackwardCpuPortable(const NormBackwardCpuCall& call);
void normBackwardCpuAvx2(const NormBackwardCpuCall& call);

/// The backward kernel of the instruction set in use (norm_cpu.cpp).
void runNormBackwardCpu(const NormBackwardCpuCall& call);

}  // namespace foldnorm::ops
