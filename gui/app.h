// The GUI's state and the context every window draws from.
//
// UiState is a plain struct: what is loaded, what is selected, how each window is set. Every
// window is one Draw*() function in its own view_*.cpp that reads and changes it; nothing in it
// is touched off the UI thread. Heavy work goes to a Worker and comes back as a completion.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <imgui.h>

#include "foldnorm/analysis/analysis.h"
#include "foldnorm/bench/bench_model.h"
#include "foldnorm/fold/fold.h"
#include "foldnorm/fold/model.h"
#include "foldnorm/render/folded_view.h"
#include "foldnorm/import/torchscript.h"
#include "highlight.h"
#include "scene.h"
#include "worker.h"

namespace foldnorm::gui {

/// A model after import and analysis; immutable once built, shared with worker tasks. A change of
/// the analysis settings makes a new one (same import, new analysis).
struct LoadedModel {
  std::shared_ptr<const ImportedModel> import;  // one import, shared by every analysis of the file
  const ImportedModel& imported() const { return *import; }
  AnalysisResult analysis;
  AnalysisOptions analysisOptions;      // what `analysis` was made with
  std::vector<std::string> inputSpecs;  // as typed (empty: the model's embedded spec)
  double importSeconds = 0;
  double analysisSeconds = 0;
};

/// What one frame showed, for --dump-state and the tests: filled by the Draw*() functions.
struct FrameRecord {
  struct Panel {
    std::string name;
    ImVec2 pos, size;
  };
  std::vector<Panel> panels;
  std::vector<std::string> inspectorText;  // every line the inspector drew
  std::size_t nodesDrawn = 0, edgesDrawn = 0, clustersDrawn = 0;
  std::size_t labelsDrawn = 0;       // box labels drawn at a legible size (>= 9 px)
  std::size_t blockLabelsDrawn = 0;  // of them, collapsed blocks' summaries
  std::size_t blockBoxesDrawn = 0;   // collapsed blocks' boxes on screen
  std::size_t lnRowsShown = 0;
  std::size_t benchRowsShown = 0, benchBarsDrawn = 0;  // the benchmark panel's table and chart
};

struct OpenDialogState {
  bool visible = false;
  bool focusPath = false;
  std::string path;
  std::string inputs;  // space-separated input specs, empty = the model's own
  std::string listedDirectory;
  std::vector<std::string> entries;  // names in listedDirectory, directories end in '/'
  std::string listError;
};

struct PathPrompt {  // "save report as", "export image as"
  bool visible = false;
  bool focus = false;
  std::string path;
};

struct FoldState {
  bool available = false;  // the model has something to fold
  std::shared_ptr<const ModelFold> result;  // the fold itself (TorchScript or .pt2), for saving
  std::string savedPath;                    // where Save folded model last wrote it
  std::optional<std::string> summary;       // one line
  std::vector<std::string> details;         // the verification's summary lines
  std::vector<OutputCheck> checks;          // the verification table: one row per output and dtype
  bool verified = false;
  bool equivalent = false;            // Verification::passed()
  bool predictionsUnchanged = false;  // no float32 argmax flip at all
  // The folded model's own graph (the folded file re-imported; no analysis of its own), what the
  // fold did to it (render/folded_view.h), and its dataflow scene once the canvas built it.
  std::shared_ptr<const LoadedModel> folded;
  render::FoldedMarks marks;
  std::string foldedError;                  // why the folded graph cannot be shown
  std::shared_ptr<const render::Scene> fullScene;
};

/// The benchmark panel: its settings (kept across models) and the last result for this model.
struct BenchState {
  // settings
  int device = 0;                // index into devices()
  int dtype = 0;                 // 0 float32, 1 bfloat16, 2 float16
  std::string seqText = "64,128";
  int reps = 10;
  int rmsOp = 0;                 // index into kRmsOpNames (fold.h), RmsOp's order: what the folded LNs become
  bool cudaProbed = false;       // the model worker asked LibTorch once, at start
  bool cudaAvailable = false;
  std::vector<std::string> devices() const {
    return cudaAvailable ? std::vector<std::string>{"cpu", "cuda"} : std::vector<std::string>{"cpu"};
  }
  // result (reset when another model is opened)
  std::shared_ptr<const bench::ModelBenchReport> report;
  double seconds = 0;            // wall time of the whole run (fold, verify, timing)
  std::string error;             // the last run's failure, one line
  int inFlight = 0;              // runs submitted and not yet completed (any model)
};

/// One analysis of the open model (the first at open, one more per change of the settings), for
/// the dump and the tests.
struct AnalysisRecord {
  bool scaleAbsorb = true;
  bool insertCentering = true;
  std::size_t layerNorms = 0;
  std::size_t foldable = 0;
  double seconds = 0;
};

struct UiState {
  // ---- analysis settings (the LayerNorms window's checkboxes; kept across models) ----
  AnalysisOptions analysisOptions;  // scaleAbsorb, insertCentering: both on, as the CLI's defaults
  std::vector<AnalysisRecord> analyses;  // of the open model, oldest first

