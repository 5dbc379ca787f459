// Headless runs for tests and docs: wait until the model is loaded, analysed and laid out, render
// a few more frames so every window has settled, then save the framebuffer as PNG and what the
// frame showed as JSON, and exit.
#pragma once

#include <chrono>
#include <string>

namespace CLI {
class App;
}

namespace foldnorm::gui {

struct App;
struct UiState;

struct HeadlessOptions {
  std::string screenshot;
  std::string select;
  std::string dumpState;
  std::string exportView;          // --export-view: the canvas as the renderer draws it (.svg, .png)
  int frames = 5;
  double timeoutSeconds = 600;
  // --bench: run the benchmark once the model is laid out, and wait for its result.
  bool bench = false;
  std::string benchSeq;            // as the panel's field: "16" or "64,128"
  int benchReps = 5;
  std::string benchDevice = "cpu";
  std::string benchRmsOp = "foldnorm";  // --bench-rms-op: as the panel's combo (kRmsOpNames, fold.h)
  // --fold: Fold and verify once laid out; --show-folded: then show the folded graph.
  bool fold = false;
  bool showFolded = false;
  std::string saveFolded;          // --save-folded: then save the fold there (waits for the write)
  // Analysis settings: at start (--no-*), and flipped once laid out (--toggle-*: one new analysis).
  bool noScaleAbsorb = false;
  bool noInsertCentering = false;
  bool toggleScaleAbsorb = false;
  bool toggleInsertCentering = false;
  std::size_t analysesExpected() const { return toggleScaleAbsorb || toggleInsertCentering ? 2 : 1; }
  bool enabled() const { return !screenshot.empty(); }
};

class HeadlessRun {
 public:
  enum class Step { Continue, Done, Failed };
  explicit HeadlessRun(HeadlessOptions options);
  /// Call after the frame is rendered, before the buffers are swapped (reads the back buffer).
  Step afterFrame(App& app, int framebufferWidth, int framebufferHeight);

 private:
  bool ready(const App& app) const;
  HeadlessOptions options_;
  int settledFrames_ = 0;
  std::chrono::steady_clock::time_point start_;
  uint64_t firstSettledFrame_ = 0;
  bool exportSubmitted_ = false;
};

/// What a headless run does besides watching (--select, --toggle-*, --bench, --fold,
/// --show-folded, --save-folded): each step once its preconditions hold, as the user's click
/// would (headless_script.cpp).
class HeadlessScript {
 public:
  HeadlessScript(const HeadlessOptions& options, bool haveModel);
  /// Before the model opens: the analysis settings (--no-*) and the Benchmark panel's fields.
  void start(App& app) const;
  /// Once per frame, after the workers' results are in and before the frame is drawn.
  void beforeFrame(App& app);

 private:
  const HeadlessOptions& options_;
  std::string pendingSelect_;
  bool pendingToggle_, pendingBench_, pendingFold_, pendingShowFolded_, pendingSave_;
};

/// The command line's headless options (declared in headless_script.cpp with their help), and
/// the check of their combinations: "" when fine, else the error line.
void addHeadlessOptions(CLI::App& cli, HeadlessOptions& options);
std::string checkHeadlessOptions(const HeadlessOptions& options, bool haveModel);

/// Rows of RGBA pixels read from the current framebuffer (top row first) written as PNG.
bool saveFramebufferPng(const std::string& path, int width, int height, std::string* error);

/// The JSON --dump-state writes (schema "foldnorm-gui-state/1", docs/gui.md).
std::string dumpStateJson(const App& app, uint64_t measuredFromFrame);

/// Keeps the last frame times for the metrics window and the dump.
void recordFrameTime(UiState& ui, float frameMs, float uiMs, float uiCpuMs);

/// The whole frame: menu, windows at their tiles, dialogs, shortcuts (frame.cpp).
void DrawFrame(App& app);

}  // namespace foldnorm::gui
