// `foldnorm zoo list` and `foldnorm zoo NAME [--preset P] [--seed N] [--layers N] -o OUT.pt`: build a model of
// the built-in zoo as a traced TorchScript file with its example inputs embedded.
#include <iomanip>
#include <iostream>
#include <memory>

#include "command.h"
#include "foldnorm/common/error.h"
#include "foldnorm/zoo/zoo.h"

namespace foldnorm::cli {
namespace {

struct ZooArgs {
  std::string name;
  std::string preset;
  uint64_t seed = 0;
  int64_t layers = 0;
  std::string out;
};

void listModels() {
  for (const auto& m : zooModels()) {
    std::string presets;
    for (const auto& p : m.presets) {
      presets += (presets.empty() ? "" : ", ") + p + (p == m.defaultPreset ? " (default)" : "");
    }
    std::cout << std::left << std::setw(11) << m.name << m.description << "\n"
              << std::setw(11) << "" << "presets: " << presets << "\n"
              << std::setw(11) << "" << "follows: " << m.reference << "\n";
  }
}

void setup(CLI::App& app, int& exitCode) {
  auto args = std::make_shared<ZooArgs>();
  auto* cmd = app.add_subcommand(
      "zoo", "Build a built-in model (published architecture, random weights) as a traced "
             "TorchScript file with its example inputs embedded; `zoo list` shows the models");
  cmd->add_option("model", args->name, "Model name, or `list`")->required();
  cmd->add_option("--preset,-p", args->preset, "Size preset (default: the published size; "
                                               "`tiny` builds in seconds)");
  cmd->add_option("--seed", args->seed, "Seed of the random weights and example inputs")
      ->capture_default_str();
  cmd->add_option("--layers", args->layers, "That many layers at the preset's width (a full-width model that "
                                            "fits in memory; not for models with stages: swin_t, convnext_t)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--output,-o", args->out, "Where to write the TorchScript file (.pt)");
  cmd->callback([args, &exitCode] {
    if (args->name == "list") {
      listModels();
      exitCode = 0;
      return;
    }
    findZooModel(args->name);  // an unknown name is reported before asking for -o
    if (args->out.empty()) {
      throw Error("zoo " + args->name + ": missing output file; add -o " + args->name + ".pt");
    }
    ZooBuildOptions options;
    options.preset = args->preset;
    options.seed = args->seed;
    options.layers = args->layers;
    options.progress = [](const std::string& line) { std::cerr << "zoo: " << line << "\n"; };
    buildZooModel(args->name, args->out, options);
    exitCode = 0;
  });
}

FOLDNORM_REGISTER_COMMAND("zoo", setup);

}  // namespace
}  // namespace foldnorm::cli
