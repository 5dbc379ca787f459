// Resident memory of a fold, step by step (issue 16, item 3): import, analysis, copy, plan,
// verification (float32, the plan in float64, the saved file in float64), save. Prints the
// markdown table docs/performance.md quotes, one model per run (a fresh process each, so no
// step inherits another model's heap). Progress on stderr.
//
//   build/bin/fold_memory /tmp/m.pt --make-zoo gpt2:medium     # or: foldnorm zoo gpt2 --preset medium -o /tmp/m.pt
//   build/bin/fold_memory /tmp/m.pt -o /tmp/m-folded.pt
#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>

#include "foldnorm/common/error.h"
#include "foldnorm/fold/fold_memory.h"
#include "foldnorm/zoo/zoo.h"
#include "program_error.h"

using namespace foldnorm;

int main(int argc, char** argv) {
  CLI::App app{"Peak resident memory of each step of a fold (import, analysis, fold, verify, save)"};
  std::string model, out;
  std::vector<std::string> inputs;
  FoldMemoryOptions o;
  app.add_option("model", model, "TorchScript file (.pt)")->required();
  std::string zoo;
  app.add_option("-o,--output", out, "Where the folded model is written (never the input)");
  app.add_option("--make-zoo", zoo, "Only write zoo model NAME:PRESET to MODEL and exit (run again to measure)");
  app.add_option("--input", inputs, "Input spec per model input (default: the one embedded in the model)");
  app.add_option("--random", o.fold.randomInputs, "Random input sets besides the example");
  CLI11_PARSE(app, argc, argv);
  try {
    if (!zoo.empty()) {
      auto colon = zoo.find(':');
      ZooBuildOptions zo;
      if (colon != std::string::npos) zo.preset = zoo.substr(colon + 1);
      zo.progress = [](const std::string& line) { std::cerr << "[fold_memory] " << line << "\n"; };
      buildZooModel(zoo.substr(0, colon), model, zo);
      return 0;
    }
    if (out.empty()) throw Error("no output path (-o OUT.pt)");
    for (const auto& s : inputs) o.inputs.push_back(parseInputSpec(s));
    o.fold.progress = [](const std::string& line) { std::cerr << "[fold_memory] " << line << "\n"; };
    auto report = measureFoldMemory(model, out, o);
    std::cout << memoryTable(report);
    return report.verified ? 0 : 3;
  } catch (const std::exception& e) {
    return foldnorm::analyses::reportFailure("fold_memory", e);
  }
}
