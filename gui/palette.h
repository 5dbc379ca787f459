// Colours of the canvas and tables. Verdict colours follow the Graphviz renderer's
// (src/render), so a screenshot and an exported image read the same way.
#pragma once

#include <imgui.h>

#include "highlight.h"

namespace foldnorm::gui::palette {

inline const ImVec4 kFoldableText{0.35f, 0.85f, 0.45f, 1.0f};
inline const ImVec4 kNotFoldableText{1.0f, 0.45f, 0.40f, 1.0f};
inline const ImVec4 kDimText{0.6f, 0.6f, 0.6f, 1.0f};

inline constexpr ImU32 kCanvasBackground = IM_COL32(30, 32, 36, 255);
inline constexpr ImU32 kNodeFill = IM_COL32(70, 74, 82, 255);
inline constexpr ImU32 kNodeBorder = IM_COL32(120, 126, 138, 255);
inline constexpr ImU32 kNodeText = IM_COL32(230, 230, 230, 255);
inline constexpr ImU32 kEdge = IM_COL32(110, 115, 125, 160);
inline constexpr ImU32 kClusterFrame = IM_COL32(130, 136, 150, 110);
inline constexpr ImU32 kClusterFill = IM_COL32(255, 255, 255, 10);
inline constexpr ImU32 kClusterText = IM_COL32(170, 176, 190, 255);

inline constexpr ImU32 kLnFoldable = IM_COL32(46, 160, 67, 255);
inline constexpr ImU32 kLnNotFoldable = IM_COL32(200, 55, 50, 255);
inline constexpr ImU32 kLeaf = IM_COL32(45, 110, 200, 255);

// Highlight roles (selected LN's explanation).
inline ImU32 roleColour(Role role) {
  switch (role) {
    case Role::MeanZero: return IM_COL32(80, 200, 120, 255);
    case Role::Leaf: return IM_COL32(70, 150, 255, 255);
    case Role::BreakPath: return IM_COL32(255, 170, 60, 255);
    case Role::Breaker: return IM_COL32(255, 120, 20, 255);
    case Role::ShiftPath: return IM_COL32(230, 90, 230, 255);
    case Role::Consumer: return IM_COL32(255, 60, 200, 255);
    case Role::SelectedLn: return IM_COL32(255, 255, 255, 255);
    case Role::None: break;
  }
  return kNodeBorder;
}

}  // namespace foldnorm::gui::palette
