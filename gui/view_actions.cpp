// Actions on the whole model: fold it, and show the verification's results. It runs on the
// model worker: the fold verifies in float32 and float64 on several input sets.
#include <algorithm>
#include <sstream>

#include "app.h"
#include "foldnorm/fold/fold.h"
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

}  // namespace

void startFold(App& app) {
  UiState& ui = app.ui;
  if (!ui.model) return;
  auto model = ui.model;
  const uint64_t generation = ui.generation;
  app.modelWorker.submit("fold", [=](const Worker::Progress& progress) -> Worker::Completion {
    FoldOptions options;
    options.progress = progress;
    FoldedModel folded = foldModel(model->imported, model->analysis, options);
    const FoldReport& r = folded.report;
    FoldState state;
    state.available = true;
    state.verified = r.verification.ran;
    state.equivalent = r.verification.float64Equivalent && r.verification.predictionsUnchanged;
    state.summary = "folded " + std::to_string(r.folded.size()) + " LNs, kept " +
                    std::to_string(r.kept.size()) + "; centered " +
                    std::to_string(r.centered.size()) + " parameters" +
                    (r.untied.empty() ? std::string()
                                      : ", untied " + std::to_string(r.untied.size()) + " (" +
                                            std::to_string(r.untieBytes / 1024) + " KiB)");
    const Verification& v = r.verification;
    if (v.ran) {
      state.details.push_back(std::to_string(v.runs) + " input sets on " + v.device +
                              ": worst relative error float64 " + scientific(v.worstRelative64) +
                              ", float32 " + scientific(v.worstRelative32));
      for (const OutputCheck& c : v.checks) {
        std::string line = "output " + std::to_string(c.output) + " " + c.shape + " " + c.dtype +
                           ": max rel " + scientific(c.maxRel);
        if (c.hasPredictions) line += ", argmax agrees " + percent(c.argmaxAgreement);
        state.details.push_back(line);
      }
    }
    return [state, generation](App& app) {
      if (app.ui.generation != generation) return;
      app.ui.fold = state;
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
      ImGui::TextColored(ui.fold.equivalent ? palette::kFoldableText : palette::kNotFoldableText,
                         "%s", ui.fold.equivalent ? "verified: same function (float64), same predictions"
                                                  : "verification FAILED");
    }
    for (const auto& d : ui.fold.details) ImGui::BulletText("%s", d.c_str());
  }
  ImGui::End();
}

}  // namespace foldnorm::gui
