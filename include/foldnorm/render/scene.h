// A Scene: the graph view the renderer and the GUI both draw, with the analysis' verdicts on it.
//
// buildScene(graph, analysis, options) picks a view (dataflow, full, or one LayerNorm's
// mean-zero graph), gives every node a role that carries the verdict (foldable / non-foldable
// LN, leaf to center, breaker, unsafe consumer, on a path between them), groups nodes into one
// cluster per block (module paths with an index: "transformer.h.0", "features.1.0") and, with
// collapseDepth, folds whole modules into one node with a summary ("3/3 LNs foldable").
// No Graphviz here: render.h turns a Scene into files, layout.h into positions for the GUI.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "foldnorm/analysis/analysis.h"
#include "foldnorm/graph/dataflow_view.h"

namespace foldnorm::render {

enum class ViewKind { Dataflow, Full, LayerNorm };

struct SceneOptions {
  ViewKind view = ViewKind::Dataflow;
  std::string layerNorm;   // ViewKind::LayerNorm: a name from layerNormNames()
  int collapseDepth = 0;   // > 0: modules whose path has this many components become one node
  bool clusters = true;    // one Graphviz cluster per block
  bool legend = true;      // files only; the GUI draws its own from legendEntries()
};

/// "dataflow", "full" or "ln:PATH" (the --view argument). Throws foldnorm::Error otherwise.
SceneOptions parseViewSpec(const std::string& spec);

/// The fill a node gets. One role per node; the strongest wins (LN > breaker > unsafe consumer >
/// leaf > input/output > plain; collapsed modules are coloured by their LN summary).
enum class NodeRole {
  Plain,
  Input,
  Output,
  FoldableLayerNorm,
  BlockedLayerNorm,   // not foldable (any reason)
  Leaf,               // a leaf the fold centers (ln: view: the LN's own leaves)
  Breaker,            // the node that breaks mean-zero for a non-foldable LN
  UnsafeConsumer,     // sees the shift of a centered leaf, so that leaf may not be centered
  AbsorbedScale,      // a per-channel scale the fold absorbs (scaled centering, docs/method.md section 7)
  InsertedCentering,  // the fold inserts x - mean(x) after this node's output (section 8)
  ModuleAllFoldable,  // a collapsed module whose LNs all fold
  ModuleSomeFoldable,
  ModuleNoneFoldable,
  Module,             // a collapsed module without LNs
};
const char* toString(NodeRole role);

/// A collapsed module's or block's verdict on the LayerNorms inside it, decided here only (the
/// `modules` view and the GUI's collapsed blocks): Module when it holds none, else
/// ModuleAllFoldable, ModuleSomeFoldable or ModuleNoneFoldable.
NodeRole moduleRole(int layerNorms, int foldable);
/// The verdict's one wording: "2/3 LNs foldable", or "no LayerNorm".
std::string foldableCountText(int layerNorms, int foldable);

struct SceneNode {
  std::string id;          // stable identity, unique in the scene ("n42", "in0", "out1", "m3")
  NodeRole role = NodeRole::Plain;
  bool onPath = false;     // on a path LN -> breaker or leaf -> unsafe consumer
  bool breaker = false;    // also a breaker (an LN can break another LN's input)
  std::string title;       // first label line: "linear", "LayerNorm  foldable", "output 0"
  std::vector<std::string> lines;  // further label lines: module path, shape, parameter notes
  std::string tooltip;     // full op, module, shape and the verdict's explanation
  std::string modulePath;
  int cluster = -1;        // index into Scene::clusters, -1 at top level
  NodeId graphNode = kNone;          // the graph node it shows (kNone for inputs/outputs/modules)
  std::vector<NodeId> members;       // Module: the graph nodes folded into it
  int layerNorms = 0;                // Module: LNs inside / foldable ones
  int foldableLayerNorms = 0;
};

struct SceneEdge {
  std::size_t from = 0;  // indices into Scene::nodes
  std::size_t to = 0;
  std::string label;     // tensor shape
  bool onPath = false;
};

struct SceneCluster {
  std::string id;        // "cluster_3" (Graphviz wants the prefix)
  std::string label;     // module path and summary: "transformer.h.0  (2/2 LNs foldable)"
  std::string modulePath;
  int parent = -1;
  int layerNorms = 0;
  int foldableLayerNorms = 0;
};

struct Scene {
  std::string title;     // "gpt2.pt: dataflow view, 25/25 LNs foldable"
  std::vector<SceneNode> nodes;
  std::vector<SceneEdge> edges;
  std::vector<SceneCluster> clusters;
  bool legend = true;
};

/// Throws foldnorm::Error for an unknown LN name (the message lists the valid ones).
Scene buildScene(const Graph& graph, const AnalysisResult& analysis, const SceneOptions& options,
                 const std::string& modelName = {});

/// Names accepted by "ln:NAME", one per LN in graph order: its module path, "#k"-suffixed when
/// several LNs share one, "<top>" for an LN outside any module.
std::vector<std::string> layerNormNames(const AnalysisResult& analysis);

/// Colours and shapes per role, shared by the Graphviz renderer and the GUI.
struct RoleStyle {
  const char* fill;      // "#rrggbb"
  const char* border;
  const char* shape;     // Graphviz shape name
  const char* legend;    // legend text
};
const RoleStyle& roleStyle(NodeRole role);
/// Colour of edges and borders on a verdict path.
inline constexpr const char* kPathColour = "#c51b7d";
/// The roles present in `scene`, in legend order (Plain, Input and Output are left out).
std::vector<NodeRole> legendEntries(const Scene& scene);
/// "#rrggbb" -> 0xAABBGGRR, the byte order ImGui's IM_COL32 uses.
uint32_t toImGuiColour(const char* hex, uint8_t alpha = 255);

}  // namespace foldnorm::render
