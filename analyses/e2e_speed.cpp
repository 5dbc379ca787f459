// End-to-end speed against sequence length (issue: reproducible analyses, item 3; issue 16 item 2):
// the GPT-2, BERT and OPT zoo presets, original against folded (residual adds separate) and
// against folded + fused (each add -> folded norm pair one foldnorm::add_rms_norm), each variant
// interleaved with the original in one run per model (the `foldnorm bench` library,
// src/bench/bench_model.cpp: verified fold first, warm-up, medians and p10-p90, per-round
// speed-ups of back-to-back runs with a bootstrap 95% interval of their median that decides
// "faster", "slower" or "within noise"), and the machine's copy bandwidth measured in the same
// run, before each model.
// Rounds: at least --reps per length, then more until the length's rounds took --case-seconds
// (the count follows the time a round takes, never the ratios seen).
// Three controls of the bench itself (session 6). Two loads of one file put every weight on other
// 4 KiB pages, and on this machine (loaded, 1 thread, CPU time, analyses/ablate_e2e.py) five loads of
// OPT-125m took 173-187 ms a forward, two of the four copies "faster" than the first by 2.6-2.9%;
// all storages moved to page offset 0 still 167-171 ms; with LibTorch's transparent huge pages
// (THP_MEM_ALLOC_ENABLE=1) 144-146 ms, every copy within noise. So a single load per model is one
// draw of where its pages land, and the old +2.7% / -1.5% verdicts were of that draw. Hence:
// --huge-pages on (default): every model's weights on 2 MiB pages; --null-control on (default): a
// second load of the original timed in the same rounds, its original/copy ratio in every row;
// --layouts N (default 2): before each of N shares of a length's rounds every model's storages move
// to drawn offsets in their pages, and the interval resamples layouts as well as rounds.
// Defaults sized to keep scripts/quiet-bench.sh's e2e part near 9 minutes with three models per
// round: 24 rounds (2 layouts x 2 cycles of the 6 orders), 25 s per length, 3 warm-up forwards.
// Writes a Markdown page and a data file (the fused rows' model key ends in "+fused");
// analyses/plot_e2e.gp draws the figure. Progress on stderr.
//
//   build/bin/e2e_speed --device cpu --threads 2 --seq 32,128,512 --out docs/e2e-cpu.md --data docs/data/e2e_cpu.dat
//   gnuplot -e "data='docs/data/e2e_cpu.dat'; out='docs/images/e2e_cpu.png'" analyses/plot_e2e.gp
#include <CLI/CLI.hpp>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <sstream>
#include <unistd.h>

#include "foldnorm/bench/bench_model.h"
#include "docs_output.h"
#include "foldnorm/common/error.h"
#include "foldnorm/zoo/zoo.h"
#include "program_error.h"

namespace fs = std::filesystem;
using namespace foldnorm;

