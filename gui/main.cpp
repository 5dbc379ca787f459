// foldnorm-gui [MODEL.pt|MODEL.pt2] [--input SPEC]... [--screenshot OUT.png [--select LN] [--frames N]
//              [--dump-state STATE.json] [--export-view VIEW.svg|png]] [--bench [--bench-seq 64,128] [--bench-reps N]
//              [--bench-device cpu|cuda]] [--fold [--show-folded] [--save-folded OUT]]
//              [--no-scale-absorb] [--no-insert-centering] [--toggle-scale-absorb] [--toggle-insert-centering]
// Only the platform here: command line, GLFW window, OpenGL context, Dear ImGui backends and the
// frame loop. What a frame shows is frame.cpp; the windows are view_*.cpp.
#include <GLFW/glfw3.h>
#include <imgui.h>
#include <imgui_impl_glfw.h>
#include <imgui_impl_opengl3.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cfloat>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <iostream>

#include "app.h"
#include "foldnorm/render/render.h"
#include "headless.h"

namespace {

void glfwErrorCallback(int code, const char* description) {
  std::fprintf(stderr, "foldnorm-gui: GLFW error %d: %s\n", code, description);
}

// A proportional font reads better than ImGui's bitmap default in screenshots; the default
// stays when DejaVu (Debian's fonts-dejavu-core) is not installed.
void loadFont(ImGuiIO& io) {
  const char* kFont = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf";
  if (std::filesystem::exists(kFont)) io.Fonts->AddFontFromFileTTF(kFont, 15.0f);
}

// CPU time of this thread: what building a frame costs, without the time other processes on a
// loaded machine took the core away (wall-clock frame times include that).
double threadCpuMs() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace foldnorm::gui;
  CLI::App cli{"foldnorm-gui: inspect which LayerNorms of a traced model fold into RMSNorm, and why"};
  std::string modelPath;
  std::vector<std::string> inputSpecs;
  HeadlessOptions headless;
  int width = 1600, height = 1000;
  cli.add_option("model", modelPath, "TorchScript file (.pt) or torch.export archive (.pt2) to open");
  cli.add_option("--input,-i", inputSpecs,
                 "Example input SHAPE:DTYPE[lo,hi), repeatable (default: the model's own spec)")
      ->take_all();
  cli.add_option("--screenshot", headless.screenshot,
                 "Render, save the window as PNG and exit (needs MODEL)");
  cli.add_option("--select", headless.select, "Select this LayerNorm (module path) at start");
  cli.add_option("--frames", headless.frames,
                 "With --screenshot: frames to render once the model is laid out")
      ->capture_default_str();
  cli.add_option("--dump-state", headless.dumpState,
                 "With --screenshot: write what the last frame showed as JSON");
  cli.add_option("--export-view", headless.exportView,
                 "With --screenshot: also write the canvas as shown (collapsed blocks, selection) "
                 "through the renderer, .svg or .png");
  cli.add_option("--timeout", headless.timeoutSeconds,
                 "With --screenshot: give up after this many seconds")
      ->capture_default_str();
  cli.add_flag("--bench", headless.bench,
               "Benchmark original vs folded once the model is laid out (with --screenshot: "
               "before the screenshot, its result in --dump-state)");
  cli.add_option("--bench-seq", headless.benchSeq,
                 "With --bench: sequence lengths, comma-separated (default: the model's own)");
  cli.add_option("--bench-reps", headless.benchReps, "With --bench: timed rounds per length")
      ->capture_default_str();
  cli.add_option("--bench-device", headless.benchDevice, "With --bench: cpu or cuda")
      ->capture_default_str();
  cli.add_option("--bench-rms-op", headless.benchRmsOp,
                 "With --bench: what the folded LNs become, foldnorm (our op) or aten (aten::rms_norm + bias add)")
      ->check(CLI::IsMember(std::vector<std::string>(std::begin(kRmsOpNames), std::end(kRmsOpNames))))
      ->capture_default_str();
  cli.add_flag("--fold", headless.fold, "Fold and verify once the model is laid out");
  cli.add_flag("--show-folded", headless.showFolded,
               "With --fold: then show the folded graph on the canvas");
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
  cli.add_option("--width", width, "Window width")->capture_default_str();
  cli.add_option("--height", height, "Window height")->capture_default_str();
  CLI11_PARSE(cli, argc, argv);
  if (!headless.screenshot.empty() && modelPath.empty()) {
    std::cerr << "foldnorm-gui: error: --screenshot needs a MODEL.pt or MODEL.pt2 to show\n";
    return 2;
  }
  if (!headless.saveFolded.empty() && !headless.fold && !headless.showFolded) {
    std::cerr << "foldnorm-gui: error: --save-folded needs --fold (it saves that fold)\n";
    return 2;
  }

