// Resident memory of a whole fold, step by step: import (file read, load, shape recording),
// analysis, fold (copy, plan), verification, save. What docs/performance.md's memory table and
// the memory regression test measure (include/foldnorm/common/memory.h says how).
#pragma once

#include <string>
#include <vector>

#include "foldnorm/common/memory.h"
#include "foldnorm/fold/fold.h"

namespace foldnorm {

struct FoldMemoryOptions {
  std::vector<InputSpec> inputs;  // empty: the spec embedded in the model
  FoldOptions fold;
};

struct FoldMemoryReport {
  std::string model;
  int64_t modelBytes = 0;  // the model's tensors (parameters, buffers, tensor constants), once each
  int64_t fileBytes = 0;
  int64_t baseline = 0;    // resident before the import (the process with LibTorch loaded)
  bool exactPeaks = false;  // false: the kernel refused to reset the high-water mark
  std::vector<StepMemory::Step> steps;
  bool verified = false;    // the fold passed its verification (and was saved)
  double worstRelative64 = 0, worstRelativeSaved64 = 0, worstRelative32 = 0;
  int foldedLayerNorms = 0;
  /// The worst step's peak over the model's bytes, counting only what the fold added to the
  /// process (peak - baseline): LibTorch's own few hundred MB are not the model's.
  double peakRatio() const;
};

/// Imports `modelPath`, analyses, folds, verifies and (when it verifies) saves to `outPath`,
/// recording each step's peak resident size. Throws what the steps throw.
FoldMemoryReport measureFoldMemory(const std::string& modelPath, const std::string& outPath,
                                   const FoldMemoryOptions& options = {});

/// The table for docs/performance.md (markdown) with the model, its bytes and the verdict.
std::string memoryTable(const FoldMemoryReport& report);

}  // namespace foldnorm
