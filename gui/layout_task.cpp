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
  // The folded model (after Fold, with the toggle on) is laid out the same way, from its own
  // graph; its scene carries the fold's marks instead of verdicts.
  const bool folded = ui.showFolded && ui.fold.folded != nullptr;
  auto model = folded ? ui.fold.folded : ui.model;
  auto full = folded ? ui.fold.fullScene : ui.fullScene;
  const render::FoldedMarks marks = ui.fold.marks;
  const std::set<int> ungrouped = initial ? std::set<int>{} : ui.scene.ungrouped;
  const bool group = ui.groupRepeats;
  app.layoutWorker.submit("layout", [=](const Worker::Progress& progress) -> Worker::Completion {
    auto t0 = std::chrono::steady_clock::now();
    std::shared_ptr<const render::Scene> fullScene = full;
    std::map<std::string, int> markCounts;
    if (!fullScene) {
      progress("building the dataflow view");
      render::SceneOptions options;
      options.legend = false;
      auto scene = std::make_shared<render::Scene>(
          render::buildScene(model->imported().graph, model->analysis, options));
      if (folded) markCounts = render::markFoldedScene(*scene, model->imported().graph, marks);
      fullScene = scene;
    }
    // Timed from here: the full scene is built once per model, a re-layout is what follows.
    const auto t1 = std::chrono::steady_clock::now();
    const std::set<int> expanded = expandedIn;
    const std::vector<int> top = topLevelBlocks(*fullScene);
    const auto runs = group ? repeatedRuns(*fullScene, expanded, ungrouped) : std::vector<std::vector<int>>{};
    CollapsedScene collapsed = collapseBlocks(*fullScene, expanded, runs);
    progress("Graphviz dot on " + std::to_string(collapsed.scene.nodes.size()) + " nodes");
    const render::SceneLayout layout = render::layoutScene(collapsed.scene);
    auto canvas = std::make_shared<CanvasScene>(
        toCanvasScene(*fullScene, collapsed, layout, model->imported().graph.nodeCount()));
    canvas->generation = generation;
    canvas->serial = serial;
    canvas->expanded = expanded;
    canvas->ungrouped = ungrouped;
    canvas->groupRepeats = group;
    canvas->foldedMarks = markCounts;
    canvas->shown = std::make_shared<render::Scene>(std::move(collapsed.scene));
    const auto now = std::chrono::steady_clock::now();
    const double seconds = std::chrono::duration<double>(now - t0).count();
    canvas->relayoutMilliseconds = std::chrono::duration<double, std::milli>(now - t1).count();
    std::set<int> blocks(top.begin(), top.end());
    canvas->blockCount = blocks.size();
    canvas->summary = std::to_string(canvas->shown->nodes.size()) + " boxes, " +
                      std::to_string(expanded.size()) + "/" + std::to_string(blocks.size()) +
                      " blocks open, laid out in " + std::to_string(seconds).substr(0, 4) + " s";
    return [canvas, fullScene, generation, serial, recenter, folded](App& app) {
      UiState& ui = app.ui;
      if (ui.generation != generation || ui.layoutSerial != serial) return;
      const bool first = ui.scene.empty();
      (folded ? ui.fold.fullScene : ui.fullScene) = fullScene;
      ui.scene = std::move(*canvas);
      if (first) ui.camera.fitRequested = true;
      if (folded) return;  // no selection on the folded graph: its node ids are its own
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

void ungroupBlocks(App& app, const std::vector<int>& blocks) {
  app.ui.scene.ungrouped.insert(blocks.begin(), blocks.end());
  startLayout(app, app.ui.scene.expanded);
}

void collapseAll(App& app) {
  app.ui.scene.ungrouped.clear();
  startLayout(app, {});
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
