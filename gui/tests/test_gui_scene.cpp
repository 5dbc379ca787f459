// The GUI's pure parts: folding collapsed blocks into one box, and Tab completion of paths.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

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
  std::vector<int> blockOf;

  SECTION("a nested cluster belongs to its top-level block") {
    CHECK(topLevelBlocks(full) == std::vector<int>{0, 1, 0});
  }
  SECTION("every block expanded: the scene is unchanged but for edge labels") {
    const render::Scene shown = collapseBlocks(full, {0, 1}, &blockOf);
    CHECK(shown.nodes.size() == full.nodes.size());
    CHECK(shown.edges.size() == full.edges.size());
    CHECK(shown.clusters.size() == 3);
    CHECK(blockOf == std::vector<int>{0, 1, 2});
    CHECK(shown.clusters[2].parent == 0);
    CHECK(shown.edges[0].label.empty());
  }
  SECTION("every block collapsed: in -> h.0 -> h.1 -> out") {
    const render::Scene shown = collapseBlocks(full, {}, &blockOf);
    REQUIRE(shown.nodes.size() == 4);
    CHECK(shown.clusters.empty());
    CHECK(shown.edges.size() == 3);  // the two edges into h.0 merged, edges inside dropped
    const render::SceneNode& h0 = shown.nodes[1];
    CHECK(h0.id == "block0");
    CHECK(h0.members == std::vector<NodeId>{10, 11});
    CHECK(h0.role == render::NodeRole::ModuleAllFoldable);
    CHECK(shown.nodes[2].role == render::NodeRole::ModuleSomeFoldable);
    CHECK(h0.lines.front() == "1/1 LNs foldable");
  }
  SECTION("one block open: its nodes and nested cluster stay, the other is a box") {
    const render::Scene shown = collapseBlocks(full, {1}, &blockOf);
    CHECK(shown.nodes.size() == 5);  // in0, block0, c, d, out0
    CHECK(blockOf == std::vector<int>{1});
    for (const auto& n : shown.nodes) {
      if (n.id == "c" || n.id == "d") CHECK(n.cluster == 0);
    }
  }
}

TEST_CASE("Tab completes a path to the longest prefix its matches share", "[gui]") {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / "foldnorm_gui_completion";
  fs::remove_all(dir);
  fs::create_directories(dir / "models");
  std::ofstream(dir / "gpt2_tiny.pt") << "x";
  std::ofstream(dir / "gpt2_small.pt") << "x";
  std::ofstream(dir / "notes.txt") << "x";
  std::string error;
  const std::string d = dir.string() + "/";
  const auto entries = listDirectory(d, &error);
  CHECK(error.empty());
  SECTION("directories first with a slash, only .pt files") {
    CHECK(entries == std::vector<std::string>{"models/", "gpt2_small.pt", "gpt2_tiny.pt"});
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
