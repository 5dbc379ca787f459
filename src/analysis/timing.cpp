#include "foldnorm/analysis/timing.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "foldnorm/common/error.h"
#include "foldnorm/common/measure.h"

namespace foldnorm {
AnalysisTiming timeAnalysis(const Graph& graph, const AnalysisOptions& options, int reps, int warmup) {
  if (reps < 1) throw Error("timeAnalysis: reps must be at least 1");
  AnalysisTiming t;
  t.nodes = graph.nodeCount();
  t.values = graph.valueCount();
  for (const auto& n : graph.nodes()) t.uses += n.inputs.size();
  t.reps = reps;
  std::size_t sink = 0;  // keeps the result observable so no run can be optimised away
  for (int i = 0; i < warmup + reps; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    auto result = analyzeFoldability(graph, options);
    auto t1 = std::chrono::steady_clock::now();
    sink += result.layerNorms.size() + result.plan.size();
    if (i >= warmup) t.samplesMs.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
  }
  if (sink == static_cast<std::size_t>(-1)) t.reps = 0;
  t.medianMs = quantile(t.samplesMs, 0.5);
  t.p10Ms = quantile(t.samplesMs, 0.1);
  t.p90Ms = quantile(t.samplesMs, 0.9);
  t.minMs = *std::min_element(t.samplesMs.begin(), t.samplesMs.end());
  return t;
}

}  // namespace foldnorm
