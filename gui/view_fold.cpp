// The Fold window: fold the model (startFold in actions.cpp, on the model worker) and show the
// verification's results (float32 and float64, several input sets), save the fold, and switch the
// canvas to the folded graph.
#include <imgui.h>

#include <string>

#include "app.h"
#include "foldnorm/fold/fold.h"
#include "foldnorm/fold/model.h"
#include "palette.h"

namespace foldnorm::gui {
namespace {

std::string percent(double x) { return std::to_string(x * 100).substr(0, 5) + "%"; }

void drawVerificationTable(UiState& ui) {
  if (ui.fold.checks.empty()) return;
  const ImGuiTableFlags flags = ImGuiTableFlags_RowBg | ImGuiTableFlags_BordersInnerV |
                                ImGuiTableFlags_SizingStretchProp;
  if (!ImGui::BeginTable("verification", 5, flags)) return;
  for (const char* name : {"output", "shape", "dtype", "max rel", "argmax"}) ImGui::TableSetupColumn(name);
  ImGui::TableHeadersRow();
  for (const OutputCheck& c : ui.fold.checks) {
    ImGui::TableNextRow();
    ImGui::TableNextColumn();
    ImGui::Text("%zu", c.output);
    ImGui::TableNextColumn();
    ImGui::TextUnformatted(c.shape.c_str());
    ImGui::TableNextColumn();
    ImGui::TextUnformatted(c.dtype.c_str());
    ImGui::TableNextColumn();
    ImGui::Text("%.2e", c.maxRel);
    ImGui::TableNextColumn();
    ImGui::TextUnformatted(c.hasPredictions ? percent(c.argmaxAgreement).c_str() : "-");
  }
  ImGui::EndTable();
}

}  // namespace

void DrawFold(App& app) {
  UiState& ui = app.ui;
  if (!beginModelWindow(ui, "Fold", &ui.showActions)) return;
  const Worker::Status worker = app.modelWorker.status();
  const bool busy = !app.modelWorker.idle();
  const bool foldable = ui.model->analysis.foldableCount() > 0;
  ImGui::BeginDisabled(busy || !foldable);
  if (ImGui::Button("Fold and verify (Ctrl+Shift+F)")) startFold(app);
  ImGui::EndDisabled();
  if (!foldable) {
    ImGui::SameLine();
    ImGui::TextDisabled("no LN folds");
  }
  if (worker.title == "fold") ImGui::TextDisabled("folding: %s", worker.message.c_str());
  if (ui.fold.summary) {
    ImGui::TextWrapped("%s", ui.fold.summary->c_str());
    if (ui.fold.verified) {
      const char* verdict = !ui.fold.equivalent            ? "verification FAILED"
                            : ui.fold.predictionsUnchanged ? "verified: same function (float64), same predictions"
                                                           : "verified: same function (float64); flips in the "
                                                             "model's dtype, each within its rounding";
      ImGui::TextColored(ui.fold.equivalent ? palette::kFoldableText : palette::kNotFoldableText, "%s", verdict);
    }
    for (const auto& d : ui.fold.details) {
      ImGui::Bullet();
      ImGui::TextWrapped("%s", d.c_str());  // the verdict lines are long: wrap in a narrow panel
    }
    drawVerificationTable(ui);
    const bool savable = ui.fold.result && ui.fold.verified && ui.fold.equivalent;
    ImGui::BeginDisabled(busy || !savable);
    if (ImGui::Button("Save folded model...")) {
      std::string base = ui.model->imported().path;
      if (auto dot = base.rfind('.'); dot != std::string::npos && base.find('/', dot) == std::string::npos) base.resize(dot);
      ui.saveFolded = {true, true, base + ".folded" + Model::borrow(ui.model->imported()).foldedExtension()};
    }
    ImGui::EndDisabled();
    if (ImGui::IsItemHovered(ImGuiHoveredFlags_AllowWhenDisabled)) {
      const Model model = Model::borrow(ui.model->imported());
      const bool portable = ui.fold.result && ui.fold.result->report().rmsOp == RmsOp::Aten;
      ImGui::SetTooltip("a %s with %s: loads with %s%s", model.foldedExtension(),
                        portable ? "aten::rms_norm" : "foldnorm::rms_norm", model.loader(),
                        portable ? ", no library needed" : " after libfoldnorm_ops.so is loaded");
    }
    if (ui.fold.folded) {
      bool folded = ui.showFolded;
      if (ImGui::Checkbox("Show the folded graph (G)", &folded)) showFoldedGraph(app, folded);
      if (ImGui::IsItemHovered()) {
        ImGui::SetTooltip("the canvas shows the folded model: RMSNorm nodes, kept LayerNorms and "
                          "the ops that read centered parameters marked");
      }
    } else if (!ui.fold.foldedError.empty()) {
      ImGui::TextColored(palette::kNotFoldableText, "folded graph: %s", ui.fold.foldedError.c_str());
    }
  }
  ImGui::End();
}

}  // namespace foldnorm::gui
