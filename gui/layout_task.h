// Laying out the canvas off the UI thread, lazily per block.
//
// The full dataflow scene (render::buildScene) is built once per model. What is laid out is that
// scene with every collapsed block folded into one box (collapseBlocks); Graphviz's dot is
// superlinear (about 0.3 s at 1,000 nodes, minutes at 10,000), so a 48-layer GPT-2 opens as a
// column of ~50 block boxes and each expanded block adds only its own ~80 nodes.
#pragma once

#include <set>
#include <vector>

#include "foldnorm/render/layout.h"
#include "foldnorm/render/scene.h"
#include "scene.h"

namespace foldnorm::gui {

struct App;

/// Scenes up to this many nodes open with every block expanded.
inline constexpr std::size_t kExpandAllNodeLimit = 1500;

/// Requests a layout of the current model with `expanded` blocks open; with `initial`, decides
/// the expansion itself (all blocks for small scenes, none for big ones); with `recenter`, the
/// view centers on the selected node once the new layout is in.
void startLayout(App& app, const std::set<int>& expanded, bool initial = false,
                 bool recenter = false);
/// Opens or closes one block (a new layout on the worker; the old picture stays until then).
void toggleBlock(App& app, int block, bool expand);
/// Opens the blocks that hold these graph nodes, if they are collapsed, and centers on the
/// selection once laid out.
void expandBlocksOf(App& app, const std::vector<NodeId>& nodes);

}  // namespace foldnorm::gui
