// Every zoo architecture's verdicts, as docs/architectures.md explains them (tiny presets: the
// same blocks as the published sizes, fewer of them). Each expectation follows from the method:
// pre-LN streams fold, post-LN ones stop at the previous LN's affine output, depthwise convs and
// layer scale break, a stream read directly by a linear (OPT-350m's project_in) is unsafe, and
// Swin's patch merging concatenates pixels shifted by different amounts.
#include <catch2/catch.hpp>

#include <filesystem>
#include <map>
#include <set>

#include "foldnorm/analysis/analysis.h"
#include "foldnorm/fold/fold.h"
#include "foldnorm/import/torchscript.h"
#include "foldnorm/zoo/zoo.h"
#include "helpers.h"

using namespace foldnorm;
namespace fs = std::filesystem;

namespace {

struct Expected {
  std::size_t layerNorms;
  std::set<std::string> foldable;
  std::map<std::string, std::size_t> notFoldable;  // reason (as the reports name it) -> count
};

std::map<std::string, Expected> expectations() {
  const std::string breaker = toString(VerdictReason::Breaker), unsafe = toString(VerdictReason::UnsafeShift);
  return {
      {"gpt2", {5, {"transformer.h.0.ln_1", "transformer.h.0.ln_2", "transformer.h.1.ln_1", "transformer.h.1.ln_2", "transformer.ln_f"}, {}}},
      {"bert", {5, {"embeddings.LayerNorm"}, {{breaker, 4}}}},
      {"opt", {5, {"model.decoder.layers.0.self_attn_layer_norm", "model.decoder.layers.0.final_layer_norm",
                   "model.decoder.layers.1.self_attn_layer_norm", "model.decoder.layers.1.final_layer_norm",
                   "model.decoder.final_layer_norm"}, {}}},
      {"opt350m", {4, {}, {{unsafe, 1}, {breaker, 3}}}},
      {"phi", {3, {"model.layers.0.input_layernorm", "model.layers.1.input_layernorm", "model.final_layernorm"}, {}}},
      {"llama", {0, {}, {}}},
      {"vit", {5, {"encoder.layers.encoder_layer_0.ln_1", "encoder.layers.encoder_layer_0.ln_2",
                   "encoder.layers.encoder_layer_1.ln_1", "encoder.layers.encoder_layer_1.ln_2", "encoder.ln"}, {}}},
      {"swin_t", {21, {"features.0.2", "features.7.0.norm1", "features.7.0.norm2", "features.7.1.norm1",
                       "features.7.1.norm2", "norm"}, {{breaker, 5}, {unsafe, 10}}}},
      // The layer scales are absorbed (issue 14), so the downsample LNs' inputs can be made
      // mean-zero, but the next stage's depthwise convolution reads the stream: unsafe.
      {"convnext_t", {10, {"features.0.1"}, {{breaker, 6}, {unsafe, 3}}}},
  };
}


}  // namespace

TEST_CASE("every zoo architecture gets the verdicts the method predicts, and its fold verifies", "[zoo][analysis]") {
  auto all = expectations();
  REQUIRE(all.size() == zooModels().size());  // a new zoo model needs its expectation here
  auto name = GENERATE_COPY(from_range([&] {
    std::vector<std::string> names;
    for (const auto& m : zooModels()) names.push_back(m.name);
    return names;
  }()));
  INFO(name);
  REQUIRE(all.count(name));
  const auto& want = all.at(name);
  test::ScratchDir scratch("foldnorm-test-verdicts");
  auto path = (scratch.path / (name + ".pt")).string();
  ZooBuildOptions o;
  o.preset = "tiny";
  buildZooModel(name, path, o);
  auto model = importTorchScript(path);
  auto result = analyzeFoldability(model.graph);
  std::set<std::string> foldable;
  std::map<std::string, std::size_t> reasons;
  std::string explanations;
  for (const auto& v : result.layerNorms) {
    if (v.foldable) foldable.insert(v.info.modulePath);
    else ++reasons[toString(v.reason)], explanations += v.info.modulePath + ": " + v.explanation + "\n";
  }
  INFO(explanations);
  CHECK(result.layerNorms.size() == want.layerNorms);
  CHECK(foldable == want.foldable);
  CHECK(reasons == want.notFoldable);
  if (!foldable.empty()) {
    FoldOptions fo;
    fo.randomInputs = 1;
    auto folded = foldModel(model, result, fo);
    CHECK(folded.report.verification.float64Equivalent);
    CHECK(folded.report.verification.worstRelative64 < 1e-10);
  }
}
