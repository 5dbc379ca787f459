// foldnorm inspect MODEL.pt|MODEL.pt2 [--input SPEC]... [--json]
#include <iostream>
#include <nlohmann/json.hpp>

#include "command.h"
#include "foldnorm/graph/summary.h"
#include "foldnorm/fold/model.h"

namespace foldnorm::cli {
namespace {

struct InspectOptions {
  std::string model;
  std::vector<std::string> inputs;
  bool json = false;
};

void setup(CLI::App& app, int& exitCode) {
  auto opts = std::make_shared<InspectOptions>();
  auto* cmd = app.add_subcommand("inspect", "Import a traced or exported model and show its ops, layer norms, "
                                            "parameters, tied groups and I/O shapes");
  cmd->add_option("model", opts->model, "TorchScript file (.pt) from torch.jit.trace, or a torch.export.save "
                                        "archive (.pt2)")->required();
  addInputOption(*cmd, opts->inputs);
  cmd->add_flag("--json", opts->json, "Print the documented JSON (schema foldnorm-inspect/1)");
  cmd->callback([opts, &exitCode] {
    ImportOptions io;
    for (const auto& s : opts->inputs) io.inputs.push_back(parseInputSpec(s));
    io.progress = [](const std::string& m) { std::cerr << "[foldnorm] " << m << "\n"; };
    const Model model = Model::open(opts->model, io);
    std::vector<std::string> specs;
    for (const auto& s : model.inputSpecs()) specs.push_back(s.toString());
    auto summary = summarize(model.graph(), model.path(), specs);
    if (opts->json) {
      auto j = toJson(summary);
      j.update(model.fileInfo());  // a .pt2's writer ("export"), nothing for TorchScript
      std::cout << j.dump(2) << "\n";
    } else {
      if (const auto line = model.fileInfoLine(); !line.empty()) std::cout << line << "\n";
      std::cout << toText(summary);
    }
    exitCode = 0;
  });
}

FOLDNORM_REGISTER_COMMAND("inspect", setup);

}  // namespace
}  // namespace foldnorm::cli
