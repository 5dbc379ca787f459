// foldnorm render MODEL.pt -o OUT.{svg,png,pdf,dot} [--input SPEC]... [--view dataflow|full|ln:PATH]
//                 [--collapse DEPTH] [--no-legend]
#include <chrono>
#include <filesystem>
#include <cstdio>
#include <iostream>

#include "command.h"
#include "foldnorm/analysis/analysis.h"
#include "foldnorm/common/error.h"
#include "foldnorm/import/export.h"
#include "foldnorm/render/render.h"

namespace foldnorm::cli {
namespace {

struct RenderCliOptions {
  std::string model;
  std::string output;
  std::vector<std::string> inputs;
  std::string view = "dataflow";
  int collapse = 0;
  bool noLegend = false;
  bool noClusters = false;
};

double secondsSince(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

void setupRender(CLI::App& app, int& exitCode) {
  auto opts = std::make_shared<RenderCliOptions>();
  auto* cmd = app.add_subcommand("render", "Draw the graph with the analysis' verdicts (Graphviz): foldable "
                                           "and blocked LayerNorms, leaves, breakers, unsafe consumers");
  cmd->add_option("model", opts->model, "TorchScript file (.pt) from torch.jit.trace, or a torch.export.save archive (.pt2)")->required();
  cmd->add_option("-o,--output", opts->output, "Image to write; the format comes from the extension: "
                                               ".svg, .png, .pdf, .dot (.gv)")->required();
  addInputOption(*cmd, opts->inputs);
  cmd->add_option("--view", opts->view,
                  "dataflow (plumbing hidden), full (every node), or ln:PATH (one LayerNorm's mean-zero "
                  "graph; PATH as `foldnorm analyze` lists it)")->capture_default_str();
  cmd->add_option("--collapse", opts->collapse,
                  "Fold every module whose path has DEPTH components into one node with a summary "
                  "(e.g. 3 for transformer.h.0); 0 = off")->check(CLI::NonNegativeNumber);
  cmd->add_flag("--no-legend", opts->noLegend, "Leave the legend out");
  cmd->add_flag("--no-clusters", opts->noClusters, "No module boxes (faster on very large graphs)");
  cmd->callback([opts, &exitCode] {
    auto started = std::chrono::steady_clock::now();
    // Cheap checks first: a bad extension or -o naming the model fails before the import.
    render::formatFromPath(opts->output);
    render::WriteOptions wo;
    wo.protectedPaths.push_back(opts->model);
    render::SceneOptions sceneOptions;
    try {
      sceneOptions = render::parseViewSpec(opts->view);
    } catch (const Error& e) {
      throw Error(std::string("--view: ") + e.what());  // the core names views, the CLI its flag
    }
    sceneOptions.collapseDepth = opts->collapse;
    sceneOptions.legend = !opts->noLegend;
    sceneOptions.clusters = !opts->noClusters;

    ImportOptions io;
    for (const auto& s : opts->inputs) io.inputs.push_back(parseInputSpec(s));
    io.progress = [](const std::string& m) { std::cerr << "[foldnorm] " << m << "\n"; };
    auto model = importModel(opts->model, io);
    auto analysis = analyzeFoldability(model.graph);
    double importSeconds = secondsSince(started);

    auto t = std::chrono::steady_clock::now();
    auto scene = render::buildScene(model.graph, analysis, sceneOptions,
                                    std::filesystem::path(opts->model).filename().string());
    double sceneSeconds = secondsSince(t);
    t = std::chrono::steady_clock::now();
    auto bytes = render::renderToFile(scene, opts->output, wo);
    double renderSeconds = secondsSince(t);
    // printf, not fmt: in torch-facing TUs <fmt/format.h> is LibTorch's bundled copy, which the
    // system libfmt cannot link.
    std::fprintf(stderr, "[foldnorm] wrote %s (%lld bytes): %zu nodes, %zu edges, %zu clusters; import+analysis "
                 "%.2f s, scene %.3f s, layout+render %.2f s\n", opts->output.c_str(), (long long)bytes,
                 scene.nodes.size(), scene.edges.size(), scene.clusters.size(), importSeconds, sceneSeconds,
                 renderSeconds);
    exitCode = 0;
  });
}

FOLDNORM_REGISTER_COMMAND("render", setupRender);

}  // namespace
}  // namespace foldnorm::cli
