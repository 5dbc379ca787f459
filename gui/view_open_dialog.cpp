// Open a model: type a path (Tab completes it from the directory listing shown below), give
// input specs if the model has none embedded, Enter opens. The load runs on the model worker.
#include <imgui.h>
#include <imgui_stdlib.h>  // after imgui.h, which it needs

#include <algorithm>
#include <filesystem>

#include "app.h"
#include "path_completion.h"

namespace foldnorm::gui {

void DrawOpenDialog(App& app) {
  UiState& ui = app.ui;
  OpenDialogState& d = ui.open;
  if (!d.visible) return;
  const ImVec2 display = ImGui::GetIO().DisplaySize;
  ImGui::SetNextWindowPos(ImVec2(display.x * 0.5f, display.y * 0.35f), ImGuiCond_Appearing,
                          ImVec2(0.5f, 0.5f));
  ImGui::SetNextWindowSize(ImVec2(std::min(720.0f, display.x - 40), 420), ImGuiCond_Appearing);
  if (!ImGui::Begin("Open model", &d.visible, ImGuiWindowFlags_NoCollapse)) {
    ImGui::End();
    return;
  }
  recordPanel(ui, "Open model");
  const std::string directory = directoryPart(d.path);
  if (directory != d.listedDirectory) {
    d.listedDirectory = directory;
    d.entries = listDirectory(directory, &d.listError);
  }

  ImGui::TextUnformatted("Model (.pt, traced TorchScript, or .pt2, torch.export)");
  ImGui::SetNextItemWidth(-1);
  if (d.focusPath) {
    ImGui::SetKeyboardFocusHere();
    d.focusPath = false;
  }
  bool submit = false;
  struct Ctx { OpenDialogState* d; };
  Ctx ctx{&d};
  auto onTab = [](ImGuiInputTextCallbackData* data) -> int {
    auto* c = static_cast<Ctx*>(data->UserData);
    const std::string typed(data->Buf, data->BufTextLen);
    const std::string completed = completePath(typed, c->d->entries);
    if (completed != typed) {
      data->DeleteChars(0, data->BufTextLen);
      data->InsertChars(0, completed.c_str());
    }
    return 0;
  };
  if (ImGui::InputText("##path", &d.path,
                       ImGuiInputTextFlags_EnterReturnsTrue | ImGuiInputTextFlags_CallbackCompletion,
                       onTab, &ctx)) {
    submit = true;
  }
  ImGui::TextUnformatted("Input specs (optional, e.g. 1x64:int64[0,50257))");
  ImGui::SetNextItemWidth(-1);
  if (ImGui::InputText("##inputs", &d.inputs, ImGuiInputTextFlags_EnterReturnsTrue)) submit = true;

  ImGui::TextDisabled("%s", directory.empty() ? "." : directory.c_str());
  const float listHeight = ImGui::GetContentRegionAvail().y - ImGui::GetFrameHeightWithSpacing();
  if (ImGui::BeginChild("listing", ImVec2(0, listHeight), true)) {
    if (!d.listError.empty()) ImGui::TextDisabled("%s", d.listError.c_str());
    const std::string prefix = basenamePart(d.path);
    for (const auto& entry : d.entries) {
      if (entry.compare(0, prefix.size(), prefix) != 0) continue;
      if (ImGui::Selectable(entry.c_str(), false, ImGuiSelectableFlags_AllowDoubleClick)) {
        d.path = joinPath(directory, entry);
        d.focusPath = true;
        if (ImGui::IsMouseDoubleClicked(0) && entry.back() != '/') submit = true;
      }
    }
  }
  ImGui::EndChild();
  if (ImGui::Button("Open (Enter)")) submit = true;
  ImGui::SameLine();
  if (ImGui::Button("Cancel")) d.visible = false;
  if (submit && !d.path.empty() && d.path.back() != '/') {
    openModel(app, d.path, splitInputSpecs(d.inputs));
    d.visible = false;
  }
  ImGui::End();
}

}  // namespace foldnorm::gui
