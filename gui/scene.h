// What the canvas draws, in layout coordinates (Graphviz points, y down, see
// foldnorm/render/layout.h): boxes, edge splines and module frames, with their colours decided.
// Built on the layout worker from a render::Scene and its SceneLayout; the canvas only
// transforms, culls and draws it.
//
// Big graphs: the layout unit is a top-level block (a render::Scene cluster without a parent,
// e.g. "transformer.h.7"). A collapsed block is one box; expanding one lays out again with that
// block's nodes inside (layout_task.h). Small graphs open with every block expanded.
#pragma once

#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include <imgui.h>

#include "foldnorm/graph/graph.h"
#include "foldnorm/render/layout.h"
#include "foldnorm/render/scene.h"

namespace foldnorm::gui {

struct CanvasNode {
  NodeId node = kNone;      // the graph node shown, kNone for inputs/outputs/collapsed blocks
  int block = -1;           // collapsed block: index into the full scene's clusters
  render::NodeRole role = render::NodeRole::Plain;
  std::string title;
  std::vector<std::string> lines;
  std::string tooltip;
  ImVec2 min, max;
  ImU32 fill = 0, border = 0;
  int layerNorms = 0, foldable = 0;  // collapsed block
  std::vector<NodeId> members;       // collapsed block: the graph nodes inside
};

struct CanvasEdge {
  int from = -1, to = -1;       // indices into CanvasScene::nodes
  std::vector<ImVec2> points;   // cubic Bezier pieces: p0, c1, c2, p1, ...
  bool hasArrow = false;
  ImVec2 arrowTip;
  ImVec2 min, max;              // bounds of the control points, for culling
};

struct CanvasCluster {
  int block = -1;               // index into the full scene's clusters
  std::string label;
  ImVec2 min, max;
  bool topLevel = false;        // a block that can collapse
};

struct CanvasScene {
  uint64_t generation = 0;      // model generation
  uint64_t serial = 0;          // layout request it answers
  std::vector<CanvasNode> nodes;
  std::vector<CanvasEdge> edges;
  std::vector<CanvasCluster> clusters;
  ImVec2 size{0, 0};
  std::unordered_map<NodeId, int> indexOfNode;    // graph node -> canvas node
  std::unordered_map<int, int> indexOfBlock;      // collapsed block -> canvas node
  std::vector<int> blockOfNode;                   // graph node -> top-level block, -1 if none
  std::set<int> expanded;                          // blocks drawn open
  std::shared_ptr<const render::Scene> shown;      // the scene laid out (for export)
  double layoutMilliseconds = 0;
  std::string summary;          // "512 nodes, 37 blocks: laid out in 0.41 s"
  bool empty() const { return nodes.empty(); }
  /// The canvas node showing graph node n: itself, or the collapsed block that holds it; -1.
  int canvasIndexOf(NodeId n) const;
};

struct CanvasCamera {
  ImVec2 center{0, 0};   // layout point at the middle of the canvas
  float zoom = 1.0f;     // screen pixels per layout point
  bool fitRequested = true;
  NodeId centerOn = kNone;  // pending: center on the box showing this graph node
  NodeId alsoShow = kNone;  // with centerOn: keep this node in view too (the selected LN's
                            // breaker or unsafe consumer) if labels stay legible
  int centerOnBlock = -1;   // pending: center on this block once laid out
};

/// The top-level block (cluster without a parent) of each cluster of `scene`.
std::vector<int> topLevelBlocks(const render::Scene& scene);

/// `full` with the nodes of every top-level block not in `expanded` folded into one Module node
/// per block (edges merged, self-loops inside a block dropped), clusters of expanded blocks kept.
/// `blockOfShown[i]` receives, for each shown cluster, its index in `full`.
render::Scene collapseBlocks(const render::Scene& full, const std::set<int>& expanded,
                             std::vector<int>* blockOfShownCluster);

/// The drawable form of a laid-out scene.
CanvasScene toCanvasScene(const render::Scene& full, const render::Scene& shown,
                          const std::vector<int>& blockOfShownCluster,
                          const render::SceneLayout& layout, std::size_t graphNodes);

}  // namespace foldnorm::gui
