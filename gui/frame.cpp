// One frame: the menu bar, the windows tiled over the viewport (LN table left, canvas middle,
// inspector right, status bar below), the dialogs on top, then the keyboard shortcuts.
#include <GLFW/glfw3.h>
#include <imgui.h>
#include <imgui_stdlib.h>  // after imgui.h, which it needs

#include <algorithm>

#include "app.h"
#include "headless.h"
#include "palette.h"

namespace foldnorm::gui {
namespace {

constexpr ImGuiWindowFlags kTileFlags =
    ImGuiWindowFlags_NoMove | ImGuiWindowFlags_NoResize | ImGuiWindowFlags_NoCollapse |
    ImGuiWindowFlags_NoBringToFrontOnFocus;

void place(ImVec2 pos, ImVec2 size) {
  ImGui::SetNextWindowPos(pos, ImGuiCond_Always);
  ImGui::SetNextWindowSize(size, ImGuiCond_Always);
}

std::string defaultOutputPath(const UiState& ui, const char* suffix) {
  if (!ui.model) return suffix;
  std::string base = ui.model->imported().path;
  auto dot = base.rfind('.');
  if (dot != std::string::npos && base.find('/', dot) == std::string::npos) base.resize(dot);
  return base + suffix;
}

}  // namespace

void recordPanel(UiState& ui, const char* name) {
  ui.record.panels.push_back({name, ImGui::GetWindowPos(), ImGui::GetWindowSize()});
}

bool beginModelWindow(UiState& ui, const char* title, bool* open, const char* emptyText) {
  if (!ImGui::Begin(title, open, ImGuiWindowFlags_NoCollapse)) {
    ImGui::End();
    return false;
  }
  recordPanel(ui, title);
  if (ui.model) return true;
  ImGui::TextDisabled("%s", emptyText);
  ImGui::End();
  return false;
}

WindowLayout computeWindowLayout(const UiState& ui, ImVec2 display, float menuHeight) {
  WindowLayout l;
  const float statusHeight = ImGui::GetFrameHeightWithSpacing() + 6;
  const float top = menuHeight;
  const float bodyHeight = std::max(100.0f, display.y - top - statusHeight);
  const bool leftColumn = ui.showLnTable || ui.showActions || ui.showBench;
  const float tableWidth = leftColumn ? std::clamp(display.x * 0.30f, 360.0f, 620.0f) : 0;
  const float inspectorWidth = ui.showInspector ? std::clamp(display.x * 0.27f, 340.0f, 560.0f) : 0;
  // The left column: the LN table on top, then the Fold and Benchmark tiles, each only as tall
  // as its controls until it has results to show, so the table keeps the room until then.
  // Without the table the tiles share the column; the last tile shown takes what is left.
  const float titleBar = ImGui::GetFrameHeight(), row = ImGui::GetFrameHeightWithSpacing();
  const float padding = 2 * ImGui::GetStyle().WindowPadding.y;
  float foldHeight = !ui.showActions ? 0
                     : ui.fold.summary ? std::clamp(bodyHeight * 0.17f, 120.0f, 210.0f)
                                       : titleBar + row + padding;
  const bool benchBusy = ui.bench.inFlight > 0 || !ui.bench.error.empty();
  float benchHeight = !ui.showBench ? 0
                      : ui.bench.report ? std::clamp(bodyHeight * 0.34f, 250.0f, 400.0f)
                                        : titleBar + (benchBusy ? 5 : 3) * row + padding;
  if (!ui.showLnTable) {
    if (ui.showBench) benchHeight = bodyHeight - foldHeight;
    else foldHeight = bodyHeight;
  }
  l.tablePos = {0, top};
  l.tableSize = {tableWidth, ui.showLnTable ? bodyHeight - foldHeight - benchHeight : 0};
  l.actionsPos = {0, top + l.tableSize.y};
  l.actionsSize = {tableWidth, foldHeight};
  l.benchPos = {0, l.actionsPos.y + foldHeight};
  l.benchSize = {tableWidth, benchHeight};
  l.canvasPos = {tableWidth, top};
  l.canvasSize = {std::max(100.0f, display.x - tableWidth - inspectorWidth), bodyHeight};
  l.inspectorPos = {display.x - inspectorWidth, top};
  l.inspectorSize = {inspectorWidth, bodyHeight};
  l.statusPos = {0, top + bodyHeight};
  l.statusSize = {display.x, statusHeight};
  return l;
}

void DrawMainMenu(App& app) {
  UiState& ui = app.ui;
  if (!ImGui::BeginMainMenuBar()) return;
  if (ImGui::BeginMenu("File")) {
    if (ImGui::MenuItem("Open model...", "Ctrl+O")) ui.open.visible = ui.open.focusPath = true;
    if (ImGui::MenuItem("Save report (JSON)...", "Ctrl+S", false, ui.model != nullptr)) {
      ui.saveReport = {true, true, defaultOutputPath(ui, ".foldnorm.json")};
    }
    if (ImGui::MenuItem("Export view as image...", "Ctrl+E", false, !ui.scene.empty())) {
      ui.exportImage = {true, true, defaultOutputPath(ui, ".svg")};
    }
    ImGui::Separator();
    if (ImGui::MenuItem("Quit", "Ctrl+Q")) glfwSetWindowShouldClose(glfwGetCurrentContext(), 1);
    ImGui::EndMenu();
  }
  if (ImGui::BeginMenu("View")) {
    if (ImGui::MenuItem("Fit graph to window", "F")) ui.camera.fitRequested = true;
    if (ImGui::MenuItem("Center on selection", "C", false, ui.selectedNode != kNone)) {
      ui.camera.centerOn = ui.selectedNode;
    }
    ImGui::Separator();
    ImGui::MenuItem("LayerNorm table", "Ctrl+1", &ui.showLnTable);
    ImGui::MenuItem("Inspector", "Ctrl+2", &ui.showInspector);
    ImGui::MenuItem("Fold", "Ctrl+3", &ui.showActions);
    ImGui::MenuItem("Benchmark", "Ctrl+4", &ui.showBench);
    ImGui::MenuItem("Minimap", "M", &ui.showMinimap);
    if (ImGui::MenuItem("Folded graph", "G", ui.showFolded, ui.fold.folded != nullptr)) {
      showFoldedGraph(app, !ui.showFolded);
    }
    ImGui::MenuItem("Frame times", nullptr, &ui.showMetrics);
    ImGui::EndMenu();
  }
  if (ImGui::BeginMenu("Help")) {
    ImGui::TextUnformatted(
        "Ctrl+O open   Ctrl+S save report   Ctrl+E export view   Ctrl+F search LNs\n"
        "Ctrl+Shift+F fold and verify   Ctrl+B benchmark original vs folded\n"
        "Up/Down or J/K: previous/next LN   F fit   C center on selection   M minimap\n"
        "G: original / folded graph (after Fold)\n"
        "Canvas: drag to pan, wheel to zoom, click a node to inspect it,\n"
        "double-click a module to expand or collapse it.");
    ImGui::EndMenu();
  }
  if (ui.model) {
    const auto& r = ui.model->analysis;
    ImGui::SameLine(ImGui::GetWindowWidth() * 0.5f);
    ImGui::TextDisabled("%s", ui.model->imported().path.c_str());
    ImGui::SameLine();
    ImGui::TextColored(r.foldableCount() == r.layerNorms.size() ? palette::kFoldableText
                                                                 : palette::kDimText,
                       "%zu/%zu LNs foldable", r.foldableCount(), r.layerNorms.size());
  }
  ImGui::EndMainMenuBar();
}

void DrawStatusBar(App& app) {
  UiState& ui = app.ui;
  if (!ImGui::Begin("##status", nullptr,
                    kTileFlags | ImGuiWindowFlags_NoTitleBar | ImGuiWindowFlags_NoScrollbar)) {
    ImGui::End();
    return;
  }
  const Worker::Status model = app.modelWorker.status();
  const Worker::Status layout = app.layoutWorker.status();
  auto spinner = [](double seconds) { return "|/-\\"[static_cast<int>(seconds * 8) % 4]; };
  if (model.busy) {
    ImGui::Text("%c %s: %s (%.1f s)", spinner(model.seconds), model.title.c_str(),
                model.message.c_str(), model.seconds);
  } else if (layout.busy) {
    ImGui::Text("%c %s: %s (%.1f s)", spinner(layout.seconds), layout.title.c_str(),
                layout.message.c_str(), layout.seconds);
  } else if (!ui.errorMessage.empty()) {
    ImGui::TextColored(palette::kNotFoldableText, "error: %s", ui.errorMessage.c_str());
  } else {
    ImGui::TextUnformatted(ui.statusMessage.c_str());
  }
  if (!ui.frameMs.empty()) {
    const float ms = ui.frameMs.back();
    const std::string right = std::to_string(static_cast<int>(ui.scene.nodes.size())) +
                              " boxes, " + std::to_string(ui.record.nodesDrawn) + " drawn   " +
                              std::to_string(ms).substr(0, 4) + " ms/frame";
    ImGui::SameLine(ImGui::GetWindowWidth() - ImGui::CalcTextSize(right.c_str()).x - 12);
    ImGui::TextDisabled("%s", right.c_str());
  }
  ImGui::End();
}

void DrawPathPrompts(App& app) {
  UiState& ui = app.ui;
  struct Prompt {
    PathPrompt* prompt;
    const char* title;
    const char* button;
    void (*act)(App&, const std::string&);
  };
  Prompt prompts[] = {{&ui.saveReport, "Save report", "Save", saveReport},
                      {&ui.exportImage, "Export view (.svg, .png, .pdf, .dot)", "Export", exportImage},
                      {&ui.saveFolded, "Save folded model", "Save", saveFoldedModel}};
  for (auto& p : prompts) {
    if (!p.prompt->visible) continue;
    const ImVec2 display = ImGui::GetIO().DisplaySize;
    ImGui::SetNextWindowPos(ImVec2(display.x * 0.5f, display.y * 0.3f), ImGuiCond_Appearing,
                            ImVec2(0.5f, 0.5f));
    ImGui::SetNextWindowSize(ImVec2(std::min(640.0f, display.x - 40), 0), ImGuiCond_Appearing);
    if (ImGui::Begin(p.title, &p.prompt->visible,
                     ImGuiWindowFlags_NoCollapse | ImGuiWindowFlags_AlwaysAutoResize)) {
      ImGui::SetNextItemWidth(600);
      if (p.prompt->focus) {
        ImGui::SetKeyboardFocusHere();
        p.prompt->focus = false;
      }
      bool go = ImGui::InputText("##path", &p.prompt->path, ImGuiInputTextFlags_EnterReturnsTrue);
      go |= ImGui::Button(p.button);
      ImGui::SameLine();
      if (ImGui::Button("Cancel")) p.prompt->visible = false;
      if (go && !p.prompt->path.empty()) {
        p.act(app, p.prompt->path);
        p.prompt->visible = false;
      }
    }
    ImGui::End();
  }
}

void handleShortcuts(App& app) {
  UiState& ui = app.ui;
  const ImGuiIO& io = ImGui::GetIO();
  if (io.KeyCtrl) {
    if (ImGui::IsKeyPressed(GLFW_KEY_O, false)) ui.open.visible = ui.open.focusPath = true;
    if (ImGui::IsKeyPressed(GLFW_KEY_S, false) && ui.model) {
      ui.saveReport = {true, true, defaultOutputPath(ui, ".foldnorm.json")};
    }
    if (ImGui::IsKeyPressed(GLFW_KEY_E, false) && !ui.scene.empty()) {
      ui.exportImage = {true, true, defaultOutputPath(ui, ".svg")};
    }
    if (!io.KeyShift && ImGui::IsKeyPressed(GLFW_KEY_F, false)) {
      ui.showLnTable = true;
      ui.lnSearchFocus = true;
    }
    if (ImGui::IsKeyPressed(GLFW_KEY_1, false)) ui.showLnTable = !ui.showLnTable;
    if (ImGui::IsKeyPressed(GLFW_KEY_2, false)) ui.showInspector = !ui.showInspector;
    if (ImGui::IsKeyPressed(GLFW_KEY_3, false)) ui.showActions = !ui.showActions;
    if (ImGui::IsKeyPressed(GLFW_KEY_4, false)) ui.showBench = !ui.showBench;
    const bool idle = app.modelWorker.idle() && ui.model && ui.model->analysis.foldableCount() > 0;
    if (io.KeyShift && ImGui::IsKeyPressed(GLFW_KEY_F, false) && idle) {
      startFold(app);
      return;
    }
    if (!io.KeyShift && ImGui::IsKeyPressed(GLFW_KEY_B, false) && idle) {
      ui.showBench = true;
      startBench(app);
      return;
    }
    if (ImGui::IsKeyPressed(GLFW_KEY_Q, false)) glfwSetWindowShouldClose(glfwGetCurrentContext(), 1);
    return;
  }
  if (io.WantTextInput) return;  // single keys belong to the text field being edited
  if (ImGui::IsKeyPressed(GLFW_KEY_F, false)) ui.camera.fitRequested = true;
  if (ImGui::IsKeyPressed(GLFW_KEY_M, false)) ui.showMinimap = !ui.showMinimap;
  if (ImGui::IsKeyPressed(GLFW_KEY_G, false) && ui.fold.folded) showFoldedGraph(app, !ui.showFolded);
  if (ImGui::IsKeyPressed(GLFW_KEY_C, false) && ui.selectedNode != kNone) {
    ui.camera.centerOn = ui.selectedNode;
  }
  if (ui.model && !ui.model->analysis.layerNorms.empty()) {
    const int count = static_cast<int>(ui.model->analysis.layerNorms.size());
    if (ImGui::IsKeyPressed(GLFW_KEY_DOWN) || ImGui::IsKeyPressed(GLFW_KEY_J)) {
      selectLayerNorm(app, std::min(count - 1, ui.selectedLn + 1), true);
    }
    if (ImGui::IsKeyPressed(GLFW_KEY_UP) || ImGui::IsKeyPressed(GLFW_KEY_K)) {
      selectLayerNorm(app, std::max(0, ui.selectedLn - 1), true);
    }
  }
}

void DrawFrame(App& app) {
  UiState& ui = app.ui;
  ui.record = {};
  DrawMainMenu(app);
  const float menuHeight = ImGui::GetFrameHeight();
  const WindowLayout l = computeWindowLayout(ui, ImGui::GetIO().DisplaySize, menuHeight);
  if (ui.showLnTable) {
    place(l.tablePos, l.tableSize);
    DrawLnTable(app);
  }
  if (ui.showActions) {
    place(l.actionsPos, l.actionsSize);
    DrawFold(app);
  }
  if (ui.showBench) {
    place(l.benchPos, l.benchSize);
    DrawBench(app);
  }
  place(l.canvasPos, l.canvasSize);
  DrawCanvas(app);
  if (ui.showInspector) {
    place(l.inspectorPos, l.inspectorSize);
    DrawInspector(app);
  }
  place(l.statusPos, l.statusSize);
  DrawStatusBar(app);
  DrawOpenDialog(app);
  DrawPathPrompts(app);
  if (ui.showMetrics) DrawMetrics(app);
  handleShortcuts(app);
}

}  // namespace foldnorm::gui
