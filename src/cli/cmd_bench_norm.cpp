// `foldnorm bench-norm`: our RMSNorm vs aten::layer_norm vs aten::rms_norm vs our fused LayerNorm,
// the fused residual add + RMSNorm vs its unfused forms, and a copy of the same bytes, interleaved in one run (see include/foldnorm/bench/bench_norm.h).
#include <nlohmann/json.hpp>

#include <iostream>
#include <memory>

#include "command.h"
#include "foldnorm/bench/bench_norm.h"

namespace foldnorm::cli {
namespace {

struct BenchNormArgs {
  bench::BenchNormOptions options;
  bool json = false;
  bool warmL2 = false;
};

void setup(CLI::App& app, int& exitCode) {
  auto args = std::make_shared<BenchNormArgs>();
  auto& o = args->options;
  auto* cmd = app.add_subcommand(
      "bench-norm",
      "Time foldnorm::rms_norm against aten::layer_norm, aten::rms_norm, foldnorm::layer_norm, "
      "the residual-add + norm pair (foldnorm::add_rms_norm, aten::add + foldnorm::rms_norm, "
      "aten::add + aten::layer_norm) and a memory copy, interleaved in one run; progress on stderr");
  cmd->add_option("--device", o.device, "cpu or cuda")->capture_default_str();
  cmd->add_option("--dtype", o.dtypes, "Comma-separated: float32, float64, bfloat16, float16")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--hidden", o.hidden, "Comma-separated hidden sizes (normalized dim)")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--rows", o.rows, "Comma-separated row counts (tokens)")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--reps", o.reps, "Timed rounds per shape (each round runs every variant once)")
      ->capture_default_str();
  cmd->add_option("--warmup", o.warmup, "Untimed rounds per shape first")->capture_default_str();
  cmd->add_option("--eps", o.eps, "eps of every norm")->capture_default_str();
  cmd->add_option("--threads", o.threads, "CPU intra-op threads (0: LibTorch's default)")->capture_default_str();
  cmd->add_option("--cpu-isa", o.cpuIsa,
                  "Instruction set of foldnorm's CPU kernels: auto, avx512, avx2 or portable (ATen's "
                  "kernels keep their own)")
      ->capture_default_str();
  cmd->add_flag("--float32-params", o.float32Params,
                "Weight and bias in float32 whatever the input's dtype (autocast-style 16-bit models)");
  cmd->add_flag("--warm-l2", args->warmL2, "CUDA: do not flush L2 before each sample");
  cmd->add_flag("--json", args->json, "Print the results as JSON instead of a table");
  cmd->callback([args, &exitCode] {
    args->options.flushL2 = !args->warmL2;
    const auto report = bench::runNormBench(args->options, std::cerr);
    if (args->json) {
      std::cout << bench::toJson(report).dump(2) << "\n";
    } else {
      std::cout << bench::formatNormBenchTable(report);
    }
    exitCode = 0;
  });
}

FOLDNORM_REGISTER_COMMAND("bench-norm", setup);

}  // namespace
}  // namespace foldnorm::cli
