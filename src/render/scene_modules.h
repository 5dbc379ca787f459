// The scene's module structure, once scene.cpp has made one scene node per view node: folding
// whole modules into one node (SceneOptions::collapseDepth) and grouping nodes into one cluster
// per block, which also settles each node's label lines (module paths relative to the cluster).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "foldnorm/render/scene.h"

namespace foldnorm::render::detail {

/// Label lines held back until the clusters are known, by scene node index.
struct PendingLines {
  std::map<std::size_t, std::string> shape;                // the node's shape line
  std::map<std::size_t, std::vector<std::string>> params;  // its parameter lines
};

/// Folds every node whose module path has at least `depth` components into one node per
/// module prefix, with its LN summary; `lines` follows the nodes to their new indices.
Scene collapseModules(Scene in, int depth, PendingLines& lines);

/// One cluster per block (a module prefix ending in an index that holds deeper modules) when
/// `clusters`, the clusters' LN summaries, and every op node's final label lines.
void assignClusters(Scene& scene, const Graph& graph, const AnalysisResult& analysis, bool clusters,
                    const PendingLines& lines);

}  // namespace foldnorm::render::detail
