// foldnorm inspect MODEL.pt|MODEL.pt2 [--input SPEC]... [--json]
#include <iostream>
#include <nlohmann/json.hpp>

#include "command.h"
#include "foldnorm/graph/summary.h"
#include "foldnorm/import/export.h"
#include "foldnorm/import/export_archive.h"

namespace foldnorm::cli {
namespace {

/// What a .pt2 says about its writer: torch version, export schema, IR dialect, aten opset.
nlohmann::json exportVersions(const ExportArchive& a) {
  return {{"torch_version", a.torchVersion},
          {"schema_version", std::to_string(a.schemaMajor) + "." + std::to_string(a.schemaMinor)},
          {"dialect", a.dialects.empty() ? std::string("?") : a.dialects.front()},
          {"aten_opset", a.atenOpset},
          {"archive_version", a.archiveVersion}};
}

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
    auto model = importModel(opts->model, io);
    std::vector<std::string> specs;
    for (const auto& s : model.inputSpecs) specs.push_back(s.toString());
    auto summary = summarize(model.graph, model.path, specs);
    const auto* archive = model.exported ? model.exported->archive.get() : nullptr;
    if (opts->json) {
      auto j = toJson(summary);
      if (archive) j["export"] = exportVersions(*archive);
      std::cout << j.dump(2) << "\n";
    } else {
      if (archive) {
        const auto v = exportVersions(*archive);
        std::cout << "torch.export program: written by torch " << v["torch_version"].get<std::string>()
                  << ", export schema " << v["schema_version"].get<std::string>() << ", IR dialect "
                  << v["dialect"].get<std::string>() << ", aten opset " << archive->atenOpset << "\n";
      }
      std::cout << toText(summary);
    }
    exitCode = 0;
  });
}

FOLDNORM_REGISTER_COMMAND("inspect", setup);

}  // namespace
}  // namespace foldnorm::cli
