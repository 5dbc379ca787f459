// foldnorm retarget MODEL.pt -o OUT.pt [--dtype float32|float64|float16|bfloat16] [--device cpu|cuda[:N]]
// Every method of a saved TorchScript model (folded or not) rewritten to run in another dtype or
// on another device (fold/retarget.h): what Python's module.to(...) cannot do for a trace.
#include <iostream>

#include "command.h"
#include "foldnorm/fold/retarget.h"

namespace foldnorm::cli {
namespace {

struct RetargetCliOptions {
  std::string model, out, dtype, device = "cpu";
};

void setup(CLI::App& app, int& exitCode) {
  auto o = std::make_shared<RetargetCliOptions>();
  auto* cmd = app.add_subcommand("retarget", "Rewrite every method and tensor of a TorchScript model to another "
                                             "dtype or device (a trace's baked-in float32 and device constants "
                                             "included), save it atomically and check it against the original");
  cmd->add_option("model", o->model, "TorchScript file (.pt)")->required();
  cmd->add_option("-o,--output", o->out, "Where to write the copy (never the input)")->required();
  cmd->add_option("--dtype", o->dtype, "Floating dtype of the copy")
      ->check(CLI::IsMember({"float32", "float64", "float16", "bfloat16"}));
  cmd->add_option("--device", o->device, "Device the copy's graphs name (cpu, cuda, cuda:N); without that GPU "
                                         "here the tensors stay on the CPU");
  cmd->callback([o, &exitCode] {
    RetargetFileOptions ro;
    ro.dtype = o->dtype;
    ro.device = o->device;
    ro.progress = [](const std::string& m) { std::cerr << "[foldnorm] " << m << "\n"; };
    std::cout << toText(retargetFile(o->model, o->out, ro));
    exitCode = 0;
  });
}

FOLDNORM_REGISTER_COMMAND("retarget", setup);

}  // namespace
}  // namespace foldnorm::cli
