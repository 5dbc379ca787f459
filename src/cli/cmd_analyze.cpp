// foldnorm analyze MODEL.pt [--input SPEC]... [--json] [--no-untie] [--verbose]
// foldnorm rules [--markdown]
#include <iostream>
#include <nlohmann/json.hpp>

#include "command.h"
#include "foldnorm/analysis/analysis.h"
#include "foldnorm/analysis/rules.h"
#include "foldnorm/common/error.h"
#include "foldnorm/import/export.h"

namespace foldnorm::cli {

AnalysisResult analyzeWithOnlyOption(const Graph& graph, const AnalysisOptions& options) {
  try {
    return analyzeFoldability(graph, options);
  } catch (const UnknownLayerNormPath& e) {
    throw Error("--only " + e.path() + ": no LayerNorm with that module path (foldnorm analyze lists them)");
  }
}

namespace {

struct AnalyzeOptions {
  std::string model;
  std::vector<std::string> inputs;
  std::vector<std::string> only;
  bool json = false;
  bool noUntie = false;
  bool verbose = false;
};

void setupAnalyze(CLI::App& app, int& exitCode) {
  auto opts = std::make_shared<AnalyzeOptions>();
  auto* cmd = app.add_subcommand("analyze", "Decide which LayerNorms fold into RMSNorm, which "
                                            "parameters to center, and why not");
  cmd->add_option("model", opts->model, "TorchScript file (.pt) from torch.jit.trace, or a torch.export.save archive (.pt2)")->required();
  addInputOption(*cmd, opts->inputs);
  cmd->add_flag("--json", opts->json, "Print the documented JSON (schema foldnorm-analysis/1)");
  cmd->add_flag("--no-untie", opts->noUntie,
                "Never copy a tied/shared parameter: LNs that need one are reported not foldable");
  cmd->add_option("--only", opts->only, "Consider only these LayerNorms (module paths)")->take_all();
  cmd->add_flag("--verbose,-v", opts->verbose, "List every parameter to center");
  cmd->callback([opts, &exitCode] {
    ImportOptions io;
    for (const auto& s : opts->inputs) io.inputs.push_back(parseInputSpec(s));
    io.progress = [](const std::string& m) { std::cerr << "[foldnorm] " << m << "\n"; };
    auto model = importModel(opts->model, io);
    AnalysisOptions ao;
    ao.allowUntie = !opts->noUntie;
    ao.only = opts->only;
    auto result = analyzeWithOnlyOption(model.graph, ao);
    if (opts->json) std::cout << toJson(model.graph, result, model.path).dump(2) << "\n";
    else std::cout << toText(model.graph, result, opts->verbose);
    exitCode = 0;
  });
}

void setupRules(CLI::App& app, int& exitCode) {
  auto markdown = std::make_shared<bool>(false);
  auto* cmd = app.add_subcommand("rules", "List the mean-zero rules (docs/rules.md is this output)");
  cmd->add_flag("--markdown", *markdown, "Markdown (the default)");
  cmd->callback([&exitCode] {
    std::cout << rulesMarkdown();
    exitCode = 0;
  });
}

FOLDNORM_REGISTER_COMMAND("analyze", setupAnalyze);
FOLDNORM_REGISTER_COMMAND("rules", setupRules);

}  // namespace
}  // namespace foldnorm::cli
