// One LN's explanation (foldnorm/analysis/explain.h), drawn twice: the `ln:` render view and the
// GUI's highlight must mark the same nodes in the same roles, for every LN of zoo models with
// each kind of verdict (their verdicts and folds are checked in float64 by test_zoo_verdicts.cpp).
#include <catch2/catch.hpp>

#include <map>
#include <set>

#include "foldnorm/analysis/explain.h"
#include "foldnorm/graph/dataflow_view.h"
#include "foldnorm/render/scene.h"
#include "foldnorm/zoo/zoo.h"
#include "helpers.h"
#include "highlight.h"

using namespace foldnorm;

namespace {

/// The scene role an op of the explanation gets in the ln: view.
render::NodeRole sceneRoleOf(ExplanationRole role, const LayerNormVerdict& verdict) {
  switch (role) {
    case ExplanationRole::SelectedLn:
      return verdict.foldable ? render::NodeRole::FoldableLayerNorm : render::NodeRole::BlockedLayerNorm;
    case ExplanationRole::Leaf: return render::NodeRole::Leaf;
    case ExplanationRole::Breaker: return render::NodeRole::Breaker;
    case ExplanationRole::Consumer: return render::NodeRole::UnsafeConsumer;
    default: return render::NodeRole::Plain;
  }
}

}  // namespace

TEST_CASE("the ln: view and the GUI highlight show one explanation for every LN", "[render][explain]") {
  std::map<VerdictReason, int> kinds;
  for (const std::string name : {"gpt2", "bert", "opt350m", "swin_t"}) {
    test::ScratchDir scratch("foldnorm-test-explain");
    const auto path = (scratch.path / (name + ".pt")).string();
    ZooBuildOptions o;
    o.preset = "tiny";
    buildZooModel(name, path, o);
    const auto model = importTorchScript(path);
    const auto& g = model.graph;
    const auto result = analyzeFoldability(g);
    const auto names = render::layerNormNames(result);
    for (std::size_t i = 0; i < result.layerNorms.size(); ++i) {
      const auto& verdict = result.layerNorms[i];
      INFO(name << " " << names[i] << ": " << verdictSentence(verdict));
      ++kinds[verdict.reason];
      const auto scene = render::buildScene(g, result, render::parseViewSpec("ln:" + names[i]));
      const auto highlight = gui::computeHighlight(g, result, i);
      REQUIRE(highlight.ln == verdict.info.node);

      std::map<NodeId, render::NodeRole> drawn;  // graph node -> its role in the picture
      for (const auto& n : scene.nodes)
        if (n.graphNode != kNone) drawn[n.graphNode] = n.role;
      std::set<NodeId> shownOps, highlighted;
      for (const auto& [node, role] : drawn) shownOps.insert(node);
      for (NodeId n : highlight.nodes)
        if (isVisibleInDataflow(g, n)) highlighted.insert(n);
      CHECK(shownOps == highlighted);
      for (const auto& [node, role] : drawn) {
        INFO(g.describeNode(node) << " is " << toString(highlight.role(node)) << " in the GUI");
        CHECK(role == sceneRoleOf(highlight.role(node), verdict));
      }
      // Every edge the GUI marks between two drawn ops is drawn in the picture.
      std::set<std::pair<NodeId, NodeId>> sceneEdges;
      for (const auto& e : scene.edges) sceneEdges.insert({scene.nodes[e.from].graphNode, scene.nodes[e.to].graphNode});
      const auto explanation = explainLayerNorm(g, result, i);
      for (const auto& edge : explanation.edges) {
        CHECK(highlight.hasEdge(edge.first, edge.second));
        if (drawn.count(edge.first) && drawn.count(edge.second)) CHECK(sceneEdges.count(edge));
      }
    }
  }
  // The models cover each kind of verdict the explanation draws.
  CHECK(kinds[VerdictReason::None] > 0);
  CHECK(kinds[VerdictReason::Breaker] > 0);
  CHECK(kinds[VerdictReason::UnsafeShift] > 0);
}

