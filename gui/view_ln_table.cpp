// The LayerNorm table: every LN with its verdict, leaves and reason; filter by verdict, search by
// text; selecting a row highlights the LN's mean-zero graph and centers the canvas on it.
#include <imgui.h>
#include <imgui_stdlib.h>  // after imgui.h, which it needs

#include <algorithm>
#include <cctype>

#include "app.h"
#include "palette.h"

namespace foldnorm::gui {
namespace {

bool containsNoCase(const std::string& haystack, const std::string& needle) {
  if (needle.empty()) return true;
  auto it = std::search(haystack.begin(), haystack.end(), needle.begin(), needle.end(),
                        [](char a, char b) { return std::tolower(a) == std::tolower(b); });
  return it != haystack.end();
}

// The analysis' settings, where its result is shown (as Tracy keeps a view's options at the top of
// that view): the two folds beyond the paper (docs/method.md sections 7 and 8), both on by default. A
// toggle analyses the model again on the worker; while the worker is busy they wait.
void drawAnalysisSettings(App& app) {
  UiState& ui = app.ui;
  const bool busy = !app.modelWorker.idle();
  AnalysisOptions& o = ui.analysisOptions;
  ImGui::BeginDisabled(busy);
  bool changed = ImGui::Checkbox("absorb per-channel scales", &o.scaleAbsorb);
  if (ImGui::IsItemHovered(ImGuiHoveredFlags_AllowWhenDisabled)) {
    ImGui::SetTooltip("LayerScale: gamma * (W h + b) folds by centering the scaled map (docs/method.md section 7);\n"
                      "off: those LayerNorms keep, with reason turned-off");
  }
  changed |= ImGui::Checkbox("insert one centering where it frees a stream", &o.insertCentering);
  if (ImGui::IsItemHovered(ImGuiHoveredFlags_AllowWhenDisabled)) {
    ImGui::SetTooltip("x - mean(x) inserted once where a stream starts at a non-leaf, when that frees at least\n"
                      "two LayerNorms (docs/method.md section 8)");
  }
  ImGui::EndDisabled();
  if (changed) reanalyze(app);
  const Worker::Status worker = app.modelWorker.status();
  if (worker.title == "analyse") {
    ImGui::TextDisabled("analysing again: %s", worker.message.c_str());
  } else if (ui.model->analysisOptions.scaleAbsorb != o.scaleAbsorb ||
             ui.model->analysisOptions.insertCentering != o.insertCentering) {
    ImGui::TextDisabled("shown: the analysis with the previous settings (the new one is queued)");
  }
}

}  // namespace

void DrawLnTable(App& app) {
  UiState& ui = app.ui;
  if (!beginModelWindow(ui, "LayerNorms", &ui.showLnTable)) return;
  const auto& result = ui.model->analysis;
  const auto& lns = result.layerNorms;
  ImGui::Text("%zu of %zu fold into RMSNorm", result.foldableCount(), lns.size());
  drawAnalysisSettings(app);

  ImGui::SetNextItemWidth(-150);
  if (ui.lnSearchFocus) {
    ImGui::SetKeyboardFocusHere();
    ui.lnSearchFocus = false;
  }
  ImGui::InputTextWithHint("##search", "search module, op or reason (Ctrl+F)", &ui.lnSearch);
  ImGui::SameLine();
  ImGui::SetNextItemWidth(-1);
  const char* filters[] = {"all", "foldable", "not foldable"};
  ImGui::Combo("##verdict", &ui.lnVerdictFilter, filters, 3);

  const ImGuiTableFlags flags = ImGuiTableFlags_RowBg | ImGuiTableFlags_BordersInnerV |
                                ImGuiTableFlags_ScrollY | ImGuiTableFlags_Resizable |
                                ImGuiTableFlags_SizingStretchProp;
  // One table per model: the columns fit each model's names afresh.
  ImGui::PushID(static_cast<int>(ui.generation));
  if (ImGui::BeginTable("lns", 4, flags)) {
    ImGui::TableSetupScrollFreeze(0, 1);
    // The module path is what people scan for: its column fits the longest one (up to half the
    // table), so "transformer.h.10.ln_2" is never cut to "transformer.h.10.ln_"; the reason,
    // which has a tooltip, takes the rest.
    float nameWidth = ImGui::CalcTextSize("LayerNorm").x;
    float verdictWidth = ImGui::CalcTextSize("foldable").x;
    for (const auto& v : lns) {
      nameWidth = std::max(nameWidth, ImGui::CalcTextSize(v.info.modulePath.c_str()).x);
      if (!v.foldable) verdictWidth = std::max(verdictWidth, ImGui::CalcTextSize(toString(v.reason)).x);
    }
    nameWidth = std::min(nameWidth + 6, ImGui::GetContentRegionAvail().x * 0.5f);
    ImGui::TableSetupColumn("LayerNorm", ImGuiTableColumnFlags_WidthFixed, nameWidth);
    ImGui::TableSetupColumn("verdict", ImGuiTableColumnFlags_WidthFixed, verdictWidth + 6);
    ImGui::TableSetupColumn("leaves", ImGuiTableColumnFlags_WidthFixed, 44.0f);
    ImGui::TableSetupColumn("reason", ImGuiTableColumnFlags_WidthStretch, 1.0f);
    ImGui::TableHeadersRow();
    std::size_t shown = 0;
    for (std::size_t i = 0; i < lns.size(); ++i) {
      const LayerNormVerdict& v = lns[i];
      if (ui.lnVerdictFilter == 1 && !v.foldable) continue;
      if (ui.lnVerdictFilter == 2 && v.foldable) continue;
      const std::string reason = reasonText(ui.model->imported().graph, result, v);
      if (!ui.lnSearch.empty() && !containsNoCase(v.info.modulePath, ui.lnSearch) &&
          !containsNoCase(reason, ui.lnSearch) && !containsNoCase(toString(v.reason), ui.lnSearch)) {
        continue;
      }
      ++shown;
      ImGui::TableNextRow();
      ImGui::TableNextColumn();
      const bool selected = ui.selectedLn == static_cast<int>(i);
      ImGui::PushID(static_cast<int>(i));
      const std::string name = v.info.modulePath.empty() ? "(top level)" : v.info.modulePath;
      if (ImGui::Selectable(name.c_str(), selected, ImGuiSelectableFlags_SpanAllColumns)) {
        selectLayerNorm(app, static_cast<int>(i), true);
      }
      if (selected && ui.scrollTableToSelection) {
        ImGui::SetScrollHereY(0.5f);
        ui.scrollTableToSelection = false;
      }
      ImGui::PopID();
      ImGui::TableNextColumn();
      if (v.foldable) ImGui::TextColored(palette::kFoldableText, "foldable");
      else ImGui::TextColored(palette::kNotFoldableText, "%s", toString(v.reason));
      ImGui::TableNextColumn();
      ImGui::Text("%zu", v.leaves.size());
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(reason.c_str());
      if (ImGui::IsItemHovered() && !reason.empty()) ImGui::SetTooltip("%s", reason.c_str());
    }
    ui.record.lnRowsShown = shown;
    ImGui::EndTable();
  }
  ImGui::PopID();
  ImGui::End();
}

}  // namespace foldnorm::gui
