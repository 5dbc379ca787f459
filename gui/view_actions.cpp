// Actions on the whole model, each a panel in the left column below the LN table:
// - Fold: fold it and show the verification's results (float32 and float64, several input
//   sets), on the model worker;
// - Benchmark: time the original against the folded model per sequence length
//   (bench::runModelBench, started by startBench in actions.cpp) and show the timings as a table
//   and a bar chart.
#include <imgui.h>
#include <imgui_stdlib.h>  // after imgui.h, which it needs

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <sstream>

#include "app.h"
#include "bench_support.h"
#include "foldnorm/fold/fold.h"
#include "foldnorm/import/export.h"
#include "foldnorm/import/input_spec.h"
#include "layout_task.h"
#include "palette.h"

namespace foldnorm::gui {
namespace {

std::string percent(double x) { return std::to_string(x * 100).substr(0, 5) + "%"; }

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
    ImGui::TextUnformatted(scientific(c.maxRel).c_str());
    ImGui::TableNextColumn();
    ImGui::TextUnformatted(c.hasPredictions ? percent(c.argmaxAgreement).c_str() : "-");
  }
  ImGui::EndTable();
}

}  // namespace

// Fold and verify on the model worker, under the analysis shown (its settings included): a
// TorchScript model through foldModel, a .pt2 through foldExport (the portable aten::rms_norm
// form, as `foldnorm fold X.pt2` writes by default), both verified in float32 and float64.
void startFold(App& app) {
  UiState& ui = app.ui;
  if (!ui.model) return;
  auto model = ui.model;
  const uint64_t generation = ui.generation;
  app.modelWorker.submit("fold", [=](const Worker::Progress& progress) -> Worker::Completion {
    FoldOptions options;
    options.progress = progress;
    options.rmsOp = model->imported().exported ? RmsOp::Aten : RmsOp::Foldnorm;
    auto fold = std::make_shared<const bench::ModelFold>(bench::foldAnyModel(model->imported(), model->analysis, options));
    const FoldReport& r = fold->report();
    FoldState state;
    state.available = true;
    state.result = fold;
    state.verified = r.verification.ran;
    // As `foldnorm fold` decides: float64 equivalent and every float32 flip explained by rounding.
    state.equivalent = r.verification.passed();
    state.predictionsUnchanged = r.verification.predictionsUnchanged;
    state.summary = "folded " + std::to_string(r.folded.size()) + " LNs, kept " +
                    std::to_string(r.kept.size()) + "; centered " +
                    std::to_string(r.centered.size()) + " parameters" +
                    (r.untied.empty() ? std::string()
                                      : ", untied " + std::to_string(r.untied.size()) + " (" +
                                            std::to_string(r.untieBytes / 1024) + " KiB)") +
                    (r.inserted.empty() ? std::string() : ", inserted " + std::to_string(r.inserted.size()) +
                                                              " centering(s)");
    const Verification& v = r.verification;
    if (v.ran) {
      // The verdict lines `foldnorm fold` prints, for either kind of model.
      state.details.push_back(std::to_string(v.runs) + " input sets on " + v.device + ", LNs now " +
                              (r.rmsOp == RmsOp::Aten ? "aten::rms_norm" : "foldnorm::rms_norm"));
      for (const auto& line : verificationSummary(v)) state.details.push_back(line);
    }
    state.checks = v.checks;
    // The folded graph for the canvas: the folded model written as the CLI writes it and read
    // back by the importer, so the picture is of the file `foldnorm fold` would save.
    if (!r.folded.empty()) {
      namespace fs = std::filesystem;
      const fs::path tmp = fs::temp_directory_path() /
                           ("foldnorm-gui-folded-" + std::to_string(::getpid()) + "-" +
                            std::to_string(generation) + bench::foldedExtension(model->imported()));
      try {
        progress("importing the folded model for the canvas");
        bench::saveModelFold(*fold, model->imported(), tmp.string());
        auto loaded = std::make_shared<LoadedModel>();
        ImportOptions importOptions;
        for (const auto& spec : model->inputSpecs) importOptions.inputs.push_back(parseInputSpec(spec));
        loaded->import = std::make_shared<const ImportedModel>(importModel(tmp.string(), importOptions));
        loaded->inputSpecs = model->inputSpecs;
        state.marks = render::foldedMarksFor(model->imported().graph, model->analysis, loaded->imported().graph);
        state.folded = loaded;
      } catch (const std::exception& e) {
        state.foldedError = e.what();
        if (auto nl = state.foldedError.find('\n'); nl != std::string::npos) state.foldedError.resize(nl);
      }
      std::error_code ec;
      fs::remove(tmp, ec);
    }
    return [state, generation](App& app) {
      if (app.ui.generation != generation) return;
      app.ui.fold = state;
    };
  });
}

// Writes the last fold where the user asked, on the model worker: atomically (a temporary file,
// then a rename), never over the input; only a fold that passed its verification.
void saveFoldedModel(App& app, const std::string& path) {
  UiState& ui = app.ui;
  if (!ui.model || !ui.fold.result) return;
  if (!ui.fold.verified || !ui.fold.result->report().verification.passed()) {
    ui.errorMessage = "save folded model: the fold did not pass its verification; not writing " + path;
    return;
  }
  const auto model = ui.model;
  const auto fold = ui.fold.result;
  const uint64_t generation = ui.generation;
  app.modelWorker.submit("save folded model", [=](const Worker::Progress& progress) -> Worker::Completion {
    progress("writing " + path);
    checkOutputPath(model->imported().path, path);
    checkFoldedOutputKind(model->imported(), path);
    bench::saveModelFold(*fold, model->imported(), path);
    return [path, generation](App& app) {
      if (app.ui.generation != generation) return;
      app.ui.statusMessage = "folded model saved to " + path;
      app.ui.fold.savedPath = path;
    };
  });
}

void DrawActions(App& app) {
  UiState& ui = app.ui;
  if (!ImGui::Begin("Fold", &ui.showActions, ImGuiWindowFlags_NoCollapse)) {
    ImGui::End();
    return;
  }
  recordPanel(ui, "Fold");
  if (!ui.model) {
    ImGui::TextDisabled("No model loaded.");
    ImGui::End();
    return;
  }
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
      ui.saveFolded = {true, true, base + ".folded" + bench::foldedExtension(ui.model->imported())};
    }
    ImGui::EndDisabled();
    if (ImGui::IsItemHovered(ImGuiHoveredFlags_AllowWhenDisabled)) {
      ImGui::SetTooltip("%s", ui.model->imported().exported
                                  ? "a .pt2 with aten::rms_norm: loads with torch.export.load, no library needed"
                                  : "a .pt with foldnorm::rms_norm: load libfoldnorm_ops.so first");
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

void showFoldedGraph(App& app, bool folded) {
  UiState& ui = app.ui;
  if (folded && !ui.fold.folded) return;
  if (ui.showFolded == folded) return;
  ui.showFolded = folded;
  ui.scene = {};  // the other graph's boxes and ids mean nothing here
  ui.camera = {};
  startLayout(app, {});
}

void DrawBench(App& app) {
  UiState& ui = app.ui;
  if (!ImGui::Begin("Benchmark", &ui.showBench, ImGuiWindowFlags_NoCollapse)) {
    ImGui::End();
    return;
  }
  recordPanel(ui, "Benchmark");
  if (!ui.model) {
    ImGui::TextDisabled("No model loaded.");
    ImGui::End();
    return;
  }
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
  ImGui::Combo("##rmsop", &b.rmsOp, kBenchRmsOps, IM_ARRAYSIZE(kBenchRmsOps));
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