  if (!headless.exportView.empty()) {
    if (headless.screenshot.empty()) {
      std::cerr << "foldnorm-gui: error: --export-view needs --screenshot (it is written headless)\n";
      return 2;
    }
    try {
      foldnorm::render::formatFromPath(headless.exportView);
    } catch (const std::exception& e) {
      std::cerr << "foldnorm-gui: error: --export-view: " << e.what() << "\n";
      return 2;
    }
  }

  glfwSetErrorCallback(glfwErrorCallback);
  if (!glfwInit()) {
    std::cerr << "foldnorm-gui: error: cannot initialise GLFW (no display? run under xvfb-run -a)\n";
    return 2;
  }
  glfwWindowHint(GLFW_CONTEXT_VERSION_MAJOR, 3);
  glfwWindowHint(GLFW_CONTEXT_VERSION_MINOR, 3);
  glfwWindowHint(GLFW_OPENGL_PROFILE, GLFW_OPENGL_CORE_PROFILE);
  GLFWwindow* window = glfwCreateWindow(width, height, "foldnorm", nullptr, nullptr);
  if (!window) {
    std::cerr << "foldnorm-gui: error: cannot create an OpenGL 3.3 window\n";
    glfwTerminate();
    return 2;
  }
  glfwMakeContextCurrent(window);
  // Headless runs measure frame cost, not the display's refresh.
  glfwSwapInterval(headless.enabled() ? 0 : 1);

  IMGUI_CHECKVERSION();
  ImGui::CreateContext();
  ImGuiIO& io = ImGui::GetIO();
  io.IniFilename = nullptr;  // window placement is computed per frame, nothing to remember
  loadFont(io);
  ImGui::StyleColorsDark();
  ImGui::GetStyle().WindowRounding = 0.0f;
  ImGui_ImplGlfw_InitForOpenGL(window, true);
  ImGui_ImplOpenGL3_Init("#version 330");

