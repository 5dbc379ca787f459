// The GUI's pure parts: folding collapsed blocks into one box, and Tab completion of paths.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include "highlight.h"
#include "path_completion.h"
#include "scene.h"

using namespace foldnorm;
using namespace foldnorm::gui;

namespace {

// input -> [h.0: a -> b] -> [h.1: c -> d] -> output, with h.0.attn nested in h.0 holding b.
render::Scene twoBlocks() {
  render::Scene s;
  auto cluster = [&](std::string path, int parent, int lns, int foldable) {
    render::SceneCluster c;
    c.id = "cluster_" + std::to_string(s.clusters.size());
    c.label = path;
    c.modulePath = path;
    c.parent = parent;
    c.layerNorms = lns;
    c.foldableLayerNorms = foldable;
    s.clusters.push_back(c);
  };
  cluster("h.0", -1, 1, 1);
  cluster("h.1", -1, 2, 1);
  cluster("h.0.attn", 0, 0, 0);
  auto node = [&](std::string id, int clusterIndex, NodeId graphNode) {
    render::SceneNode n;
    n.id = id;
    n.title = id;
    n.cluster = clusterIndex;
    n.graphNode = graphNode;
    s.nodes.push_back(n);
  };
  node("in0", -1, kNone);
  node("a", 0, 10);
  node("b", 2, 11);
  node("c", 1, 12);
  node("d", 1, 13);
  node("out0", -1, kNone);
  auto edge = [&](std::size_t from, std::size_t to) {
    render::SceneEdge e;
    e.from = from;
    e.to = to;
    e.label = "[2, 8]";
    s.edges.push_back(e);
  };
  edge(0, 1);
  edge(1, 2);
  edge(0, 2);  // a second way into h.0: merges with in0 -> a when h.0 is collapsed
  edge(2, 3);
  edge(3, 4);
  edge(4, 5);
  return s;
}

}  // namespace

TEST_CASE("collapsing blocks folds each into one box and merges its edges", "[gui]") {
  const render::Scene full = twoBlocks();

  SECTION("a nested cluster belongs to its top-level block") {
    CHECK(topLevelBlocks(full) == std::vector<int>{0, 1, 0});
  }
  SECTION("every block expanded: the scene is unchanged but for edge labels") {
    const CollapsedScene c = collapseBlocks(full, {0, 1});
    const render::Scene& shown = c.scene;
    const std::vector<int>& blockOf = c.blockOfShownCluster;
    CHECK(shown.nodes.size() == full.nodes.size());
    CHECK(shown.edges.size() == full.edges.size());
    CHECK(shown.clusters.size() == 3);
    CHECK(blockOf == std::vector<int>{0, 1, 2});
    CHECK(shown.clusters[2].parent == 0);
    CHECK(shown.edges[0].label.empty());
  }
  SECTION("every block collapsed: in -> h.0 -> h.1 -> out") {
    const CollapsedScene c = collapseBlocks(full, {});
    const render::Scene& shown = c.scene;
    REQUIRE(shown.nodes.size() == 4);
    CHECK(shown.clusters.empty());
    CHECK(shown.edges.size() == 3);  // the two edges into h.0 merged, edges inside dropped
    const render::SceneNode& h0 = shown.nodes[1];
    CHECK(h0.id == "block0");
    CHECK(h0.members == std::vector<NodeId>{10, 11});
    CHECK(h0.role == render::NodeRole::ModuleAllFoldable);
    CHECK(shown.nodes[2].role == render::NodeRole::ModuleSomeFoldable);
    CHECK(h0.title == "h.0: 1/1 LNs foldable");  // nothing shared: the whole path
    CHECK(h0.lines.back() == "2 ops");
    CHECK(c.blocksOfNode[1] == std::vector<int>{0});
    CHECK(c.blocksOfNode[0].empty());
    // The merged edge into h.0 stands for both dataflow edges that entered it from in0... but
    // in0 is no graph node, so only edges between graph nodes are remembered: h.0 -> h.1.
    REQUIRE(c.edgeMembers.size() == 3);
    CHECK(c.edgeMembers[1] == std::vector<std::pair<NodeId, NodeId>>{{11, 12}});
  }
  SECTION("one block open: its nodes and nested cluster stay, the other is a box") {
    const CollapsedScene c = collapseBlocks(full, {1});
    const render::Scene& shown = c.scene;
    CHECK(shown.nodes.size() == 5);  // in0, block0, c, d, out0
    CHECK(c.blockOfShownCluster == std::vector<int>{1});
    for (const auto& n : shown.nodes) {
      if (n.id == "c" || n.id == "d") CHECK(n.cluster == 0);
    }
  }
}

