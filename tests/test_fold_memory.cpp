// The fold's memory (issue 16, item 3): each step's peak resident size over the model's bytes,
// from the same measurement as docs/performance.md's table (analyses/fold_memory.cpp).
#include <catch2/catch.hpp>

#include "foldnorm/fold/fold_memory.h"
#include "foldnorm/torch/torch_model.h"
#include "helpers.h"

using namespace foldnorm;

namespace {

/// A pre-LN residual MLP stack of `blocks` blocks at width `d` (4d hidden), a final LN and a head:
/// about 32 d^2 bytes per block, every LN foldable.
IrModel mlpStack(int blocks, int d) {
  auto D = std::to_string(d), H = std::to_string(4 * d);
  std::string ir = "graph(%x : Tensor, %inp__weight : Tensor, %inp__bias : Tensor, %ln_w : Tensor, %ln_b : Tensor,"
                   " %head__weight : Tensor, %head__bias : Tensor";
  for (int b = 0; b < blocks; ++b)
    for (const char* p : {"fc__weight", "fc__bias", "proj__weight", "proj__bias"})
      ir += ", %b" + std::to_string(b) + "__" + p + " : Tensor";
  ir += "):\n  %approx : str = prim::Constant[value=\"none\"]()\n  %one : int = prim::Constant[value=1]()\n"
        "  %h0 : Tensor = aten::linear(%x, %inp__weight, %inp__bias)\n";
  std::vector<std::pair<std::string, InputSpec>> params{{"inp__weight", parseInputSpec(D + "x64")},
                                                        {"inp__bias", parseInputSpec(D)},
                                                        {"ln_w", parseInputSpec(D + ":float32[0.5,1.5)")},
                                                        {"ln_b", parseInputSpec(D)},
                                                        {"head__weight", parseInputSpec("16x" + D)},
                                                        {"head__bias", parseInputSpec("16")}};
  for (int b = 0; b < blocks; ++b) {
    auto B = "b" + std::to_string(b), in = "h" + std::to_string(b), out = "h" + std::to_string(b + 1);
    ir += test::layerNorm(in, B + "_ln", d) +
          "  %" + B + "_u : Tensor = aten::linear(%" + B + "_ln, %" + B + "__fc__weight, %" + B + "__fc__bias)\n" +
          "  %" + B + "_g : Tensor = aten::gelu(%" + B + "_u, %approx)\n" +
          "  %" + B + "_v : Tensor = aten::linear(%" + B + "_g, %" + B + "__proj__weight, %" + B + "__proj__bias)\n" +
          "  %" + out + " : Tensor = aten::add(%" + in + ", %" + B + "_v, %one)\n";
    params.push_back({B + "__fc__weight", parseInputSpec(H + "x" + D)});
    params.push_back({B + "__fc__bias", parseInputSpec(H)});
    params.push_back({B + "__proj__weight", parseInputSpec(D + "x" + H)});
    params.push_back({B + "__proj__bias", parseInputSpec(D)});
  }
  ir += test::layerNorm("h" + std::to_string(blocks), "final", d) +
        "  %logits : Tensor = aten::linear(%final, %head__weight, %head__bias)\n  return (%logits)\n";
  return {ir, {parseInputSpec("8x64")}, params};
}

}  // namespace

TEST_CASE("a fold's peak resident memory stays within a small multiple of the model's bytes",
          "[fold][memory][bench]") {
  test::ScratchDir dir("foldnorm-memory");
  auto modelPath = (dir.path / "stack.pt").string(), outPath = (dir.path / "stack-folded.pt").string();
  {
    auto ir = importIrModel(mlpStack(6, 512));  // 6 x 8 MiB of weights, about 50 MiB
    torch::jit::ExtraFilesMap extra{{kInputSpecExtraFile, inputSpecsToJson(ir.inputSpecs)}};
    ir.torch->module.save(modelPath, extra);
  }
  FoldMemoryOptions o;
  o.fold.randomInputs = 1;
  auto r = measureFoldMemory(modelPath, outPath, o);
  INFO(memoryTable(r));
  REQUIRE(r.verified);
  CHECK(r.foldedLayerNorms == 7);
  CHECK(r.modelBytes > 48 * 1024 * 1024);
  std::vector<std::string> names;
  for (const auto& s : r.steps) names.push_back(s.name);
  for (const char* step : {"import: read and load the file", "import: load, inline, mirror", "import: shape recording run",
                           "analysis", "fold: copy of the model", "fold: apply the plan",
                           "verify: prepare the float64 runs", "verify: runs (float32, float64, saved file in float64)",
                           "save"})
    CHECK(std::find(names.begin(), names.end(), step) != names.end());
  for (const auto& s : r.steps) CHECK(s.peak >= s.after - 64 * 1024 * 1024);
  // With an upcast after each read (not before each use) this model measured 5.0x; now 3.6-4.1x
  // (goal 2.5x: docs/performance.md says what is left).
  CHECK(r.peakRatio() < 4.5);
}
