// Entry points of the CPU row kernels, compiled once per instruction set
// (norm_cpu_portable.cpp, norm_cpu_avx2.cpp) and picked at run time by norm_cpu.cpp.
#pragma once

#include <c10/core/ScalarType.h>

#include <cstdint>

#include "norm_common.h"

namespace foldnorm::ops {

/// One call on contiguous rows: y[r, :] = norm(x[r, :]) * w + b for r < rows.
/// w and b may be null; they have `paramType` (the input's type, or float for 16-bit inputs).
struct NormCpuCall {
  NormKind kind = NormKind::kRms;
  c10::ScalarType dataType = c10::ScalarType::Float;
  c10::ScalarType paramType = c10::ScalarType::Float;
  const void* x = nullptr;
  const void* weight = nullptr;
  const void* bias = nullptr;
  void* y = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;
  double eps = 0;
};

void normCpuPortable(const NormCpuCall& call);
void normCpuAvx2(const NormCpuCall& call);

}  // namespace foldnorm::ops
