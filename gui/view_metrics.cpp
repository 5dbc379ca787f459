// Frame times: the last few seconds as a plot, with the median and 90th percentile, so the
// 60 fps target can be checked on the model at hand.
#include <algorithm>
#include <vector>

#include "app.h"

namespace foldnorm::gui {

void DrawMetrics(App& app) {
  UiState& ui = app.ui;
  ImGui::SetNextWindowSize(ImVec2(420, 170), ImGuiCond_FirstUseEver);
  if (!ImGui::Begin("Frame times", &ui.showMetrics)) {
    ImGui::End();
    return;
  }
  recordPanel(ui, "Frame times");
  const std::size_t n = std::min<std::size_t>(ui.frameMs.size(), 240);
  std::vector<float> recent(ui.frameMs.end() - n, ui.frameMs.end());
  if (!recent.empty()) {
    std::vector<float> sorted = recent;
    std::sort(sorted.begin(), sorted.end());
    ImGui::Text("last %zu frames: median %.2f ms, p90 %.2f ms, max %.2f ms", n, sorted[n / 2],
                sorted[std::min(n - 1, n * 9 / 10)], sorted.back());
    ImGui::PlotLines("##ms", recent.data(), static_cast<int>(recent.size()), 0, "ms per frame", 0,
                     std::max(20.0f, sorted.back()), ImVec2(-1, 90));
  }
  ImGui::Text("%zu boxes in the scene, %zu drawn this frame", ui.scene.nodes.size(),
              ui.record.nodesDrawn);
  ImGui::End();
}

}  // namespace foldnorm::gui
