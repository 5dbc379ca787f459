// Shared by the CPU op tests (fused add, gradients): the instruction sets to run on this CPU.
#pragma once

#include <c10/util/Exception.h>

#include <optional>
#include <vector>

#include "foldnorm/ops/rms_norm.h"

namespace foldnorm::test {

/// The portable kernels always, the AVX2 ones when this CPU has AVX2/FMA/F16C, the AVX-512 ones
/// when it has AVX-512 F/BW/VL/DQ.
inline std::vector<ops::CpuKernelIsa> isasOnThisCpu() {
  std::vector<ops::CpuKernelIsa> isas{ops::CpuKernelIsa::kPortable};
  for (auto isa : {ops::CpuKernelIsa::kAvx2, ops::CpuKernelIsa::kAvx512}) {
    try {
      ops::setCpuKernelIsa(isa);
      isas.push_back(isa);
    } catch (const c10::Error&) {
    }
  }
  ops::setCpuKernelIsa(std::nullopt);
  return isas;
}

/// Forces one instruction set for a scope, then back to the automatic choice.
struct IsaScope {
  explicit IsaScope(ops::CpuKernelIsa isa) { ops::setCpuKernelIsa(isa); }
  ~IsaScope() { ops::setCpuKernelIsa(std::nullopt); }
  IsaScope(const IsaScope&) = delete;
  IsaScope& operator=(const IsaScope&) = delete;
};

}  // namespace foldnorm::test
