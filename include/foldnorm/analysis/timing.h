// How long the foldability analysis takes on an imported graph: the analysis alone (no load, no
// shape-recording run), repeated, median and spread. Used by `foldnorm bench-analysis` and by
// analyses/foldability_table.cpp.
#pragma once

#include <cstddef>
#include <vector>

#include "foldnorm/analysis/analysis.h"

namespace foldnorm {

struct AnalysisTiming {
  std::size_t nodes = 0;   // graph nodes (ops, constants, plumbing)
  std::size_t values = 0;  // SSA values (edges fan out from these)
  std::size_t uses = 0;    // node inputs: the edges the traversal walks
  int reps = 0;
  double medianMs = 0;
  double p10Ms = 0;
  double p90Ms = 0;
  double minMs = 0;
  std::vector<double> samplesMs;
};

/// Runs analyzeFoldability(graph, options) `warmup` + `reps` times and times each run.
AnalysisTiming timeAnalysis(const Graph& graph, const AnalysisOptions& options, int reps, int warmup = 2);

}  // namespace foldnorm
