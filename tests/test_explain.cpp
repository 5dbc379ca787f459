// The explanation query (foldnorm/analysis/explain.h) on the three-verdict IR model of
// tests/helpers.h: which nodes, roles and edges explain a fold, a breaker and an unsafe shift.
#include <catch2/catch.hpp>

#include <map>
#include <set>

#include "foldnorm/analysis/explain.h"
#include "foldnorm/graph/dataflow_view.h"
#include "helpers.h"

using namespace foldnorm;

TEST_CASE("an explanation walks back to the leaves, the breaker or the shift's consumer", "[analysis][explain]") {
  const auto a = test::analyzeIr(test::threeBlocks());
  const auto& g = a.model.graph;
  REQUIRE(a.result.layerNorms.size() == 3);
  auto op = [&](const std::string& kind, const std::string& module) {
    for (const auto& n : g.nodes())
      if (n.kind == kind && (module.empty() || n.modulePath == module)) return n.id;
    FAIL("no " << kind << " @ " << module);
    return kNone;
  };
  auto visibleRoles = [&](const LnExplanation& e) {
    std::map<std::string, ExplanationRole> out;
    for (NodeId n : e.nodes)
      if (isVisibleInDataflow(g, n)) out[g.node(n).kind + " @ " + g.node(n).modulePath] = e.role(n);
    return out;
  };

  SECTION("foldable: the LN and its leaf, joined by the edge the leaf's output runs on") {
    REQUIRE(a.ln(0).foldable);
    const auto e = explainLayerNorm(g, a.result, 0);
    CHECK(visibleRoles(e) == std::map<std::string, ExplanationRole>{
                                 {"aten::layer_norm @ h.0.ln", ExplanationRole::SelectedLn},
                                 {"aten::linear @ h.0.fc", ExplanationRole::Leaf}});
    CHECK(e.edges == std::set<std::pair<NodeId, NodeId>>{{op("aten::linear", "h.0.fc"), e.ln}});
    CHECK(e.why == "foldable: centering 1 leaf makes its input mean-zero");
  }
  SECTION("breaker: the route back to the gelu, not the mean-zero summand") {
    REQUIRE(a.ln(1).reason == VerdictReason::Breaker);
    const auto e = explainLayerNorm(g, a.result, 1);
    const auto add = op("aten::add", ""), gelu = op("aten::gelu", "");
    CHECK(e.role(add) == ExplanationRole::BreakPath);
    CHECK(e.role(gelu) == ExplanationRole::Breaker);
    CHECK_FALSE(e.marked(op("aten::linear", "h.1.fc")));
    CHECK(e.edges == std::set<std::pair<NodeId, NodeId>>{{gelu, add}, {add, e.ln}});
    CHECK_THAT(e.why, Catch::StartsWith("not foldable (breaker): "));
  }
  SECTION("unsafe shift: the leaf and the path on to the model output that sees the shift") {
    REQUIRE(a.ln(2).reason == VerdictReason::UnsafeShift);
    const auto e = explainLayerNorm(g, a.result, 2);
    CHECK(e.role(op("aten::linear", "h.2.fc")) == ExplanationRole::Leaf);
    CHECK(e.role(a.ln(2).consumer) == ExplanationRole::Consumer);
    CHECK_FALSE(isVisibleInDataflow(g, a.ln(2).consumer));  // the model output, drawn by the views
    CHECK(e.path == a.ln(2).path);
    CHECK(visibleRoles(e).size() == 2);  // the LN and its leaf; the output is no op
  }
  SECTION("an index past the LNs is refused") {
    CHECK_THROWS_AS(explainLayerNorm(g, a.result, 3), std::out_of_range);
  }
}