  // ---- model ----
  std::shared_ptr<const LoadedModel> model;
  uint64_t generation = 0;  // bumped on every open; stale completions compare it
  std::string loadingPath;
  std::string errorMessage;  // last error, one line; shown until the next action
  std::string statusMessage;

  // ---- selection ----
  int selectedLn = -1;            // index into analysis.layerNorms
  NodeId selectedNode = kNone;    // the inspector's node
  Highlight highlight;

  // ---- windows ----
  bool showLnTable = true;
  bool showInspector = true;
  bool showMinimap = true;
  bool showMetrics = false;
  bool showActions = true;
  bool showBench = true;
  OpenDialogState open;
  PathPrompt saveReport;
  PathPrompt exportImage;
  PathPrompt saveFolded;

  // ---- LN table ----
  std::string lnSearch;
  int lnVerdictFilter = 0;  // 0 all, 1 foldable, 2 not foldable
  bool scrollTableToSelection = false;
  bool lnSearchFocus = false;

  // ---- canvas ----
  CanvasScene scene;
  std::shared_ptr<const render::Scene> fullScene;  // every block expanded; built once per model
  uint64_t layoutSerial = 0;  // newest layout request; older answers are dropped
  CanvasCamera camera;
  bool groupRepeats = true;  // runs of identical blocks as one box ("x12")
  bool showFolded = false;   // the canvas shows the folded model (after Fold), not the original

  // ---- actions ----
  FoldState fold;
  BenchState bench;

  // ---- measurements ----
  std::deque<float> frameMs;     // whole frame (UI build + GL render), most recent last
  std::deque<float> uiMs;        // building the ImGui frame only
  std::deque<float> uiCpuMs;     // the same, in CPU time of the UI thread (load-independent)
  FrameRecord record;            // the last frame's
  uint64_t frameIndex = 0;
};

/// The context handed to every Draw*(): the state and the workers.
struct App {
  UiState ui;
  Worker modelWorker;   // import, analysis, fold, benchmark
  Worker layoutWorker;  // Graphviz layouts, so a long layout never delays a load
  App(std::function<void()> wake) : modelWorker("model", wake), layoutWorker("layout", wake) {}
};

// ---- actions (actions.cpp): everything a menu item, button or shortcut does ----
void openModel(App& app, const std::string& path, const std::vector<std::string>& inputSpecs);
void selectLayerNorm(App& app, int index, bool centerView);
void selectNode(App& app, NodeId node);
bool selectLayerNormByPath(App& app, const std::string& modulePath);
void saveReport(App& app, const std::string& path);
void exportImage(App& app, const std::string& path);
void reanalyze(App& app);            // analyses the open model again with ui.analysisOptions (worker)
void startFold(App& app);
void saveFoldedModel(App& app, const std::string& path);  // the last fold, atomically (worker)
void showFoldedGraph(App& app, bool folded);  // switches the canvas between original and folded
void startBench(App& app);
bool benchRunning(const App& app);  // a benchmark is running or queued on the model worker
void probeCuda(App& app);           // asks LibTorch (on the model worker) whether CUDA is usable
void handleShortcuts(App& app);
std::vector<std::string> splitInputSpecs(const std::string& text);

// ---- windows (one view_*.cpp each) ----
void DrawMainMenu(App& app);
void DrawCanvas(App& app);
void DrawLnTable(App& app);
void DrawInspector(App& app);
void DrawOpenDialog(App& app);
void DrawPathPrompts(App& app);
void DrawStatusBar(App& app);
void DrawFold(App& app);
void DrawBench(App& app);
void DrawMetrics(App& app);

/// Where the fixed windows go this frame (tiles of the main viewport below the menu bar).
struct WindowLayout {
  ImVec2 tablePos, tableSize, actionsPos, actionsSize, benchPos, benchSize, canvasPos, canvasSize, inspectorPos, inspectorSize, statusPos,
      statusSize;
};
WindowLayout computeWindowLayout(const UiState& ui, ImVec2 display, float menuHeight);
void recordPanel(UiState& ui, const char* name);  // call inside Begin/End
/// A tiled window's prologue: ImGui::Begin(title, open), recordPanel, and, while no model is
/// loaded, `emptyText` in grey. false: the window is already ended (collapsed, or nothing to show),
/// draw nothing; true: draw, then ImGui::End().
bool beginModelWindow(UiState& ui, const char* title, bool* open, const char* emptyText = "No model loaded.");

}  // namespace foldnorm::gui
