#include "headless.h"

#include <GLFW/glfw3.h>

#include <algorithm>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <vector>

#include <stb_image_write.h>

#include "app.h"

namespace foldnorm::gui {

HeadlessRun::HeadlessRun(HeadlessOptions options)
    : options_(std::move(options)), start_(std::chrono::steady_clock::now()) {}

bool HeadlessRun::ready(const App& app) const {
  if (!app.modelWorker.idle() || !app.layoutWorker.idle()) return false;
  if (!app.ui.errorMessage.empty()) return true;  // show the error, then fail
  if (app.ui.analyses.size() < options_.analysesExpected()) return false;
  if (options_.bench && !app.ui.bench.report) return false;
  if (!options_.saveFolded.empty() && app.ui.fold.savedPath.empty()) return false;
  if ((options_.fold || options_.showFolded) && !app.ui.fold.summary) return false;
  if (options_.showFolded && !app.ui.showFolded) return !app.ui.fold.foldedError.empty();
  return app.ui.model && !app.ui.scene.empty() && app.ui.camera.centerOn == kNone &&
         !app.ui.camera.fitRequested;
}

HeadlessRun::Step HeadlessRun::afterFrame(App& app, int width, int height) {
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  if (elapsed > options_.timeoutSeconds) {
    std::cerr << "foldnorm-gui: error: not ready after " << options_.timeoutSeconds
              << " s (loading, layout" << (options_.bench ? " or the benchmark" : "")
              << " still running); raise --timeout\n";
    return Step::Failed;
  }
  if (!ready(app)) {
    settledFrames_ = 0;
    return Step::Continue;
  }
  // --export-view: the picture the renderer makes of this view, written on the layout worker
  // (ready() waits for it); then the screenshot of the same view.
  if (!options_.exportView.empty() && !exportSubmitted_ && app.ui.errorMessage.empty()) {
    exportSubmitted_ = true;
    exportImage(app, options_.exportView);
    settledFrames_ = 0;
    return Step::Continue;
  }
  if (settledFrames_++ == 0) firstSettledFrame_ = app.ui.frameIndex;
  if (settledFrames_ < std::max(1, options_.frames)) return Step::Continue;

  std::string error;
  if (!saveFramebufferPng(options_.screenshot, width, height, &error)) {
    std::cerr << "foldnorm-gui: error: " << error << "\n";
    return Step::Failed;
  }
  if (!options_.dumpState.empty()) {
    std::ofstream out(options_.dumpState);
    if (!out) {
      std::cerr << "foldnorm-gui: error: cannot write " << options_.dumpState << "\n";
      return Step::Failed;
    }
    out << dumpStateJson(app, firstSettledFrame_) << "\n";
  }
  if (!app.ui.errorMessage.empty()) {
    std::cerr << "foldnorm-gui: error: " << app.ui.errorMessage << "\n";
    return Step::Failed;
  }
  return Step::Done;
}

bool saveFramebufferPng(const std::string& path, int width, int height, std::string* error) {
  std::vector<unsigned char> pixels(static_cast<std::size_t>(width) * height * 4);
  glPixelStorei(GL_PACK_ALIGNMENT, 1);
  glReadBuffer(GL_BACK);
  glReadPixels(0, 0, width, height, GL_RGBA, GL_UNSIGNED_BYTE, pixels.data());
  // OpenGL's first row is the bottom one; PNG's is the top.
  const std::size_t stride = static_cast<std::size_t>(width) * 4;
  for (int y = 0; y < height / 2; ++y) {
    std::swap_ranges(pixels.begin() + y * stride, pixels.begin() + (y + 1) * stride,
                     pixels.begin() + (height - 1 - y) * stride);
  }
  for (std::size_t i = 3; i < pixels.size(); i += 4) pixels[i] = 255;  // opaque, whatever GL left
  if (!stbi_write_png(path.c_str(), width, height, 4, pixels.data(), static_cast<int>(stride))) {
    *error = "cannot write " + path + "; check that its directory exists and is writable";
    return false;
  }
  return true;
}

namespace {

// The benchmark panel: the library's report (format foldnorm-bench/1, as `foldnorm bench --json`
// writes it) and what the panel drew from it.
nlohmann::json benchState(const App& app) {
  const UiState& ui = app.ui;
  const BenchState& b = ui.bench;
  nlohmann::json j;
  j["running"] = benchRunning(app);
  j["error"] = b.error;
  j["settings"] = {{"device", b.devices()[std::clamp(b.device, 0, static_cast<int>(b.devices().size()) - 1)]},
                   {"seq", b.seqText},
                   {"reps", b.reps},
                   {"rmsOp", kRmsOpNames[std::clamp(b.rmsOp, 0, 1)]},
                   {"cudaAvailable", b.cudaAvailable}};
  j["report"] = b.report ? bench::toJson(*b.report) : nlohmann::json(nullptr);
  j["seconds"] = b.seconds;
  j["tableRows"] = ui.record.benchRowsShown;
  j["barsDrawn"] = ui.record.benchBarsDrawn;
  return j;
}

nlohmann::json frameStats(const std::deque<float>& ms, std::size_t last) {
  std::vector<float> v(ms.end() - std::min(last, ms.size()), ms.end());
  nlohmann::json j;
  j["count"] = v.size();
  if (v.empty()) return j;
  std::sort(v.begin(), v.end());
  j["medianMs"] = v[v.size() / 2];
  j["p90Ms"] = v[std::min(v.size() - 1, v.size() * 9 / 10)];
  j["maxMs"] = v.back();
  j["minMs"] = v.front();
  return j;
}

}  // namespace

std::string dumpStateJson(const App& app, uint64_t measuredFromFrame) {
  const UiState& ui = app.ui;
  nlohmann::json j;
  j["schema"] = "foldnorm-gui-state/1";
  j["frame"] = ui.frameIndex;
  j["error"] = ui.errorMessage;
  if (ui.model) {
    const auto& r = ui.model->analysis;
    j["model"] = {{"path", ui.model->imported().path},
                  {"nodes", ui.model->imported().graph.nodeCount()},
                  {"layerNorms", r.layerNorms.size()},
                  {"foldable", r.foldableCount()},
                  {"importSeconds", ui.model->importSeconds},
                  {"analysisSeconds", ui.model->analysisSeconds}};
  }
  j["analysisSettings"] = {{"scaleAbsorb", ui.analysisOptions.scaleAbsorb},
                           {"insertCentering", ui.analysisOptions.insertCentering}};
  nlohmann::json analyses = nlohmann::json::array();
  for (const AnalysisRecord& a : ui.analyses) {
    analyses.push_back({{"scaleAbsorb", a.scaleAbsorb}, {"insertCentering", a.insertCentering},
                        {"layerNorms", a.layerNorms}, {"foldable", a.foldable}, {"seconds", a.seconds}});
  }
  j["analyses"] = analyses;
  if (ui.model && ui.selectedLn >= 0) {
    const LayerNormVerdict& v = ui.model->analysis.layerNorms[ui.selectedLn];
    j["selectedLn"] = {{"modulePath", v.info.modulePath},
                       {"foldable", v.foldable},
                       {"reason", toString(v.reason)},
                       {"verdictText", verdictSentence(v)},
                       {"highlightedNodes", ui.highlight.nodes.size()}};
  } else {
    j["selectedLn"] = nullptr;
  }
  j["selectedNode"] = ui.selectedNode == kNone ? nlohmann::json(nullptr)
                                               : nlohmann::json(ui.selectedNode);
  nlohmann::json panels = nlohmann::json::array();
  for (const auto& p : ui.record.panels) {
    panels.push_back({{"name", p.name}, {"x", p.pos.x}, {"y", p.pos.y}, {"width", p.size.x},
                      {"height", p.size.y}});
  }
  j["panels"] = panels;
  j["inspectorText"] = ui.record.inspectorText;
  j["bench"] = benchState(app);
  j["lnTableRows"] = ui.record.lnRowsShown;
  j["fold"] = {{"summary", ui.fold.summary ? *ui.fold.summary : std::string()},
               {"verified", ui.fold.verified},
               {"equivalent", ui.fold.equivalent},
               {"predictions_unchanged", ui.fold.predictionsUnchanged},
               {"verificationRows", ui.fold.checks.size()},
               {"details", ui.fold.details},
               {"foldedGraphNodes", ui.fold.folded ? ui.fold.folded->imported().graph.nodeCount() : 0},
               {"foldedError", ui.fold.foldedError},
               {"showFolded", ui.showFolded},
               {"inserted", ui.fold.result ? ui.fold.result->report().inserted.size() : 0},
               {"savedPath", ui.fold.savedPath},
               {"marks", ui.scene.foldedMarks}};
  std::size_t boxes = 0, grouped = 0, collapsedBlocks = 0;
  nlohmann::json blocks = nlohmann::json::array();
  for (const CanvasNode& n : ui.scene.nodes) {
    if (n.blocks.empty()) continue;
    ++boxes;
    collapsedBlocks += n.blocks.size();
    if (n.blocks.size() > 1) ++grouped;
    nlohmann::json modules = nlohmann::json::array();
    for (int b : n.blocks) {
      if (ui.fullScene && b < static_cast<int>(ui.fullScene->clusters.size())) {
        modules.push_back(ui.fullScene->clusters[b].modulePath);
      }
    }
    blocks.push_back({{"title", n.title}, {"modules", modules}, {"layerNorms", n.layerNorms},
                      {"foldable", n.foldable}, {"role", render::toString(n.role)}});
  }
  j["canvas"] = {{"sceneNodes", ui.scene.nodes.size()},
                 {"blocks", ui.scene.blockCount},
                 {"blocksExpanded", ui.scene.expanded.size()},
                 {"blocksCollapsed", collapsedBlocks},
                 {"collapsedBoxes", boxes},
                 {"groupBoxes", grouped},
                 {"blockBoxes", blocks},
                 {"blockLabelsDrawn", ui.record.blockLabelsDrawn},
                 {"blockBoxesDrawn", ui.record.blockBoxesDrawn},
                 {"legibleLabelPx", 9},
                 {"relayoutMilliseconds", ui.scene.relayoutMilliseconds},
                 {"sceneEdges", ui.scene.edges.size()},
                 {"nodesDrawn", ui.record.nodesDrawn},
                 {"edgesDrawn", ui.record.edgesDrawn},
                 {"clustersDrawn", ui.record.clustersDrawn},
                 {"labelsDrawn", ui.record.labelsDrawn},
                 {"zoom", ui.camera.zoom},
                 {"layoutMilliseconds", ui.scene.layoutMilliseconds},
                 {"summary", ui.scene.summary}};
  const std::size_t settled = ui.frameIndex >= measuredFromFrame
                                  ? static_cast<std::size_t>(ui.frameIndex - measuredFromFrame + 1)
                                  : 0;
  j["frameTimes"] = {{"settled", frameStats(ui.frameMs, settled)},
                     {"settledUiOnly", frameStats(ui.uiMs, settled)},
                     {"settledUiCpu", frameStats(ui.uiCpuMs, settled)},
                     {"all", frameStats(ui.frameMs, ui.frameMs.size())}};
  return j.dump(2);
}

void recordFrameTime(UiState& ui, float frameMs, float uiMs, float uiCpuMs) {
  constexpr std::size_t kKeep = 4000;
  ui.frameMs.push_back(frameMs);
  ui.uiMs.push_back(uiMs);
  ui.uiCpuMs.push_back(uiCpuMs);
  while (ui.uiCpuMs.size() > kKeep) ui.uiCpuMs.pop_front();
  while (ui.frameMs.size() > kKeep) ui.frameMs.pop_front();
  while (ui.uiMs.size() > kKeep) ui.uiMs.pop_front();
  ++ui.frameIndex;
}

}  // namespace foldnorm::gui