  int rc = 0;
  {
    App app([] { glfwPostEmptyEvent(); });
    probeCuda(app);  // first on the model worker: the Benchmark panel offers cuda only if usable
    if (headless.bench) {
      app.ui.bench.seqText = headless.benchSeq;
      app.ui.bench.reps = headless.benchReps;
      app.ui.bench.rmsOp = static_cast<int>(parseRmsOp(headless.benchRmsOp));
    }
    bool pendingBench = headless.bench && !modelPath.empty();
    bool pendingFold = (headless.fold || headless.showFolded) && !modelPath.empty();
    bool pendingShowFolded = headless.showFolded;
    bool pendingToggle = headless.toggleScaleAbsorb || headless.toggleInsertCentering;
    bool pendingSave = !headless.saveFolded.empty();
    app.ui.analysisOptions.scaleAbsorb = !headless.noScaleAbsorb;
    app.ui.analysisOptions.insertCentering = !headless.noInsertCentering;
    if (!modelPath.empty()) openModel(app, modelPath, inputSpecs);
    else app.ui.open.visible = app.ui.open.focusPath = true;
    HeadlessRun run(headless);
    std::string pendingSelect = headless.select;

    while (!glfwWindowShouldClose(window)) {
      const bool busy = !app.modelWorker.idle() || !app.layoutWorker.idle();
      // Idle: sleep until input (or a worker's wake-up); busy: keep the progress moving. While a
      // benchmark times the models, redraw 4 times a second only, so the window (Mesa renders in
      // software) takes as little CPU from the timed forwards as it can.
      if (benchRunning(app)) glfwWaitEventsTimeout(0.25);
      else if (headless.enabled() || busy) glfwPollEvents();
      else glfwWaitEventsTimeout(0.5);
      const auto frameStart = std::chrono::steady_clock::now();
      const double cpuStart = threadCpuMs();
      app.modelWorker.drain(app);
      app.layoutWorker.drain(app);
      if (!pendingSelect.empty() && app.ui.model) {
        if (!selectLayerNormByPath(app, pendingSelect)) {
          app.ui.errorMessage = "--select " + pendingSelect + ": no LayerNorm with that module path";
        }
        pendingSelect.clear();
      }
      const bool laidOut = app.ui.model && pendingSelect.empty() && app.layoutWorker.idle() && !app.ui.scene.empty();
      // --toggle-*: first, once laid out, as the checkboxes would; the fold and the benchmark
      // below wait for the new analysis (they use it).
      if (pendingToggle && laidOut && app.modelWorker.idle()) {
        pendingToggle = false;
        if (headless.toggleScaleAbsorb) app.ui.analysisOptions.scaleAbsorb = !app.ui.analysisOptions.scaleAbsorb;
        if (headless.toggleInsertCentering)
          app.ui.analysisOptions.insertCentering = !app.ui.analysisOptions.insertCentering;
        reanalyze(app);
      }
      const bool analysed = !pendingToggle && app.modelWorker.idle();
      // --bench: once the model is laid out (Graphviz no longer competes for the CPU) and the
      // CUDA probe has answered.
      if (pendingBench && laidOut && analysed && app.ui.bench.cudaProbed) {
        pendingBench = false;
        const auto devices = app.ui.bench.devices();
        const auto it = std::find(devices.begin(), devices.end(), headless.benchDevice);
        if (it == devices.end()) {
          app.ui.errorMessage = "--bench-device " + headless.benchDevice +
                                (headless.benchDevice == "cuda"
                                     ? ": LibTorch sees no CUDA device here"
                                     : ": not a device (use cpu or cuda)");
        } else {
          app.ui.bench.device = static_cast<int>(it - devices.begin());
          startBench(app);
        }
      }

      // --fold / --show-folded: once laid out, as the Fold panel's button and toggle would.
      if (pendingFold && laidOut && analysed) {
        pendingFold = false;
        if (app.ui.model->analysis.foldableCount() == 0) app.ui.errorMessage = "--fold: no LayerNorm folds";
        else startFold(app);
      }
      if (pendingShowFolded && app.ui.fold.folded) {
        pendingShowFolded = false;
        showFoldedGraph(app, true);
      }
      if (pendingSave && !pendingFold && app.ui.fold.summary && app.modelWorker.idle()) {
        pendingSave = false;
        saveFoldedModel(app, headless.saveFolded);
      }

      ImGui_ImplOpenGL3_NewFrame();
      ImGui_ImplGlfw_NewFrame();
      // Headless: wherever X left the pointer, it must not hover anything into the picture.
      if (headless.enabled()) io.MousePos = ImVec2(-FLT_MAX, -FLT_MAX);
      ImGui::NewFrame();
      DrawFrame(app);
      ImGui::Render();
      const float uiMs = std::chrono::duration<float, std::milli>(
                             std::chrono::steady_clock::now() - frameStart).count();
      const float uiCpuMs = static_cast<float>(threadCpuMs() - cpuStart);

      int fbWidth = 0, fbHeight = 0;
      glfwGetFramebufferSize(window, &fbWidth, &fbHeight);
      glViewport(0, 0, fbWidth, fbHeight);
      glClearColor(0.09f, 0.09f, 0.10f, 1.0f);
      glClear(GL_COLOR_BUFFER_BIT);
      ImGui_ImplOpenGL3_RenderDrawData(ImGui::GetDrawData());
      if (headless.enabled()) glFinish();  // count the software rasterizer's work in the frame
      const float frameMs = std::chrono::duration<float, std::milli>(
                                std::chrono::steady_clock::now() - frameStart).count();
      recordFrameTime(app.ui, frameMs, uiMs, uiCpuMs);

      if (headless.enabled()) {
        const HeadlessRun::Step step = run.afterFrame(app, fbWidth, fbHeight);
        if (step == HeadlessRun::Step::Done || step == HeadlessRun::Step::Failed) {
          rc = step == HeadlessRun::Step::Done ? 0 : 1;
          break;
        }
      }
      glfwSwapBuffers(window);
    }
    // Quitting never waits for an import or a Graphviz layout that may take minutes: the
    // worker holds no file open for writing, so the process can end under it.
    if (!app.modelWorker.idle() || !app.layoutWorker.idle()) {
      std::fflush(nullptr);
      std::_Exit(rc);
    }
  }

  ImGui_ImplOpenGL3_Shutdown();
  ImGui_ImplGlfw_Shutdown();
  ImGui::DestroyContext();
  glfwDestroyWindow(window);
  glfwTerminate();
  return rc;
}