namespace {

// GB/s (read + write) of a 64 MiB float32 copy on the bench device, median of 11 after 2 warm-up:
// what the norms' memory traffic is measured against, on the machine as loaded in this run.
double copyBandwidth(const std::string& device) {
  const auto opts = torch::TensorOptions().dtype(torch::kFloat32).device(device == "cuda" ? torch::kCUDA : torch::kCPU);
  auto src = torch::randn({int64_t{16} << 20}, opts), dst = torch::empty_like(src);
  std::vector<double> ms;
  for (int i = 0; i < 13; ++i) {
    if (device == "cuda") torch::cuda::synchronize();
    const auto t0 = std::chrono::steady_clock::now();
    dst.copy_(src);
    if (device == "cuda") torch::cuda::synchronize();
    const auto t1 = std::chrono::steady_clock::now();
    if (i >= 2) ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  return 2.0 * static_cast<double>(src.nbytes()) / (ms[ms.size() / 2] * 1e-3) / 1e9;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Regenerate the end-to-end speed table: zoo models, original vs folded (and fused), per sequence length"};
  bench::BenchModelOptions o;
  o.seqs = {32, 128, 512};
  o.warmup = 3;
  o.reps = 24;
  o.caseSeconds = 25;
  o.layouts = 2;
  std::vector<std::string> models{"gpt2:small", "bert:base", "opt:125m"};
  std::string out, data, fuse = "on", nullControl = "on", hugePages = "on";
  app.add_option("--fuse", fuse, "Folded variants: off (adds separate), on (fused), both")
      ->check(CLI::IsMember({"off", "on", "both"}));
  app.add_option("--null-control", nullControl,
                 "on: time a second load of the original in the same rounds (null fold: the bench's own noise floor)")
      ->check(CLI::IsMember({"on", "off"}));
  app.add_option("--huge-pages", hugePages,
                 "on: LibTorch's buffers of 2 MiB and more (every model's weights) on transparent huge pages "
                 "(THP_MEM_ALLOC_ENABLE=1), so where a load puts a model does not move its time")
      ->check(CLI::IsMember({"on", "off"}));
  app.add_option("--models", models, "Zoo models as NAME:PRESET")->delimiter(',');
  app.add_option("--device", o.device, "cpu or cuda");
  app.add_option("--dtype", o.dtype, "float32, bfloat16 or float16");
  app.add_option("--seq", o.seqs, "Sequence lengths")->delimiter(',');
  app.add_option("--batch", o.batch, "Batch size (0: the spec's)");
  app.add_option("--threads", o.threads, "CPU intra-op threads (0: LibTorch's default)");
  app.add_option("--warmup", o.warmup);
  app.add_option("--reps", o.reps, "Timed rounds per length, at least");
  app.add_option("--layouts", o.layouts,
                 "Parameter layouts per length: every model's storages moved to drawn page offsets before each "
                 "share of the rounds (1: where each load put them)");
  app.add_option("--case-seconds", o.caseSeconds,
                 "After --reps rounds, more rounds until a length's rounds took this long (0: exactly --reps)");
  app.add_option("--out", out, "Markdown file (default docs/e2e-DEVICE.md)");
  app.add_option("--data", data, "Data file for gnuplot (default docs/data/e2e_DEVICE.dat)");
  CLI11_PARSE(app, argc, argv);
  if (out.empty()) out = "docs/e2e-" + o.device + ".md";
  if (data.empty()) data = "docs/data/e2e_" + o.device + ".dat";
  try {
    bench::checkOptions(o);  // a bad option (cuda without a GPU) costs no model build
    if (hugePages == "on") bench::useHugePages();  // before LibTorch's first CPU allocation
    bench::keepLargeBuffersOnHeap();  // as `foldnorm bench` does
    auto scratch = fs::temp_directory_path() / ("e2e-" + std::to_string(::getpid()));
    fs::create_directories(scratch);
    // The scratch folder goes however the run ends (a failed bench leaves no traced models behind).
    struct RemoveScratch {
      fs::path dir;
      ~RemoveScratch() {
        std::error_code ec;
        fs::remove_all(dir, ec);
      }
    } removeScratch{scratch};
    std::ostringstream md, dat;
    md << "# End-to-end speed: original vs folded\n\n"
       << "Generated by `analyses/e2e_speed.cpp`; do not edit by hand. Regenerate with\n\n```\n"
       << "build/bin/e2e_speed --device " << o.device << " --dtype " << o.dtype << " --threads " << o.threads
       << " --fuse " << fuse << " --huge-pages " << hugePages << " --null-control " << nullControl << " --layouts " << o.layouts << " --warmup "
       << o.warmup << " --reps " << o.reps << " --case-seconds " << o.caseSeconds << " --out " << out << " --data " << data
       << "\ngnuplot -e \"data='" << data << "'; out='docs/images/e2e_" << o.device << ".png'\" analyses/plot_e2e.gp\n```\n\n"
       << "Zoo models (random weights, traced by LibTorch); per model the fold is verified first (float32 and\n"
       << "float64), then both are timed interleaved per sequence length. Speed-up = per-round\n"
       << "original/folded of back-to-back runs, median (p10-p90); above 1 the folded model is faster.\n"
       << "The 95% interval is a percentile bootstrap of that median (rounds resampled whole): \"faster\"\n"
       << "when it lies above 1, \"slower\" when below, else \"within noise\" (\"too few rounds\" under 10).\n"
       << "Each length runs at least --reps rounds, then more until its rounds took --case-seconds.\n"
       << "\"folded\" keeps each\n"
       << "residual add separate; \"folded + fused\" runs each add -> folded norm pair as one\n"
       << "foldnorm::add_rms_norm (exact: bitwise the unfused fold); each variant is interleaved with its\n"
       << "own run of the original.\n";
    if (hugePages == "on") {
      md << "Huge pages: LibTorch's CPU buffers of 2 MiB and more (the weights of every model alike) lie on\n"
         << "transparent huge pages (THP_MEM_ALLOC_ENABLE=1). With 4 KiB pages five loads of one OPT-125m file\n"
         << "took 173-187 ms a forward (loaded machine, 1 thread, CPU time), with huge pages 144-146 ms: without\n"
         << "them the bench compares where two loads put their pages, not the fold.\n";
    }
    if (nullControl == "on") {
      md << "\"null fold\": a second, separately loaded copy of the original timed in the same rounds (the\n"
         << "six orders of the three models in turn), its per-round original/copy ratio summed up the same way:\n"
         << "what the bench reads between two identical models, so a fold result inside that is no result.\n";
    }
    if (o.layouts > 1) {
      md << "Parameter layouts: each length's rounds are split into " << o.layouts << " shares; before each, every\n"
         << "storage of every model (the original's too) moves to a fresh allocation, values unchanged ("
         << (hugePages == "on" ? "at a page\nstart, as LibTorch aligns with huge pages" : "at a drawn\n64-byte offset in its page")
         << "). One load fixes one layout for a whole run, so the interval\n"
         << "resamples the layouts, then the rounds within each.\n";
    }
    dat << "# model seq items orig_ms orig_p10 orig_p90 fold_ms fold_p10 fold_p90 speedup sp_p10 sp_p90 ci_low "
           "ci_high rounds null_median null_ci_low null_ci_high (null_*: original/copy, nan without --null-control)\n";
    for (const auto& spec : models) {
      auto colon = spec.find(':');
      std::string name = spec.substr(0, colon), preset = colon == std::string::npos ? "" : spec.substr(colon + 1);
      auto path = (scratch / (name + ".pt")).string();
      ZooBuildOptions zo;
      zo.preset = preset;
      zo.progress = [&](const std::string& m) { std::cerr << "[" << name << "] zoo: " << m << "\n"; };
      buildZooModel(name, path, zo);
      std::vector<bool> variants;
      if (fuse != "on") variants.push_back(false);
      if (fuse != "off") variants.push_back(true);
      for (bool fused : variants) {
        o.fuseAddNorm = fused;
        o.nullControl = nullControl == "on";
        const double copyGbs = copyBandwidth(o.device);
        auto r = bench::runModelBench(path, o, std::cerr);
        std::string label = name + (preset.empty() ? "" : " " + preset) + (fused ? " folded + fused" : " folded");
        char head[1024];
        std::snprintf(head, sizeof head,
                      "\n## %s\n\n%s, %s, %d threads, CPU kernels %s, torch %s; %d LayerNorms folded, %d kept, "
                      "%d residual adds fused; copy bandwidth %.1f GB/s (64 MiB float32, this run); "
                      "fold verified: float64 worst relative error %.2e, float32 %.2e, predictions %s. "
                      "1-minute load average %.2f before, %.2f after. %s; %s; %d parameter layout(s) per length\n\n",
                      label.c_str(), r.device.c_str(), r.dtype.c_str(), r.threads, r.cpuKernelIsa.c_str(),
                      r.torchVersion.c_str(), r.foldedLayerNorms, r.keptLayerNorms, r.fusedAddNorms, copyGbs,
                      r.worstRelative64,
                      r.worstRelative32, r.predictionsUnchanged ? "unchanged" : "CHANGED", r.loadBefore, r.loadAfter,
                      r.executor.c_str(), r.hugePages ? "weights on transparent huge pages" : "4 KiB pages",
                      r.layouts);
        md << head << "| seq | " << r.itemUnit
           << " | original ms (p10-p90) | folded ms (p10-p90) | speed-up (p10-p90) | 95% interval | rounds | "
              "verdict |"
           << (o.nullControl ? " null fold: original/copy (95% interval), verdict |\n" : "\n")
           << "|---|---|---|---|---|---|---|---|" << (o.nullControl ? "---|\n" : "\n");
        for (const auto& c : r.cases) {
          char line[512];
          if (!c.skipped.empty()) {
            std::snprintf(line, sizeof line, "| %lld | - | skipped: %s | | | | | |%s\n", static_cast<long long>(c.seq),
                          c.skipped.c_str(), o.nullControl ? " |" : "");
            md << line;
            continue;
          }
          std::snprintf(line, sizeof line,
                        "| %lld | %lld | %.2f (%.2f-%.2f) | %.2f (%.2f-%.2f) | %.3f (%.3f-%.3f) | %.3f-%.3f | %d | %s |",
                        static_cast<long long>(c.seq), static_cast<long long>(c.items), c.originalMs.median,
                        c.originalMs.p10, c.originalMs.p90, c.foldedMs.median, c.foldedMs.p10, c.foldedMs.p90,
                        c.speedup.median, c.speedup.p10, c.speedup.p90, c.paired.low, c.paired.high,
                        c.paired.rounds, c.paired.verdict.c_str());
          md << line;
          if (c.control.rounds > 0) {
            std::snprintf(line, sizeof line, " %.3f (%.3f-%.3f), %s |", c.control.median, c.control.low,
                          c.control.high, c.control.verdict.c_str());
            md << line;
          }
          md << "\n";
          std::string key = name + (preset.empty() ? "" : "_" + preset) + (fused ? "+fused" : "");
          const bool ctl = c.control.rounds > 0;
          const double nan = std::numeric_limits<double>::quiet_NaN();
          std::snprintf(line, sizeof line,
                        "%s %lld %lld %.4f %.4f %.4f %.4f %.4f %.4f %.5f %.5f %.5f %.5f %.5f %d %.5f %.5f %.5f\n",
                        key.c_str(), static_cast<long long>(c.seq), static_cast<long long>(c.items),
                        c.originalMs.median, c.originalMs.p10, c.originalMs.p90, c.foldedMs.median, c.foldedMs.p10,
                        c.foldedMs.p90, c.speedup.median, c.speedup.p10, c.speedup.p90, c.paired.low,
                        c.paired.high, c.paired.rounds, ctl ? c.control.median : nan, ctl ? c.control.low : nan,
                        ctl ? c.control.high : nan);
          dat << line;
        }
      }
      std::remove(path.c_str());
    }
    foldnorm::analyses::writeAtomically(out, md.str());
    foldnorm::analyses::writeAtomically(data, dat.str());
    std::cout << md.str();
    std::cerr << "wrote " << out << " and " << data << "\n";
  } catch (const std::exception& e) {
    return foldnorm::analyses::reportFailure("e2e_speed", e);
  }
  return 0;
}
