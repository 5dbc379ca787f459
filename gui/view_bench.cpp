// The Benchmark window: time the original against the folded model per sequence length
// (bench::runModelBench, started by startBench in actions.cpp) and show the timings as a table and
// a bar chart.
#include <imgui.h>
#include <imgui_stdlib.h>  // after imgui.h, which it needs

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "app.h"
#include "bench_support.h"
#include "foldnorm/import/input_spec.h"
#include "layout_task.h"
#include "palette.h"

namespace foldnorm::gui {
namespace {

std::string scientific(double x) {
  std::ostringstream os;
  os.precision(2);
  os << std::scientific << x;
  return os.str();
}

// Milliseconds with three significant digits or so: 0.123, 1.23, 12.3, 123.
std::string ms(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, x < 1 ? "%.3f" : x < 10 ? "%.2f" : x < 100 ? "%.1f" : "%.0f", x);
  return buf;
}

std::string spread(const bench::Spread& s) { return ms(s.median) + " [" + ms(s.p10) + "-" + ms(s.p90) + "]"; }

std::string ratio(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f", x);
  return buf;
}

std::string caseLabel(const bench::ModelBenchReport& r, const bench::ModelBenchCase& c) {
  return r.seqApplies ? "seq " + std::to_string(c.seq) : "spec shape";
}

// A speed-up is called only when the whole p10-p90 range of the per-round ratios is on one side
// of 1; otherwise it is within the noise of this run.
ImVec4 speedupColour(const bench::Spread& s) {
  if (s.p10 > 1) return palette::kFoldableText;
  if (s.p90 < 1) return palette::kNotFoldableText;
  return palette::kDimText;
}

constexpr ImU32 kOriginalBar = IM_COL32(135, 148, 172, 255);
constexpr ImU32 kFoldedBar = palette::kLnFoldable;
constexpr ImU32 kWhisker = IM_COL32(235, 235, 235, 210);

// Original vs folded per length: two bars (median) with p10-p90 whiskers, the median above each
// bar where it fits, the length and the speed-up below each pair.
void drawBenchChart(UiState& ui, const bench::ModelBenchReport& r, float height) {
  std::vector<BenchBarGroup> groups;
  std::vector<const bench::ModelBenchCase*> timed;
  for (const auto& c : r.cases) {
    if (!c.skipped.empty()) continue;
    timed.push_back(&c);
    groups.push_back({caseLabel(r, c), c.originalMs.median, c.originalMs.p10, c.originalMs.p90,
                      c.foldedMs.median, c.foldedMs.p10, c.foldedMs.p90});
  }
  if (groups.empty()) return;
  ImDrawList* draw = ImGui::GetWindowDrawList();
  const float line = ImGui::GetTextLineHeight();
  const float width = ImGui::GetContentRegionAvail().x;
  const ImVec2 origin = ImGui::GetCursorScreenPos();
  ImGui::Dummy(ImVec2(width, height));

  // Legend.
  float x = origin.x;
  auto swatch = [&](ImU32 colour, const char* name) {
    draw->AddRectFilled(ImVec2(x, origin.y + 3), ImVec2(x + 10, origin.y + line - 2), colour);
    draw->AddText(ImVec2(x + 14, origin.y), palette::kNodeText, name);
    x += 14 + ImGui::CalcTextSize(name).x + 14;
  };
  swatch(kOriginalBar, "original");
  swatch(kFoldedBar, "folded");
  const char* note = "median ms, whiskers p10-p90";
  draw->AddText(ImVec2(origin.x + width - ImGui::CalcTextSize(note).x, origin.y),
                ImGui::GetColorU32(palette::kDimText), note);

  const float plotTop = origin.y + line * 2 + 4;  // legend, then room for the medians
  const float baseline = origin.y + height - line * 2 - 4;
  if (baseline - plotTop < 10) return;
  const auto bars = layoutBenchBars(groups, width, baseline - plotTop);
  draw->AddLine(ImVec2(origin.x, baseline), ImVec2(origin.x + width, baseline),
                palette::kNodeBorder);
  for (const auto& b : bars) {
    const ImVec2 lo(origin.x + b.x0, plotTop + b.top), hi(origin.x + b.x1, baseline);
    draw->AddRectFilled(lo, hi, b.folded ? kFoldedBar : kOriginalBar);
    const float mid = (lo.x + hi.x) * 0.5f, cap = std::min(5.0f, (hi.x - lo.x) * 0.25f);
    const float wTop = plotTop + b.whiskerTop, wBottom = plotTop + b.whiskerBottom;
    draw->AddLine(ImVec2(mid, wTop), ImVec2(mid, wBottom), kWhisker);
    draw->AddLine(ImVec2(mid - cap, wTop), ImVec2(mid + cap, wTop), kWhisker);
    draw->AddLine(ImVec2(mid - cap, wBottom), ImVec2(mid + cap, wBottom), kWhisker);
    const std::string label = ms(b.value);
    const ImVec2 size = ImGui::CalcTextSize(label.c_str());
    if (size.x <= hi.x - lo.x + 8) {
      draw->AddText(ImVec2(mid - size.x * 0.5f, std::min(lo.y, wTop) - size.y - 1),
                    palette::kNodeText, label.c_str());
    }
    ++ui.record.benchBarsDrawn;
  }
  const float groupWidth = width / static_cast<float>(groups.size());
  for (std::size_t i = 0; i < groups.size(); ++i) {
    const float mid = origin.x + groupWidth * (static_cast<float>(i) + 0.5f);
    const std::string& name = groups[i].label;
    const std::string speed = ratio(timed[i]->speedup.median) + "x";
    const float nameW = ImGui::CalcTextSize(name.c_str()).x, speedW = ImGui::CalcTextSize(speed.c_str()).x;
    draw->AddText(ImVec2(mid - nameW * 0.5f, baseline + 2), palette::kNodeText, name.c_str());
    draw->AddText(ImVec2(mid - speedW * 0.5f, baseline + 2 + line),
                  ImGui::GetColorU32(speedupColour(timed[i]->speedup)), speed.c_str());
  }
}

// One row per output and dtype: the verification the folded graph is shown next to.
}  // namespace

