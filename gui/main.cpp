// foldnorm-gui [MODEL.pt|MODEL.pt2] [--input SPEC]... [--screenshot OUT.png [--select LN] [--frames N]
//              [--dump-state STATE.json] [--export-view VIEW.svg|png]] [--bench [--bench-seq 64,128] [--bench-reps N]
//              [--bench-device cpu|cuda]] [--fold [--show-folded] [--save-folded OUT]]
//              [--no-scale-absorb] [--no-insert-centering] [--toggle-scale-absorb] [--toggle-insert-centering]
// Only the platform here: command line, GLFW window, OpenGL context, Dear ImGui backends and the
// frame loop. What a frame shows is frame.cpp; the windows are view_*.cpp; what a headless run
// does besides watching is headless_script.cpp.
#include <GLFW/glfw3.h>
#include <imgui.h>
#include <imgui_impl_glfw.h>
#include <imgui_impl_opengl3.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cfloat>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <iostream>

#include "app.h"
#include "headless.h"

namespace {

using namespace foldnorm::gui;

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

/// The window with an OpenGL 3.3 context and Dear ImGui on it; null (the reason said) when the
/// platform cannot give one.
GLFWwindow* openWindow(int width, int height, bool headless) {
  glfwSetErrorCallback(glfwErrorCallback);
  if (!glfwInit()) {
    std::cerr << "foldnorm-gui: error: cannot initialise GLFW (no display? run under xvfb-run -a)\n";
    return nullptr;
  }
  glfwWindowHint(GLFW_CONTEXT_VERSION_MAJOR, 3);
  glfwWindowHint(GLFW_CONTEXT_VERSION_MINOR, 3);
  glfwWindowHint(GLFW_OPENGL_PROFILE, GLFW_OPENGL_CORE_PROFILE);
  GLFWwindow* window = glfwCreateWindow(width, height, "foldnorm", nullptr, nullptr);
  if (!window) {
    std::cerr << "foldnorm-gui: error: cannot create an OpenGL 3.3 window\n";
    glfwTerminate();
    return nullptr;
  }
  glfwMakeContextCurrent(window);
  // Headless runs measure frame cost, not the display's refresh.
  glfwSwapInterval(headless ? 0 : 1);

  IMGUI_CHECKVERSION();
  ImGui::CreateContext();
  ImGuiIO& io = ImGui::GetIO();
  io.IniFilename = nullptr;  // window placement is computed per frame, nothing to remember
  loadFont(io);
  ImGui::StyleColorsDark();
  ImGui::GetStyle().WindowRounding = 0.0f;
  ImGui_ImplGlfw_InitForOpenGL(window, true);
  ImGui_ImplOpenGL3_Init("#version 330");
  return window;
}

void closeWindow(GLFWwindow* window) {
  ImGui_ImplOpenGL3_Shutdown();
  ImGui_ImplGlfw_Shutdown();
  ImGui::DestroyContext();
  glfwDestroyWindow(window);
  glfwTerminate();
}

/// One frame drawn and shown, its cost recorded; what the headless run says after it.
HeadlessRun::Step drawFrame(GLFWwindow* window, App& app, const HeadlessOptions& headless, HeadlessRun& run) {
  const auto frameStart = std::chrono::steady_clock::now();
  const double cpuStart = threadCpuMs();
  ImGui_ImplOpenGL3_NewFrame();
  ImGui_ImplGlfw_NewFrame();
  // Headless: wherever X left the pointer, it must not hover anything into the picture.
  if (headless.enabled()) ImGui::GetIO().MousePos = ImVec2(-FLT_MAX, -FLT_MAX);
  ImGui::NewFrame();
  DrawFrame(app);
  ImGui::Render();
  const float uiMs = std::chrono::duration<float, std::milli>(std::chrono::steady_clock::now() - frameStart).count();
  const float uiCpuMs = static_cast<float>(threadCpuMs() - cpuStart);

  int fbWidth = 0, fbHeight = 0;
  glfwGetFramebufferSize(window, &fbWidth, &fbHeight);
  glViewport(0, 0, fbWidth, fbHeight);
  glClearColor(0.09f, 0.09f, 0.10f, 1.0f);
  glClear(GL_COLOR_BUFFER_BIT);
  ImGui_ImplOpenGL3_RenderDrawData(ImGui::GetDrawData());
  if (headless.enabled()) glFinish();  // count the software rasterizer's work in the frame
  const float frameMs =
      std::chrono::duration<float, std::milli>(std::chrono::steady_clock::now() - frameStart).count();
  recordFrameTime(app.ui, frameMs, uiMs, uiCpuMs);
  const auto step = headless.enabled() ? run.afterFrame(app, fbWidth, fbHeight) : HeadlessRun::Step::Continue;
  if (step == HeadlessRun::Step::Continue) glfwSwapBuffers(window);
  return step;
}

/// The frame loop until the window closes or the headless run ends; the exit code.
int runFrames(GLFWwindow* window, App& app, const HeadlessOptions& headless, HeadlessScript& script) {
  HeadlessRun run(headless);
  while (!glfwWindowShouldClose(window)) {
    const bool busy = !app.modelWorker.idle() || !app.layoutWorker.idle();
    // Idle: sleep until input (or a worker's wake-up); busy: keep the progress moving. While a
    // benchmark times the models, redraw 4 times a second only, so the window (Mesa renders in
    // software) takes as little CPU from the timed forwards as it can.
    if (benchRunning(app)) glfwWaitEventsTimeout(0.25);
    else if (headless.enabled() || busy) glfwPollEvents();
    else glfwWaitEventsTimeout(0.5);
    app.modelWorker.drain(app);
    app.layoutWorker.drain(app);
    script.beforeFrame(app);
    const auto step = drawFrame(window, app, headless, run);
    if (step != HeadlessRun::Step::Continue) return step == HeadlessRun::Step::Done ? 0 : 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App cli{"foldnorm-gui: inspect which LayerNorms of a traced model fold into RMSNorm, and why"};
  std::string modelPath;
  std::vector<std::string> inputSpecs;
  HeadlessOptions headless;
  int width = 1600, height = 1000;
  cli.add_option("model", modelPath, "TorchScript file (.pt) or torch.export archive (.pt2) to open");
  cli.add_option("--input,-i", inputSpecs,
                 "Example input SHAPE:DTYPE[lo,hi), repeatable (default: the model's own spec)")
      ->take_all();
  addHeadlessOptions(cli, headless);
  cli.add_option("--width", width, "Window width")->capture_default_str();
  cli.add_option("--height", height, "Window height")->capture_default_str();
  CLI11_PARSE(cli, argc, argv);
  if (const auto problem = checkHeadlessOptions(headless, !modelPath.empty()); !problem.empty()) {
    std::cerr << "foldnorm-gui: error: " << problem << "\n";
    return 2;
  }

  GLFWwindow* window = openWindow(width, height, headless.enabled());
  if (!window) return 2;
  int rc = 0;
  {
    App app([] { glfwPostEmptyEvent(); });
    probeCuda(app);  // first on the model worker: the Benchmark panel offers cuda only if usable
    HeadlessScript script(headless, !modelPath.empty());
    script.start(app);
    if (!modelPath.empty()) openModel(app, modelPath, inputSpecs);
    else app.ui.open.visible = app.ui.open.focusPath = true;
    rc = runFrames(window, app, headless, script);
    // Quitting never waits for an import or a Graphviz layout that may take minutes: the
    // worker holds no file open for writing, so the process can end under it.
    if (!app.modelWorker.idle() || !app.layoutWorker.idle()) {
      std::fflush(nullptr);
      std::_Exit(rc);
    }
  }
  closeWindow(window);
  return rc;
}
