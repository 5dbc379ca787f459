// Everything a menu item, button or shortcut does. Work that can take longer than a frame is
// submitted to a worker; its completion checks the model generation so that a result for a
// model that was closed in the meantime is dropped.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <ostream>
#include <sstream>

#include "app.h"
#include "bench_support.h"
#include "foldnorm/common/error.h"
#include "foldnorm/fold/model.h"
#include "foldnorm/import/export.h"
#include "foldnorm/import/input_spec.h"
#include "layout_task.h"
#include "foldnorm/render/render.h"
#include "foldnorm/render/scene.h"

namespace foldnorm::gui {
namespace {

double secondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

AnalysisRecord recordOf(const LoadedModel& m) {
  return {m.analysisOptions.scaleAbsorb, m.analysisOptions.insertCentering, m.analysis.layerNorms.size(),
          m.analysis.foldableCount(), m.analysisSeconds};
}

}  // namespace

std::vector<std::string> splitInputSpecs(const std::string& text) {
  std::istringstream in(text);
  std::vector<std::string> specs;
  for (std::string s; in >> s;) specs.push_back(s);
  return specs;
}

void openModel(App& app, const std::string& path, const std::vector<std::string>& inputSpecs) {
  UiState& ui = app.ui;
  const uint64_t generation = ++ui.generation;
  ui.loadingPath = path;
  ui.errorMessage.clear();
  ui.statusMessage.clear();
  // Parse the specs here so a typo is reported at once, not after the model is loaded.
  std::vector<InputSpec> specs;
  try {
    for (const auto& s : inputSpecs) specs.push_back(parseInputSpec(s));
  } catch (const std::exception& e) {
    ui.errorMessage = e.what();
    return;
  }
  const AnalysisOptions analysisOptions = ui.analysisOptions;
  app.modelWorker.submit("open " + path, [=](const Worker::Progress& progress) -> Worker::Completion {
    auto model = std::make_shared<LoadedModel>();
    model->inputSpecs = inputSpecs;
    model->analysisOptions = analysisOptions;
    ImportOptions options;
    options.inputs = specs;
    options.progress = progress;
    auto t0 = std::chrono::steady_clock::now();
    model->import = std::make_shared<const ImportedModel>(importModel(path, options));
    model->importSeconds = secondsSince(t0);
    progress("analysing " + std::to_string(model->imported().graph.nodeCount()) + " nodes");
    t0 = std::chrono::steady_clock::now();
    model->analysis = analyzeFoldability(model->imported().graph, analysisOptions);
    model->analysisSeconds = secondsSince(t0);
    return [model, generation](App& app) {
      UiState& ui = app.ui;
      if (ui.generation != generation) return;
      ui.model = model;
      ui.analyses = {recordOf(*model)};
      ui.loadingPath.clear();
      ui.selectedLn = -1;
      ui.selectedNode = kNone;
      ui.highlight = {};
      ui.fold = {};
      ui.showFolded = false;
      // The benchmark's settings stay; its result was for the previous model.
      ui.bench.report.reset();
      ui.bench.error.clear();
      ui.bench.seconds = 0;
      ui.fold.available = model->analysis.foldableCount() > 0;
      ui.scene = {};
      ui.fullScene.reset();
      ui.camera = {};
      ui.statusMessage = "loaded in " + std::to_string(model->importSeconds).substr(0, 4) +
                         " s, analysed in " +
                         std::to_string(model->analysisSeconds).substr(0, 4) + " s";
      startLayout(app, {}, /*initial=*/true);
    };
  });
}

// A change of the analysis settings: the same import analysed again on the model worker (the
// status bar shows its progress), then everything that came from the old analysis is replaced: the
// LN table and the canvas's verdicts follow, the selection keeps its LN (same graph, same LN order)
// with a new explanation, and a fold or benchmark of the old plan is dropped (the generation moves
// on, so one still running is dropped on arrival too).
void reanalyze(App& app) {
  UiState& ui = app.ui;
  if (!ui.model) return;
  const auto old = ui.model;
  const uint64_t generation = ui.generation;
  const AnalysisOptions options = ui.analysisOptions;
  app.modelWorker.submit("analyse", [=](const Worker::Progress& progress) -> Worker::Completion {
    progress(std::string("analysing with scale absorption ") + (options.scaleAbsorb ? "on" : "off") +
             ", inserted centering " + (options.insertCentering ? "on" : "off"));
    auto model = std::make_shared<LoadedModel>(*old);
    model->analysisOptions = options;
    const auto t0 = std::chrono::steady_clock::now();
    model->analysis = analyzeFoldability(model->imported().graph, options);
    model->analysisSeconds = secondsSince(t0);
    return [model, generation](App& app) {
      UiState& ui = app.ui;
      if (ui.generation != generation) return;
      ++ui.generation;
      ui.model = model;
      ui.analyses.push_back(recordOf(*model));
      ui.fold = {};
      ui.fold.available = model->analysis.foldableCount() > 0;
      const bool showedFolded = ui.showFolded;
      ui.showFolded = false;
      ui.bench.report.reset();
      ui.bench.error.clear();
      ui.bench.seconds = 0;
      const int selected = ui.selectedLn;
      ui.selectedLn = -1;
      ui.highlight = {};
      ui.fullScene.reset();  // its roles and summaries are the old analysis'
      if (showedFolded) {  // the canvas held the folded graph: its blocks are not the original's
        ui.scene = {};
        ui.camera = {};
        startLayout(app, {}, /*initial=*/true);
      } else {
        startLayout(app, ui.scene.expanded);
      }
      if (selected >= 0) selectLayerNorm(app, selected, /*centerView=*/false);
      ui.statusMessage = "analysed again in " + std::to_string(model->analysisSeconds).substr(0, 4) + " s: " +
                         std::to_string(model->analysis.foldableCount()) + " of " +
                         std::to_string(model->analysis.layerNorms.size()) + " LNs fold";
    };
  });
}

void selectNode(App& app, NodeId node) { app.ui.selectedNode = node; }

void selectLayerNorm(App& app, int index, bool centerView) {
  UiState& ui = app.ui;
  if (!ui.model) return;
  const auto& lns = ui.model->analysis.layerNorms;
  if (index < 0 || index >= static_cast<int>(lns.size())) {
    ui.selectedLn = -1;
    ui.highlight = {};
    return;
  }
  if (ui.showFolded) showFoldedGraph(app, false);  // LN indices and node ids are the original's
  ui.selectedLn = index;
  ui.selectedNode = lns[index].info.node;
  ui.highlight = computeHighlight(ui.model->imported().graph, ui.model->analysis, index);
  ui.scrollTableToSelection = true;
  const LayerNormVerdict& v = lns[index];
  if (centerView) {
    ui.camera.centerOn = ui.selectedNode;
    ui.camera.alsoShow = v.breaker != kNone ? v.breaker : v.consumer;
  }
  // Open the LN's own block, and the breaker's or consumer's, so the explanation is visible;
  // the rest of a long path stays collapsed (its blocks are outlined instead).
  expandBlocksOf(app, {v.info.node, v.breaker, v.consumer});
}

bool selectLayerNormByPath(App& app, const std::string& modulePath) {
  if (!app.ui.model) return false;
  const auto& lns = app.ui.model->analysis.layerNorms;
  for (std::size_t i = 0; i < lns.size(); ++i) {
    if (lns[i].info.modulePath == modulePath) {
      selectLayerNorm(app, static_cast<int>(i), true);
      return true;
    }
  }
  return false;
}

void saveReport(App& app, const std::string& path) {
  UiState& ui = app.ui;
  if (!ui.model) return;
  std::ofstream out(path);
  if (!out) {
    ui.errorMessage = "cannot write " + path + "; choose a writable path";
    return;
  }
  out << toJson(ui.model->imported().graph, ui.model->analysis, ui.model->imported().path).dump(2)
      << "\n";
  ui.statusMessage = "report saved to " + path;
}

void exportImage(App& app, const std::string& path) {
  UiState& ui = app.ui;
  if (!ui.model || !ui.scene.shown) return;
  try {
    render::formatFromPath(path);  // a wrong extension is reported now, not after the render
  } catch (const std::exception& e) {
    ui.errorMessage = e.what();
    return;
  }
  // The picture is the view as laid out now (the same blocks open), rendered by Graphviz like
  // `foldnorm render` does, on the layout worker (Graphviz is not re-entrant).
  std::string caption;
  static const Highlight kNoHighlight;  // the folded graph's node ids are its own
  const Highlight& highlight = ui.showFolded ? kNoHighlight : ui.highlight;
  if (ui.selectedLn >= 0 && !ui.showFolded) {
    const LayerNormVerdict& v = ui.model->analysis.layerNorms[ui.selectedLn];
    caption = "selected " + v.info.modulePath + ": " + verdictSentence(v);
  }
  auto scene = std::make_shared<render::Scene>(sceneForExport(ui.scene, highlight, caption));
  const std::string modelPath = ui.model->imported().path;
  const uint64_t generation = ui.generation;
  app.layoutWorker.submit("export " + path, [=](const Worker::Progress& progress) -> Worker::Completion {
    progress("Graphviz rendering " + std::to_string(scene->nodes.size()) + " nodes");
    render::WriteOptions options;
    options.protectedPaths = {modelPath};
    const std::size_t bytes = render::renderToFile(*scene, path, options);
    return [=](App& app) {
      if (app.ui.generation == generation) {
        app.ui.statusMessage = "exported " + path + " (" + std::to_string(bytes / 1024) + " KiB)";
      }
    };
  });
}

void probeCuda(App& app) {
  app.modelWorker.submit("probe CUDA", [](const Worker::Progress&) -> Worker::Completion {
    const bool available = bench::cudaAvailable();
    return [available](App& app) {
      app.ui.bench.cudaProbed = true;
      app.ui.bench.cudaAvailable = available;
      if (!available && app.ui.bench.device != 0) app.ui.bench.device = 0;
    };
  });
}

bool benchRunning(const App& app) { return app.ui.bench.inFlight > 0; }

// `foldnorm bench` from the GUI, on the model it holds (no re-import): the fold is made and
// verified for the bench, then both models are timed per sequence length; the progress lines go
// to the status bar. Process-wide settings (allocator, threads) stay the GUI's. The completion is
// dropped (all but the in-flight count) if another model was opened.
void startBench(App& app) {
  UiState& ui = app.ui;
  if (!ui.model) return;
  BenchState& b = ui.bench;
  bench::BenchModelOptions options;
  try {
    options.seqs = parseSequenceLengths(b.seqText);
  } catch (const std::exception& e) {
    b.error = ui.errorMessage = std::string("benchmark: ") + e.what();
    return;
  }
  if (b.reps < 2) {
    b.error = ui.errorMessage = "benchmark: reps must be at least 2 (a median and a spread)";
    return;
  }
  const auto devices = b.devices();
  options.device = devices[std::clamp(b.device, 0, static_cast<int>(devices.size()) - 1)];
  static const char* kDtypes[] = {"float32", "bfloat16", "float16"};
  options.dtype = kDtypes[std::clamp(b.dtype, 0, 2)];
  options.reps = b.reps;
  options.rmsOp = kRmsOpNames[std::clamp(b.rmsOp, 0, 1)];
  const auto model = ui.model;
  const uint64_t generation = ui.generation;
  b.error.clear();
  ++b.inFlight;
  app.modelWorker.submit("benchmark", [=](const Worker::Progress& progress) -> Worker::Completion {
    const auto t0 = std::chrono::steady_clock::now();
    std::shared_ptr<const bench::ModelBenchReport> report;
    std::string error;
    {
      LineCallbackBuf lines([&](const std::string& line) {
        const std::string prefix = "[bench] ";
        progress(line.rfind(prefix, 0) == 0 ? line.substr(prefix.size()) : line);
      });
      std::ostream out(&lines);
      try {
        // Either kind of model (a .pt2 runs on the interpreter), under the analysis shown.
        report = std::make_shared<const bench::ModelBenchReport>(
            bench::benchModel(model->imported(), model->analysis, options, out));
      } catch (const std::exception& e) {
        error = errorCause(e.what());  // the failing op and its cause, not the interpreter's first line
      }
    }
    const double seconds = secondsSince(t0);
    return [=](App& app) {
      BenchState& b = app.ui.bench;
      --b.inFlight;
      if (app.ui.generation != generation) return;
      if (!error.empty()) {
        b.error = error;
        app.ui.errorMessage = "benchmark: " + error;
        return;
      }
      b.report = report;
      b.seconds = seconds;
      app.ui.statusMessage = "benchmark done in " + std::to_string(seconds).substr(0, 5) + " s";
    };
  });
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

// Fold and verify on the model worker, under the analysis shown (its settings included), by the
// model's handle: whatever its format, what `foldnorm fold` writes by default (a .pt2 the
// portable aten::rms_norm form), verified in float32 and float64.
void startFold(App& app) {
  UiState& ui = app.ui;
  if (!ui.model) return;
  auto loadedModel = ui.model;
  const uint64_t generation = ui.generation;
  app.modelWorker.submit("fold", [=](const Worker::Progress& progress) -> Worker::Completion {
    const Model model(loadedModel->import);
    FoldOptions options;
    options.progress = progress;
    auto fold = std::make_shared<const ModelFold>(model.fold(loadedModel->analysis, options));
    const FoldReport& r = fold->report();
    FoldState state;
    state.available = true;
    state.result = fold;
    state.verified = r.verification.ran;
    // As `foldnorm fold` decides: float64 equivalent and every float32 flip explained by rounding.
    state.equivalent = r.verification.passed();
    state.predictionsUnchanged = r.verification.predictionsUnchanged;
    state.summary = "folded " + std::to_string(r.folded.size()) + " LNs, kept " + std::to_string(r.kept.size()) +
                    "; centered " + std::to_string(r.centered.size()) + " parameters" +
                    (r.untied.empty() ? std::string()
                                      : ", untied " + std::to_string(r.untied.size()) + " (" +
                                            std::to_string(r.untieBytes / 1024) + " KiB)") +
                    (r.inserted.empty() ? std::string() : ", inserted " + std::to_string(r.inserted.size()) +
                                                              " centering(s)");
    const Verification& v = r.verification;
    if (v.ran) {
      // The verdict lines `foldnorm fold` prints, for either format.
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
                            std::to_string(generation) + model.foldedExtension());
      try {
        progress("importing the folded model for the canvas");
        model.save(*fold, tmp.string());
        auto loaded = std::make_shared<LoadedModel>();
        loaded->import = model.reopen(tmp.string()).shared();
        loaded->inputSpecs = loadedModel->inputSpecs;
        state.marks = render::foldedMarksFor(model.graph(), loadedModel->analysis, loaded->imported().graph);
        state.folded = loaded;
      } catch (const std::exception& e) {
        state.foldedError = errorCause(e.what());
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
  const auto loadedModel = ui.model;
  const auto fold = ui.fold.result;
  const uint64_t generation = ui.generation;
  app.modelWorker.submit("save folded model", [=](const Worker::Progress& progress) -> Worker::Completion {
    progress("writing " + path);
    const Model model(loadedModel->import);
    model.checkOutput(path);
    model.save(*fold, path);
    return [path, generation](App& app) {
      if (app.ui.generation != generation) return;
      app.ui.statusMessage = "folded model saved to " + path;
      app.ui.fold.savedPath = path;
    };
  });
}

}  // namespace foldnorm::gui