void DrawBench(App& app) {
  UiState& ui = app.ui;
  if (!beginModelWindow(ui, "Benchmark", &ui.showBench)) return;
  BenchState& b = ui.bench;
  const float labelGap = ImGui::GetStyle().ItemInnerSpacing.x;
  auto label = [&](const char* text) {
    ImGui::AlignTextToFramePadding();
    ImGui::TextUnformatted(text);
    ImGui::SameLine(0, labelGap);
  };

  // Settings: device, dtype, rms op / reps, sequence lengths.
  const auto devices = b.devices();
  b.device = std::clamp(b.device, 0, static_cast<int>(devices.size()) - 1);
  label("device");
  ImGui::SetNextItemWidth(70);
  if (ImGui::BeginCombo("##device", devices[b.device].c_str())) {
    for (int i = 0; i < static_cast<int>(devices.size()); ++i) {
      if (ImGui::Selectable(devices[i].c_str(), i == b.device)) b.device = i;
    }
    ImGui::EndCombo();
  }
  if (ImGui::IsItemHovered()) {
    ImGui::SetTooltip("%s", !b.cudaProbed       ? "asking LibTorch for a CUDA device ..."
                            : b.cudaAvailable ? "cpu or cuda"
                                              : "cpu only: LibTorch sees no CUDA device here");
  }
  ImGui::SameLine();
  label("dtype");
  ImGui::SetNextItemWidth(90);
  const char* dtypes[] = {"float32", "bfloat16", "float16"};
  ImGui::Combo("##dtype", &b.dtype, dtypes, 3);
  if (ImGui::IsItemHovered()) {
    ImGui::SetTooltip("timing dtype: both models are cast after the fold was verified in float32 "
                      "and float64");
  }
  ImGui::SameLine();
  label("rms op");
  ImGui::SetNextItemWidth(90);
  ImGui::Combo("##rmsop", &b.rmsOp, kRmsOpNames, IM_ARRAYSIZE(kRmsOpNames));
  if (ImGui::IsItemHovered()) {
    ImGui::SetTooltip("what the folded LNs become in the timed model: foldnorm (our fused op, the fast "
                      "one on the CPU) or aten (aten::rms_norm + a bias add, as `foldnorm fold X.pt2` "
                      "writes by default)");
  }
  // Second row: reps, then the lengths (the first row has no room left for reps beside rms op).
  label("reps");
  ImGui::SetNextItemWidth(100);
  if (ImGui::InputInt("##reps", &b.reps, 1, 5)) b.reps = std::clamp(b.reps, 2, 1000);
  ImGui::SameLine();
  label("seq");
  ImGui::SetNextItemWidth(-1);
  ImGui::InputTextWithHint("##seq", "sequence lengths, e.g. 64,128 (empty: the model's own)",
                           &b.seqText);

  const bool running = benchRunning(app);
  const bool busy = !app.modelWorker.idle();
  const bool foldable = ui.model->analysis.foldableCount() > 0;
  ImGui::BeginDisabled(busy || !foldable);
  if (ImGui::Button("Benchmark (Ctrl+B)")) startBench(app);
  ImGui::EndDisabled();
  ImGui::SameLine();
  const Worker::Status worker = app.modelWorker.status();
  if (!foldable) {
    ImGui::TextDisabled("no LN folds: nothing to compare");
  } else if (running) {
    ImGui::TextDisabled("running %.0f s", worker.title == "benchmark" ? worker.seconds : 0.0);
  } else if (b.report) {
    ImGui::TextDisabled("done in %.1f s (import, fold, verify, timing)", b.seconds);
  } else {
    ImGui::TextDisabled("original vs folded, end to end");
  }
  if (running && worker.title == "benchmark") {
    ImGui::PushStyleColor(ImGuiCol_Text, palette::kDimText);
    ImGui::TextWrapped("%s", worker.message.c_str());
    ImGui::PopStyleColor();
  }
  if (!b.error.empty()) ImGui::TextColored(palette::kNotFoldableText, "%s", b.error.c_str());
  if (!b.report) {
    ImGui::End();
    return;
  }

  const bench::ModelBenchReport& r = *b.report;
  ImGui::PushStyleColor(ImGuiCol_Text, palette::kDimText);
  std::string settings = r.device + " " + r.dtype + ", " + std::to_string(r.threads) +
                         " threads, " + std::to_string(r.reps) + " rounds after " +
                         std::to_string(r.warmup) + " warm-up; " +
                         std::to_string(r.foldedLayerNorms) + " LNs folded (" +
                         (r.rmsOp == "aten" ? "aten::rms_norm" : "foldnorm::rms_norm") + "), float64 error " +
                         scientific(r.worstRelative64) + "; runner " + r.runner +
                         (r.runner == "interpreter" ? " (the times are the .pt2 interpreter's)" : "");
  if (r.loadBefore >= 0) {
    char load[64];
    std::snprintf(load, sizeof load, "; load %.1f -> %.1f", r.loadBefore, r.loadAfter);
    settings += load;
  }
  ImGui::TextWrapped("%s", settings.c_str());
  ImGui::PopStyleColor();

  const ImGuiTableFlags flags = ImGuiTableFlags_RowBg | ImGuiTableFlags_BordersInnerV |
                                ImGuiTableFlags_SizingStretchProp;
  if (ImGui::BeginTable("bench", 4, flags)) {
    ImGui::TableSetupColumn(r.seqApplies ? "seq" : "input", ImGuiTableColumnFlags_WidthFixed,
                            ImGui::CalcTextSize(r.seqApplies ? "seq 0000" : "spec").x);
    ImGui::TableSetupColumn("original ms", ImGuiTableColumnFlags_WidthStretch, 1.0f);
    ImGui::TableSetupColumn("folded ms", ImGuiTableColumnFlags_WidthStretch, 1.0f);
    ImGui::TableSetupColumn("speed-up", ImGuiTableColumnFlags_WidthStretch, 0.8f);
    ImGui::TableHeadersRow();
    for (const auto& c : r.cases) {
      ImGui::TableNextRow();
      ImGui::TableNextColumn();
      if (r.seqApplies) ImGui::Text("%lld", static_cast<long long>(c.seq));
      else ImGui::TextUnformatted("spec");
      ++ui.record.benchRowsShown;
      if (!c.skipped.empty()) {
        ImGui::TableNextColumn();
        ImGui::TextColored(palette::kNotFoldableText, "skipped");
        if (ImGui::IsItemHovered()) ImGui::SetTooltip("%s", c.skipped.c_str());
        ImGui::TableNextColumn();
        ImGui::TextDisabled("%s", c.skipped.c_str());
        ImGui::TableNextColumn();
        continue;
      }
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(spread(c.originalMs).c_str());
      if (ImGui::IsItemHovered()) {
        ImGui::SetTooltip("median [p10-p90] over %d rounds; %.0f %s/s", r.reps,
                          c.originalItemsPerSecond, r.itemUnit.c_str());
      }
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(spread(c.foldedMs).c_str());
      if (ImGui::IsItemHovered()) {
        ImGui::SetTooltip("median [p10-p90] over %d rounds; %.0f %s/s", r.reps,
                          c.foldedItemsPerSecond, r.itemUnit.c_str());
      }
      ImGui::TableNextColumn();
      ImGui::TextColored(speedupColour(c.speedup), "%sx", ratio(c.speedup.median).c_str());
      if (ImGui::IsItemHovered()) {
        ImGui::SetTooltip("per-round original/folded: median %s, p10-p90 %s-%s%s",
                          ratio(c.speedup.median).c_str(), ratio(c.speedup.p10).c_str(),
                          ratio(c.speedup.p90).c_str(),
                          c.speedup.p10 <= 1 && c.speedup.p90 >= 1 ? " (within this run's noise)"
                                                                    : "");
      }
    }
    ImGui::EndTable();
  }
  const float line = ImGui::GetTextLineHeight();
  // The chart takes what the panel has left (within reason); the panel scrolls below its minimum.
  drawBenchChart(ui, r, std::clamp(ImGui::GetContentRegionAvail().y - 4, line * 4 + 50, line * 4 + 160));
  ImGui::End();
}

}  // namespace foldnorm::gui
