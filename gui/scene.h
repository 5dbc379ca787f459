// What the canvas draws, in layout coordinates (Graphviz points, y down, see
// foldnorm/render/layout.h): boxes, edge splines and module frames, with their colours decided.
// Built on the layout worker from a render::Scene and its SceneLayout; the canvas only
// transforms, culls and draws it.
//
// The layout unit is a top-level block (a render::Scene cluster without a parent, e.g.
// "transformer.h.7"). Every model opens with its blocks collapsed, each one summary box
// ("h.7: 2/2 LNs foldable") hanging from the residual stream, and a run of identical blocks along the
// stream (same ops, same verdicts) as one box ("h.0-h.11 x12"), so the first picture is a short
// column that reads at a glance. Expanding a block lays out again with that block's nodes inside
// (layout_task.h): Graphviz works on the collapsed graph, never on all of a big model's nodes.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <utility>
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
  int layerNorms = 0, foldable = 0;  // collapsed block (a group: summed over its blocks)
  std::vector<NodeId> members;       // collapsed block: the graph nodes inside
  std::vector<int> blocks;           // collapsed: the blocks in the box (more than one: a group)
};

struct CanvasEdge {
  int from = -1, to = -1;       // indices into CanvasScene::nodes
  std::vector<ImVec2> points;   // cubic Bezier pieces: p0, c1, c2, p1, ...
  bool hasArrow = false;
  ImVec2 arrowTip;
  ImVec2 min, max;              // bounds of the control points, for culling
  // The dataflow edges (producer, consumer) it stands for: one, or several merged into an edge
  // to or from a collapsed box, so a selection's marked edges light up collapsed ones too.
  std::vector<std::pair<NodeId, NodeId>> members;
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
  std::set<int> ungrouped;                         // blocks never folded into a group box
  bool groupRepeats = true;                        // runs of identical blocks as one box
  std::shared_ptr<const render::Scene> shown;      // the scene laid out (for export); its
                                                   // nodes are `nodes`, in the same order
  std::vector<std::vector<std::pair<NodeId, NodeId>>> shownEdgeMembers;  // by shown edge
  double layoutMilliseconds = 0;   // Graphviz alone
  double relayoutMilliseconds = 0; // collapse + Graphviz + drawable form: what a click waits for
  std::size_t blockCount = 0;      // top-level blocks in the model
  std::map<std::string, int> foldedMarks;  // the folded graph: nodes marked per kind
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

/// How many leading module path components all top-level blocks of `full` share, their own
/// index left out: 2 for "transformer.h.*", 0 for "encoder.layers.*" beside "decoder.layers.*".
std::size_t sharedComponents(const render::Scene& full);
/// A block's name in its summary box: `modulePath` without the first `shared` - 1 components
/// ("h.3" for "transformer.h.3" when 2 are shared).
std::string shortBlockName(const std::string& modulePath, std::size_t shared);

/// One string per top-level block that is equal for two blocks exactly when they are identical
/// repeats: the same parent module ("transformer.h"), the same ops in the same order with the
/// same relative labels and verdict roles, and the same edges inside. Indexed like `full`'s
/// clusters; "" for nested clusters.
std::vector<std::string> blockSignatures(const render::Scene& full);

/// The top-level blocks in the order the stream passes them.
std::vector<int> blocksAlongStream(const render::Scene& full);

/// Runs of consecutive identical collapsed blocks (blockSignatures; in cluster order, so along
/// the stream, blocksAlongStream), each of two or more blocks; blocks in `expanded` or `ungrouped` are never in one.
std::vector<std::vector<int>> repeatedRuns(const render::Scene& full, const std::set<int>& expanded,
                                           const std::set<int>& ungrouped);

/// A scene as laid out: `full` with collapsed blocks folded into boxes.
struct CollapsedScene {
  render::Scene scene;
  std::vector<int> blockOfShownCluster;                      // shown cluster -> full cluster
  std::vector<std::vector<int>> blocksOfNode;                // shown node -> blocks in its box
  std::vector<std::vector<std::pair<NodeId, NodeId>>> edgeMembers;  // shown edge -> dataflow edges
};

/// `full` with the nodes of every top-level block not in `expanded` folded into one Module node
/// per block ("h.3: 2/2 LNs foldable"), or per run of identical blocks (`runs`, from repeatedRuns:
/// "h.0-h.11 x12: 24/24 LNs foldable"); edges merged, self-loops inside a box dropped, clusters of
/// expanded blocks kept. The LN counts are the clusters' (render's assignClusters counts the
/// analysis' verdicts by module path).
CollapsedScene collapseBlocks(const render::Scene& full, const std::set<int>& expanded,
                              const std::vector<std::vector<int>>& runs = {});

struct Highlight;
/// What the canvas shows, as a scene for the renderer (Export view): the same boxes, and with an
/// LN selected its explanation in the renderer's roles (leaves, breaker, consumer; the paths and
/// the collapsed boxes they cross drawn as verdict paths), everything else plain (dimmed).
render::Scene sceneForExport(const CanvasScene& canvas, const Highlight& highlight,
                             const std::string& caption);

/// The drawable form of a laid-out scene.
CanvasScene toCanvasScene(const render::Scene& full, const CollapsedScene& shown,
                          const render::SceneLayout& layout, std::size_t graphNodes);

}  // namespace foldnorm::gui
