// The CPU row kernels built for any x86-64/ARM CPU (ATen's DEFAULT vector implementation, which the
// compiler vectorizes for the baseline ISA). Picked when AVX2 is missing or switched off.
#define CPU_CAPABILITY DEFAULT
#define FOLDNORM_NORM_CPU_ENTRY normCpuPortable
#define FOLDNORM_NORM_BACKWARD_CPU_ENTRY normBackwardCpuPortable
#include "norm_cpu_rows.h"
#include "norm_cpu_backward_rows.h"
