#include "layout_task.h"

#include <algorithm>
#include <chrono>
#include <map>

#include "app.h"

namespace foldnorm::gui {

void startLayout(App& app, const std::set<int>& expandedIn, bool initial, bool recenter) {
  UiState& ui = app.ui;
  if (!ui.model) return;
  const uint64_t generation = ui.generation;
  const uint64_t serial = ++ui.layoutSerial;
  auto model = ui.model;
  auto full = ui.fullScene;
  app.layoutWorker.submit("layout", [=](const Worker::Progress& progress) -> Worker::Completion {
    auto t0 = std::chrono::steady_clock::now();
    std::shared_ptr<const render::Scene> fullScene = full;
    if (!fullScene) {
      progress("building the dataflow view");
      render::SceneOptions options;
      options.legend = false;
      fullScene = std::make_shared<render::Scene>(
          render::buildScene(model->imported.graph, model->analysis, options));
    }
    std::set<int> expanded = expandedIn;
    const std::vector<int> top = topLevelBlocks(*fullScene);
    if (initial && fullScene->nodes.size() <= kExpandAllNodeLimit) {
      expanded.insert(top.begin(), top.end());
    }
    std::vector<int> blockOfShown;
    auto shown = std::make_shared<render::Scene>(collapseBlocks(*fullScene, expanded, &blockOfShown));
    progress("Graphviz dot on " + std::to_string(shown->nodes.size()) + " nodes");
    const render::SceneLayout layout = render::layoutScene(*shown);
    auto canvas = std::make_shared<CanvasScene>(toCanvasScene(
        *fullScene, *shown, blockOfShown, layout, model->imported.graph.nodeCount()));
    canvas->generation = generation;
    canvas->serial = serial;
    canvas->expanded = expanded;
    canvas->shown = shown;
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::set<int> blocks(top.begin(), top.end());
    canvas->summary = std::to_string(shown->nodes.size()) + " boxes, " +
                      std::to_string(expanded.size()) + "/" + std::to_string(blocks.size()) +
                      " blocks open, laid out in " + std::to_string(seconds).substr(0, 4) + " s";
    return [canvas, fullScene, generation, serial, recenter](App& app) {
      UiState& ui = app.ui;
      if (ui.generation != generation || ui.layoutSerial != serial) return;
      const bool first = ui.scene.empty();
      ui.fullScene = fullScene;
      ui.scene = std::move(*canvas);
      if (first) ui.camera.fitRequested = true;
      if (recenter && ui.selectedNode != kNone) {
        ui.camera.centerOn = ui.selectedNode;
        if (ui.selectedLn >= 0) {
          const LayerNormVerdict& v = ui.model->analysis.layerNorms[ui.selectedLn];
          if (v.info.node == ui.selectedNode) {
            ui.camera.alsoShow = v.breaker != kNone ? v.breaker : v.consumer;
          }
        }
      }
      // A selection made before the first layout (--select, or a quick click) opens its block now.
      if (first && ui.selectedLn >= 0) {
        const LayerNormVerdict& v = ui.model->analysis.layerNorms[ui.selectedLn];
        expandBlocksOf(app, {v.info.node, v.breaker, v.consumer});
      }
    };
  });
}

void toggleBlock(App& app, int block, bool expand) {
  std::set<int> expanded = app.ui.scene.expanded;
  if (expand) expanded.insert(block);
  else expanded.erase(block);
  startLayout(app, expanded);
  if (expand) app.ui.camera.centerOnBlock = block;
}

void expandBlocksOf(App& app, const std::vector<NodeId>& nodes) {
  const CanvasScene& scene = app.ui.scene;
  std::set<int> expanded = scene.expanded;
  bool changed = false;
  for (NodeId n : nodes) {
    if (n == kNone || n >= scene.blockOfNode.size()) continue;
    const int block = scene.blockOfNode[n];
    if (block >= 0 && expanded.insert(block).second) changed = true;
  }
  if (changed) startLayout(app, expanded, /*initial=*/false, /*recenter=*/true);
}

}  // namespace foldnorm::gui
