// The analysis timer behind `foldnorm bench-analysis` and analyses/foldability_table.cpp: it
// times the analysis itself, reports the graph's size, and its statistics are consistent.
#include <catch2/catch.hpp>

#include "foldnorm/analysis/timing.h"
#include "foldnorm/common/error.h"
#include "foldnorm/common/measure.h"
#include "helpers.h"

using namespace foldnorm;

TEST_CASE("the analysis timer reports the graph's size and ordered statistics", "[analysis][timing]") {
  std::string ir =
      "graph(%x : Tensor, %fc__weight : Tensor, %fc__bias : Tensor, %ln_w : Tensor, %ln_b : Tensor):\n"
      "  %y : Tensor = aten::linear(%x, %fc__weight, %fc__bias)\n" +
      test::layerNorm("y", "z", 8) + "  return (%z)\n";
  IrModel m{ir,
            {parseInputSpec("2x3x4")},
            {{"fc__weight", parseInputSpec("8x4")},
             {"fc__bias", parseInputSpec("8")},
             {"ln_w", parseInputSpec("8")},
             {"ln_b", parseInputSpec("8")}}};
  auto a = test::analyzeIr(m);
  auto t = timeAnalysis(a.model.graph, {}, 7);
  CHECK(t.reps == 7);
  CHECK(t.samplesMs.size() == 7);
  CHECK(t.nodes == a.model.graph.nodeCount());
  CHECK(t.values == a.model.graph.valueCount());
  std::size_t uses = 0;
  for (const auto& n : a.model.graph.nodes()) uses += n.inputs.size();
  CHECK(t.uses == uses);
  CHECK(t.minMs > 0);
  CHECK(t.minMs <= t.p10Ms);
  CHECK(t.p10Ms <= t.medianMs);
  CHECK(t.medianMs <= t.p90Ms);
  CHECK_THROWS_AS(timeAnalysis(a.model.graph, {}, 0), Error);
}

TEST_CASE("format, the one printf helper, sizes its buffer", "[common][timing]") {
  // The fold's reports and progress lines use it too (fold_internal.h's strf): a long module
  // path or plan must come back whole, where a fixed 1024-byte buffer cut it.
  const std::string path(3000, 'p');
  const std::string s = format("untie %s (%s copied)", path.c_str(), humanBytes(256000).c_str());
  CHECK(s == "untie " + path + " (250.0 KiB copied)");
  CHECK(format("%d", 0) == "0");
  CHECK(format("%s", "").empty());
}
