// Laying out the canvas off the UI thread, lazily per block.
//
// The full dataflow scene (render::buildScene) is built once per model. What is laid out is that
// scene with every collapsed block folded into one box, and runs of identical blocks into one
// (collapseBlocks, repeatedRuns); Graphviz's dot is superlinear (about 0.3 s at 1,000 nodes,
// minutes at 10,000), so every model opens collapsed (a 48-layer GPT-2 as a dozen boxes) and
// each expanded block adds only its own ~80 nodes.
#pragma once

#include <set>
#include <vector>

#include "foldnorm/render/layout.h"
#include "foldnorm/render/scene.h"
#include "scene.h"

namespace foldnorm::gui {

struct App;

/// Requests a layout of the current model with `expanded` blocks open (the groups the canvas
/// split stay split; with `initial`, none is); with `recenter`, the view frames the selection
/// once the new layout is in.
void startLayout(App& app, const std::set<int>& expanded, bool initial = false,
                 bool recenter = false);
/// Opens or closes one block (a new layout on the worker; the old picture stays until then).
void toggleBlock(App& app, int block, bool expand);
/// Shows the blocks of a group box one by one (each still collapsed).
void ungroupBlocks(App& app, const std::vector<int>& blocks);
/// Every block collapsed, identical runs grouped again.
void collapseAll(App& app);
/// Opens the blocks that hold these graph nodes, if they are collapsed, and centers on the
/// selection once laid out.
void expandBlocksOf(App& app, const std::vector<NodeId>& nodes);

}  // namespace foldnorm::gui
