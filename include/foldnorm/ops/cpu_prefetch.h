// A setting of foldnorm's CPU norm kernels (libfoldnorm_ops, src/ops/norm_cpu.cpp), kept out of
// rms_norm.h because only a benchmark and the tests switch it.
#pragma once

namespace foldnorm::ops {

/// Whether the CPU RMS row kernels prefetch the rows a pair ahead into L2 (on unless switched
/// off). Off, they issue the same prefetch instructions for the rows they are reading anyway, so
/// `foldnorm bench-norm --compare-prefetch` times what the lead gains in one run. The results
/// are the same bits either way.
bool cpuKernelPrefetch();
void setCpuKernelPrefetch(bool on);

}  // namespace foldnorm::ops
