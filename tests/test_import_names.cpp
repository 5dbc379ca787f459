// Names of LayerNorms in Python traces with containers inside containers (issue 13, wrong names):
// every LN is named by its weight's module, so no two share a name.
#include <catch2/catch.hpp>

#include <set>

#include "foldnorm/graph/module_paths.h"
#include "helpers.h"

using namespace foldnorm;

TEST_CASE("nested ModuleLists: every LayerNorm path is unique and is its weight's module", "[import][names][fixtures]") {
  const auto file = GENERATE(as<std::string>{}, "nested_module_lists.pt", "preln_logits_only.pt");
  INFO(file);
  REQUIRE(test::haveFixture(file));
  const auto model = importTorchScript(test::fixturePath(file));
  const auto result = analyzeFoldability(model.graph);
  REQUIRE(result.layerNorms.size() >= 5);
  std::set<std::string> seen;
  for (const auto& v : result.layerNorms) {
    INFO("LN at " << v.info.modulePath);
    CHECK(seen.insert(v.info.modulePath).second);  // unique
    const auto& weight = model.graph.input(v.info.node, 2);
    REQUIRE(weight.param != kNone);
    CHECK(v.info.modulePath == parentModule(model.graph.parameter(weight.param).path));
  }
  if (file == "nested_module_lists.pt") {
    CHECK(seen.count("layer_norm.0"));  // a stage's final LN, not named after its container
    CHECK(seen.count("block.1.0.ln1"));
  }
}
