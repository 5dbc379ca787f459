// The headless run's script (headless.h): the command line's headless options, and the steps they
// ask for, each taken once the model is ready for it, as the matching click would.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <iterator>

#include "app.h"
#include "foldnorm/render/render.h"
#include "headless.h"

namespace foldnorm::gui {

void addHeadlessOptions(CLI::App& cli, HeadlessOptions& headless) {
  cli.add_option("--screenshot", headless.screenshot, "Render, save the window as PNG and exit (needs MODEL)");
  cli.add_option("--select", headless.select, "Select this LayerNorm (module path) at start");
  cli.add_option("--frames", headless.frames, "With --screenshot: frames to render once the model is laid out")
      ->capture_default_str();
  cli.add_option("--dump-state", headless.dumpState, "With --screenshot: write what the last frame showed as JSON");
  cli.add_option("--export-view", headless.exportView,
                 "With --screenshot: also write the canvas as shown (collapsed blocks, selection) "
                 "through the renderer, .svg or .png");
  cli.add_option("--timeout", headless.timeoutSeconds, "With --screenshot: give up after this many seconds")
      ->capture_default_str();
  cli.add_flag("--bench", headless.bench,
               "Benchmark original vs folded once the model is laid out (with --screenshot: "
               "before the screenshot, its result in --dump-state)");
  cli.add_option("--bench-seq", headless.benchSeq,
                 "With --bench: sequence lengths, comma-separated (default: the model's own)");
  cli.add_option("--bench-reps", headless.benchReps, "With --bench: timed rounds per length")->capture_default_str();
  cli.add_option("--bench-device", headless.benchDevice, "With --bench: cpu or cuda")->capture_default_str();
  cli.add_option("--bench-rms-op", headless.benchRmsOp,
                 "With --bench: what the folded LNs become, foldnorm (our op) or aten (aten::rms_norm + bias add)")
      ->check(CLI::IsMember(std::vector<std::string>(std::begin(kRmsOpNames), std::end(kRmsOpNames))))
      ->capture_default_str();
  cli.add_flag("--fold", headless.fold, "Fold and verify once the model is laid out");
  cli.add_flag("--show-folded", headless.showFolded, "With --fold: then show the folded graph on the canvas");
  cli.add_option("--save-folded", headless.saveFolded,
                 "With --fold: then save the folded model here, as the Fold panel's Save button does");
  // The analysis settings (the LayerNorms window's checkboxes): off at start, or flipped once the
  // model is laid out as a click would (one new analysis).
  const struct {
    const char* name;
    bool* off;
    bool* toggle;
    const char* setting;
  } settings[] = {
      {"scale-absorb", &headless.noScaleAbsorb, &headless.toggleScaleAbsorb, "absorb per-channel scales"},
      {"insert-centering", &headless.noInsertCentering, &headless.toggleInsertCentering,
       "insert one centering where it frees a stream"},
  };
  for (const auto& s : settings) {
    cli.add_flag(std::string("--no-") + s.name, *s.off, std::string("Start with '") + s.setting + "' off");
    cli.add_flag(std::string("--toggle-") + s.name, *s.toggle,
                 std::string("Once laid out, flip '") + s.setting + "' as its checkbox does");
  }
}

std::string checkHeadlessOptions(const HeadlessOptions& headless, bool haveModel) {
  if (!headless.screenshot.empty() && !haveModel) return "--screenshot needs a MODEL.pt or MODEL.pt2 to show";
  if (!headless.saveFolded.empty() && !headless.fold && !headless.showFolded)
    return "--save-folded needs --fold (it saves that fold)";
  if (headless.exportView.empty()) return "";
  if (headless.screenshot.empty()) return "--export-view needs --screenshot (it is written headless)";
  try {
    render::formatFromPath(headless.exportView);
  } catch (const std::exception& e) {
    return std::string("--export-view: ") + e.what();
  }
  return "";
}

HeadlessScript::HeadlessScript(const HeadlessOptions& options, bool haveModel)
    : options_(options),
      pendingSelect_(options.select),
      pendingToggle_(options.toggleScaleAbsorb || options.toggleInsertCentering),
      pendingBench_(options.bench && haveModel),
      pendingFold_((options.fold || options.showFolded) && haveModel),
      pendingShowFolded_(options.showFolded),
      pendingSave_(!options.saveFolded.empty()) {}

void HeadlessScript::start(App& app) const {
  if (options_.bench) {
    app.ui.bench.seqText = options_.benchSeq;
    app.ui.bench.reps = options_.benchReps;
    app.ui.bench.rmsOp = static_cast<int>(parseRmsOp(options_.benchRmsOp));
  }
  app.ui.analysisOptions.scaleAbsorb = !options_.noScaleAbsorb;
  app.ui.analysisOptions.insertCentering = !options_.noInsertCentering;
}

void HeadlessScript::beforeFrame(App& app) {
  if (!pendingSelect_.empty() && app.ui.model) {
    if (!selectLayerNormByPath(app, pendingSelect_))
      app.ui.errorMessage = "--select " + pendingSelect_ + ": no LayerNorm with that module path";
    pendingSelect_.clear();
  }
  const bool laidOut = app.ui.model && pendingSelect_.empty() && app.layoutWorker.idle() && !app.ui.scene.empty();
  // --toggle-*: first, once laid out, as the checkboxes would; the fold and the benchmark below
  // wait for the new analysis (they use it).
  if (pendingToggle_ && laidOut && app.modelWorker.idle()) {
    pendingToggle_ = false;
    if (options_.toggleScaleAbsorb) app.ui.analysisOptions.scaleAbsorb = !app.ui.analysisOptions.scaleAbsorb;
    if (options_.toggleInsertCentering) app.ui.analysisOptions.insertCentering = !app.ui.analysisOptions.insertCentering;
    reanalyze(app);
  }
  const bool analysed = !pendingToggle_ && app.modelWorker.idle();
  // --bench: once the model is laid out (Graphviz no longer competes for the CPU) and the CUDA
  // probe has answered.
  if (pendingBench_ && laidOut && analysed && app.ui.bench.cudaProbed) {
    pendingBench_ = false;
    const auto devices = app.ui.bench.devices();
    const auto it = std::find(devices.begin(), devices.end(), options_.benchDevice);
    if (it == devices.end()) {
      app.ui.errorMessage = "--bench-device " + options_.benchDevice +
                            (options_.benchDevice == "cuda" ? ": LibTorch sees no CUDA device here"
                                                            : ": not a device (use cpu or cuda)");
    } else {
      app.ui.bench.device = static_cast<int>(it - devices.begin());
      startBench(app);
    }
  }
  // --fold / --show-folded: once laid out, as the Fold panel's button and toggle would.
  if (pendingFold_ && laidOut && analysed) {
    pendingFold_ = false;
    if (app.ui.model->analysis.foldableCount() == 0) app.ui.errorMessage = "--fold: no LayerNorm folds";
    else startFold(app);
  }
  if (pendingShowFolded_ && app.ui.fold.folded) {
    pendingShowFolded_ = false;
    showFoldedGraph(app, true);
  }
  if (pendingSave_ && !pendingFold_ && app.ui.fold.summary && app.modelWorker.idle()) {
    pendingSave_ = false;
    saveFoldedModel(app, options_.saveFolded);
  }
}

}  // namespace foldnorm::gui
