// `foldnorm bench MODEL.pt|MODEL.pt2`: the original and the folded model end to end, interleaved in
// one run (see include/foldnorm/bench/bench_model.h). A .pt2 runs on foldnorm's interpreter.
#include <nlohmann/json.hpp>

#include <iostream>
#include <memory>

#include "command.h"
#include "foldnorm/bench/bench_model.h"
#include "foldnorm/common/error.h"
#include "foldnorm/common/write_file.h"

namespace foldnorm::cli {
namespace {

struct BenchArgs {
  std::string model;
  bench::BenchModelOptions options;
  bool json = false;
  bool noScaleAbsorb = false, noInsertCentering = false;
  std::string jsonOut;
  std::string hugePages = "auto", nullControl = "on";
};

// --huge-pages: on must hold (else one clear line), auto takes huge pages where the CPU run can
// have them and says so when it cannot, off keeps 4 KiB pages.
void choosePages(const BenchArgs& args, std::ostream& progress) {
  if (args.hugePages == "off") return;
  if (args.hugePages == "auto" && args.options.device != "cpu") return;  // weights in device memory
  try {
    bench::useHugePages();
  } catch (const Error& e) {
    if (args.hugePages == "on") throw;
    progress << "[bench] 4 KiB pages: " << e.what() << "\n";
  }
}

void setup(CLI::App& app, int& exitCode) {
  auto args = std::make_shared<BenchArgs>();
  auto& o = args->options;
  auto* cmd = app.add_subcommand(
      "bench",
      "Fold a model in memory (verified in float32 and float64), then time the original and the "
      "folded model end to end, interleaved in one run, per sequence length; progress on stderr. "
      "A .pt2 (torch.export) is timed by foldnorm's interpreter, so its times are the interpreter's");
  cmd->add_option("model", args->model, "TorchScript file (.pt) or torch.export archive (.pt2)")->required();
  addInputOption(*cmd, o.inputSpecs);
  addBeyondPaperFlags(*cmd, args->noScaleAbsorb, args->noInsertCentering);
  cmd->add_option("--rms-op", o.rmsOp,
                  "What the folded LNs become: foldnorm (our fused op, the fast one on CPU) or aten "
                  "(aten::rms_norm plus a bias add)")
      ->check(CLI::IsMember(std::vector<std::string>(std::begin(kRmsOpNames), std::end(kRmsOpNames))))
      ->capture_default_str();
  cmd->add_option("--device", o.device, "cpu or cuda")->capture_default_str();
  cmd->add_option("--seq", o.seqs,
                  "Comma-separated sequence lengths: the last dim of every integer input "
                  "(default: the spec's; not applicable to image models)")
      ->delimiter(',');
  cmd->add_option("--batch", o.batch, "Batch size, dim 0 of every input (default: the spec's)");
  cmd->add_option("--dtype", o.dtype,
                  "float32, bfloat16 or float16: both models are cast on fresh copies after the "
                  "fold was verified in float32 and float64")
      ->capture_default_str();
  cmd->add_option("--warmup", o.warmup, "Untimed forwards of each model per length (>= 2)")
      ->capture_default_str();
  cmd->add_option("--reps", o.reps, "Timed rounds per length (each runs both models once)")
      ->capture_default_str();
  cmd->add_option("--case-seconds", o.caseSeconds,
                  "After --reps rounds, keep timing rounds until a length's rounds took this many seconds (0: off)")
      ->capture_default_str();
  cmd->add_option("--threads", o.threads, "CPU intra-op threads (0: LibTorch's default)")
      ->capture_default_str();
  cmd->add_option("--seed", o.seed, "Seed of the inputs")->capture_default_str();
  cmd->add_option("--huge-pages", args->hugePages,
                  "on: LibTorch's CPU buffers of 2 MiB and more (the weights) on transparent huge pages, so where "
                  "a load puts a model does not move its time (4 KiB pages can, by 1-3%); auto: on for cpu "
                  "where the kernel allows it; off: 4 KiB pages")
      ->check(CLI::IsMember({"auto", "on", "off"}))
      ->capture_default_str();
  cmd->add_option("--null-control", args->nullControl,
                  "on: also time a second load of the original in the same rounds (the null fold: what the "
                  "bench reads between two identical models, shown beside the fold's result)")
      ->check(CLI::IsMember({"on", "off"}))
      ->capture_default_str();
  o.layouts = 2;
  cmd->add_option("--layouts", o.layouts,
                  "Parameter layouts per length (.pt): every model's storages move to drawn page offsets before "
                  "each share of the rounds, so the interval resamples layouts too (1: where each load put them)")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  cmd->add_flag("--json", args->json, "Print the results as JSON (format foldnorm-bench/1)");
  cmd->add_option("--json-out", args->jsonOut, "Also write the JSON to this file (the table still prints)");
  cmd->callback([args, &exitCode] {
    // The CLI is the whole process: its allocator may be set for timing (a GUI's is not).
    bench::keepLargeBuffersOnHeap();
    args->options.scaleAbsorb = !args->noScaleAbsorb;
    args->options.insertCentering = !args->noInsertCentering;
    args->options.nullControl = args->nullControl == "on";
    choosePages(*args, std::cerr);  // before the model's load: LibTorch reads the setting once
    if (!args->jsonOut.empty()) checkOutputFile(args->jsonOut, {args->model});  // before minutes of timing
    const auto report = bench::runModelBench(args->model, args->options, std::cerr);
    if (!args->jsonOut.empty()) {
      writeFileAtomically(args->jsonOut, bench::toJson(report).dump(2) + "\n", {args->model});
    }
    if (args->json) {
      std::cout << bench::toJson(report).dump(2) << "\n";
    } else {
      std::cout << bench::formatModelBenchTable(report);
    }
    exitCode = 0;
  });
}

FOLDNORM_REGISTER_COMMAND("bench", setup);

}  // namespace
}  // namespace foldnorm::cli