namespace {

// in -> enc.0 -> enc.1 -> enc.2 -> enc.3 -> out: enc.0..2 alike (relu, LN foldable), enc.3's LN
// not foldable; `graphNode` 100 + k for every op.
render::Scene fourBlocks() {
  render::Scene s;
  for (int b = 0; b < 4; ++b) {
    render::SceneCluster c;
    c.id = "cluster_" + std::to_string(b);
    c.modulePath = "model.enc." + std::to_string(b);
    c.label = c.modulePath;
    c.layerNorms = 1;
    c.foldableLayerNorms = b < 3 ? 1 : 0;
    s.clusters.push_back(c);
  }
  auto node = [&](std::string title, int cluster, render::NodeRole role) {
    render::SceneNode n;
    n.id = "n" + std::to_string(s.nodes.size());
    n.title = title;
    n.cluster = cluster;
    n.role = role;
    n.graphNode = cluster < 0 ? kNone : static_cast<NodeId>(100 + s.nodes.size());
    s.nodes.push_back(n);
  };
  node("input", -1, render::NodeRole::Input);
  for (int b = 0; b < 4; ++b) {
    node("relu", b, render::NodeRole::Plain);
    node(b < 3 ? "LayerNorm  foldable" : "LayerNorm  NOT foldable", b,
         b < 3 ? render::NodeRole::FoldableLayerNorm : render::NodeRole::BlockedLayerNorm);
  }
  node("output", -1, render::NodeRole::Output);
  for (std::size_t i = 0; i + 1 < s.nodes.size(); ++i) s.edges.push_back({i, i + 1, "", false});
  return s;
}

}  // namespace

