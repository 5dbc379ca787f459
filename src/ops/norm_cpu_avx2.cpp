// The CPU row kernels built for AVX2 + FMA + F16C, like ATen's own AVX2 kernels: src/CMakeLists.txt
// compiles only this file with -mavx2 -mfma -mf16c, and norm_cpu.cpp calls it only after checking
// that the CPU has those instructions.
#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define CPU_CAPABILITY AVX2
#define CPU_CAPABILITY_AVX2
#define FOLDNORM_NORM_CPU_ENTRY normCpuAvx2
#define FOLDNORM_NORM_BACKWARD_CPU_ENTRY normBackwardCpuAvx2
#include "norm_cpu_rows.h"
#include "norm_cpu_backward_rows.h"
#else
#include <c10/util/Exception.h>

#include "norm_cpu_kernels.h"

namespace foldnorm::ops {
void normCpuAvx2(const NormCpuCall&) {
  TORCH_CHECK(false, "foldnorm ops: the AVX2 kernels were not compiled for this target");
}
void normBackwardCpuAvx2(const NormBackwardCpuCall&) {
  TORCH_CHECK(false, "foldnorm ops: the AVX2 kernels were not compiled for this target");
}
}  // namespace foldnorm::ops
#endif
