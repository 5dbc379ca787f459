// foldnorm bench-analysis MODEL.pt... [--reps N] [--json]
// Times the foldability analysis alone (after import and the shape-recording run), per model.
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "command.h"
#include "foldnorm/analysis/timing.h"
#include "foldnorm/import/export.h"

namespace foldnorm::cli {
namespace {

struct BenchAnalysisOptions {
  std::vector<std::string> models;
  std::vector<std::string> inputs;
  int reps = 21;
  bool json = false;
};

void setupBenchAnalysis(CLI::App& app, int& exitCode) {
  auto opts = std::make_shared<BenchAnalysisOptions>();
  auto* cmd = app.add_subcommand(
      "bench-analysis",
      "Time the foldability analysis alone (not the load or the shape-recording run), per model; "
      "median and p10-p90 over --reps runs after 2 warm-up runs; progress on stderr");
  cmd->add_option("models", opts->models, "TorchScript files (.pt)")->required()->check(CLI::ExistingFile);
  addInputOption(*cmd, opts->inputs);
  cmd->add_option("--reps", opts->reps, "Timed runs per model")->check(CLI::Range(1, 100000));
  cmd->add_flag("--json", opts->json, "Print JSON instead of a table");
  cmd->callback([opts, &exitCode] {
    nlohmann::json out = nlohmann::json::array();
    if (!opts->json)
      std::printf("%-28s %8s %8s %8s %4s %4s %10s %17s %9s\n", "model", "nodes", "values", "uses", "LNs",
                  "fold", "median ms", "p10-p90 ms", "us/node");
    for (const auto& path : opts->models) {
      ImportOptions io;
      for (const auto& s : opts->inputs) io.inputs.push_back(parseInputSpec(s));
      io.progress = [&](const std::string& m) { std::cerr << "[foldnorm] " << path << ": " << m << "\n"; };
      auto model = importModel(path, io);
      std::cerr << "[foldnorm] " << path << ": timing the analysis, " << opts->reps << " runs\n";
      auto result = analyzeFoldability(model.graph);
      auto t = timeAnalysis(model.graph, {}, opts->reps);
      double perNode = 1000.0 * t.medianMs / static_cast<double>(std::max<std::size_t>(t.nodes, 1));
      if (opts->json) {
        out.push_back({{"model", path},
                       {"nodes", t.nodes},
                       {"values", t.values},
                       {"uses", t.uses},
                       {"layerNorms", result.layerNorms.size()},
                       {"foldable", result.foldableCount()},
                       {"reps", t.reps},
                       {"medianMs", t.medianMs},
                       {"p10Ms", t.p10Ms},
                       {"p90Ms", t.p90Ms},
                       {"usPerNode", perNode}});
      } else {
        std::string name = path.size() > 28 ? "..." + path.substr(path.size() - 25) : path;
        char spread[64];
        std::snprintf(spread, sizeof spread, "%.2f-%.2f", t.p10Ms, t.p90Ms);
        std::printf("%-28s %8zu %8zu %8zu %4zu %4zu %10.2f %17s %9.2f\n", name.c_str(), t.nodes, t.values,
                    t.uses, result.layerNorms.size(), result.foldableCount(), t.medianMs, spread, perNode);
        std::fflush(stdout);
      }
    }
    if (opts->json) std::cout << out.dump(2) << "\n";
    exitCode = 0;
  });
}

FOLDNORM_REGISTER_COMMAND("bench-analysis", setupBenchAnalysis);

}  // namespace
}  // namespace foldnorm::cli