TEST_CASE("identical blocks in a row are one box, and the box counts what its blocks hold", "[gui]") {
  const render::Scene full = fourBlocks();
  SECTION("names drop what every block shares but its last component") {
    CHECK(sharedComponents(full) == 2);
    CHECK(shortBlockName("model.enc.3", 2) == "enc.3");
    CHECK(shortBlockName("encoder.layers.0", 0) == "encoder.layers.0");
  }
  SECTION("signatures: equal for alike blocks, different where the verdict differs") {
    render::Scene named = full;  // a parameter line naming its block's path does not count
    named.nodes[1].lines = {"weight: model.enc.0.attn.out.weight [4]"};
    named.nodes[3].lines = {"weight: model.enc.1.attn.out.weight [4]"};
    const auto namedSig = blockSignatures(named);
    CHECK(namedSig[0] == namedSig[1]);
    CHECK(namedSig[1] != namedSig[2]);
    const auto sig = blockSignatures(full);
    CHECK(sig[0] == sig[1]);
    CHECK(sig[1] == sig[2]);
    CHECK(sig[2] != sig[3]);
  }
  SECTION("the run enc.0-enc.2 is one box x3, enc.3 its own") {
    const auto runs = repeatedRuns(full, {}, {});
    REQUIRE(runs == std::vector<std::vector<int>>{{0, 1, 2}});
    const CollapsedScene c = collapseBlocks(full, {}, runs);
    REQUIRE(c.scene.nodes.size() == 4);  // input, group, enc.3, output
    const render::SceneNode& g = c.scene.nodes[1];
    CHECK(g.title == "enc.0-enc.2 x3: 3/3 LNs foldable");
    CHECK(g.lines.back() == "3 blocks, 2 ops each");
    CHECK(g.members.size() == 6);
    CHECK(g.role == render::NodeRole::ModuleAllFoldable);
    CHECK(c.blocksOfNode[1] == std::vector<int>{0, 1, 2});
    CHECK(c.scene.nodes[2].title == "enc.3: 0/1 LNs foldable");
    CHECK(c.scene.nodes[2].role == render::NodeRole::ModuleNoneFoldable);
    CHECK(c.scene.edges.size() == 3);  // input -> group -> enc.3 -> output
  }
  SECTION("an expanded block splits the run; an ungrouped block leaves it") {
    CHECK(repeatedRuns(full, {1}, {}).empty());  // enc.0 alone, enc.2 alone
    CHECK(repeatedRuns(full, {}, {0}) == std::vector<std::vector<int>>{{1, 2}});
  }
  SECTION("the export of a selection marks its boxes and dims the rest") {
    const auto runs = repeatedRuns(full, {}, {});
    const CollapsedScene c = collapseBlocks(full, {}, runs);
    CanvasScene canvas;
    canvas.shown = std::make_shared<render::Scene>(c.scene);
    canvas.shownEdgeMembers = c.edgeMembers;
    for (std::size_t i = 0; i < c.scene.nodes.size(); ++i) {
      CanvasNode n;
      n.node = c.scene.nodes[i].graphNode;
      n.blocks = c.blocksOfNode[i];
      n.members = c.scene.nodes[i].members;
      canvas.nodes.push_back(n);
    }
    Highlight h;
    h.ln = 108;  // enc.3's LN
    h.roles.assign(200, Role::None);
    h.roles[108] = Role::SelectedLn;
    h.roles[106] = Role::Breaker;  // enc.2's LN breaks it, inside the group box
    h.edges.insert(Highlight::edgeKey(106, 107));
    const render::Scene out = sceneForExport(canvas, h, "selected enc.3");
    CHECK(out.nodes[1].breaker);
    CHECK(out.nodes[0].role == render::NodeRole::Plain);  // the input, dimmed
    CHECK(out.edges[1].onPath);  // group -> enc.3 stands for 106 -> 107
    CHECK_FALSE(out.edges[0].onPath);
    CHECK(out.title.find("selected enc.3") != std::string::npos);
  }
}

TEST_CASE("Tab completes a path to the longest prefix its matches share", "[gui]") {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / "foldnorm_gui_completion";
  fs::remove_all(dir);
  fs::create_directories(dir / "models");
  std::ofstream(dir / "gpt2_tiny.pt") << "x";
  std::ofstream(dir / "gpt2_small.pt") << "x";
  std::ofstream(dir / "bert.pt2") << "x";
  std::ofstream(dir / "notes.txt") << "x";
  std::string error;
  const std::string d = dir.string() + "/";
  const auto entries = listDirectory(d, &error);
  CHECK(error.empty());
  SECTION("directories first with a slash, only model files (.pt, .pt2)") {
    CHECK(entries == std::vector<std::string>{"models/", "bert.pt2", "gpt2_small.pt", "gpt2_tiny.pt"});
  }
  SECTION("completion stops where the matches differ, or finishes a single match") {
    CHECK(completePath(d + "gp", entries) == d + "gpt2_");
    CHECK(completePath(d + "gpt2_t", entries) == d + "gpt2_tiny.pt");
    CHECK(completePath(d + "m", entries) == d + "models/");
    CHECK(completePath(d + "x", entries) == d + "x");
  }
  SECTION("a directory that does not exist is an error, not a crash") {
    CHECK(listDirectory(d + "nope/", &error).empty());
    CHECK_FALSE(error.empty());
  }
  fs::remove_all(dir);
}
