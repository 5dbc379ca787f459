// Training equivalence of CBWC+RMSNorm and LayerNorm (docs/method.md sections 2 and 6), measured.
//
// A character-level tiny GPT (src/train/tiny_gpt.h) is trained on a text from a Debian package
// (fortunes: /usr/share/games/fortunes) three ways, LayerNorm, RMSNorm and CBWC+RMSNorm, from one
// initialization copied into all three, on the same batches:
//   - without dropout, the LayerNorm and CBWC+RMSNorm runs must coincide: the largest
//     |LN - CBWC| train and validation loss difference over the run is printed;
//   - with dropout (the same masks in all three: same seed, same draw order), the equivalence
//     breaks; repeated over several dropout/batch seeds, the table shows where CBWC+RMSNorm's
//     validation loss lands relative to the other two.
// Writes docs/data/training.csv (train loss per step) and docs/data/training_val.csv
// (validation loss; seed 0 rows are the mean over seeds); analyses/plot_training.gp draws
// docs/images/training.png from them. Progress goes to stderr, tables to stdout.
//
//   build/bin/training_equivalence && gnuplot analyses/plot_training.gp
#include <ATen/Parallel.h>
#include <torch/torch.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "foldnorm/common/error.h"
#include "foldnorm/train/char_lm.h"
#include "foldnorm/train/tiny_gpt.h"
#include "program_error.h"

namespace {

using foldnorm::train::LossCurve;
using foldnorm::train::NormVariant;

constexpr std::array<NormVariant, 3> kVariants{NormVariant::kLayerNorm, NormVariant::kRmsNorm,
                                               NormVariant::kCbwcRmsNorm};

struct Options {
  std::string corpus = "/usr/share/games/fortunes/computers";
  double valFraction = 0.1;
  int steps = 300;
  int64_t batch = 16;
  int64_t window = 64;
  int64_t dModel = 64;
  int64_t heads = 4;
  int64_t layers = 2;
  double dropout = 0.1;
  int dropoutSeeds = 3;
  double learningRate = 3e-3;
  std::string dtype = "float64";
  uint64_t initSeed = 1;
  int threads = 2;
  int evalEvery = 10;
  int64_t evalWindows = 64;
  int tableEvery = 50;
  std::string dataDir = "docs/data";
};

// One configuration (dropout p, seed) trained in all three variants.
struct Trio {
  double dropout = 0.0;
  uint64_t seed = 0;
  std::array<LossCurve, 3> curves;  // kVariants order
};

torch::Dtype parseDtype(const std::string& name) {
  if (name == "float64") return torch::kFloat64;
  if (name == "float32") return torch::kFloat32;
  throw foldnorm::Error("training_equivalence: unknown --dtype '" + name +
                        "' (use float64 or float32)");
}

Trio trainTrio(const Options& o, const foldnorm::train::CharCorpus& corpus, double dropout,
               uint64_t seed, int& run, int runs) {
  foldnorm::train::TinyGptConfig config;
  config.vocabSize = corpus.vocabSize();
  config.context = o.window;
  config.dModel = o.dModel;
  config.heads = o.heads;
  config.layers = o.layers;
  config.dropout = dropout;

  // One initialization (in the LayerNorm model), copied by name into the other two.
  config.norm = NormVariant::kLayerNorm;
  foldnorm::train::TinyGpt initial(config);
  initial->to(parseDtype(o.dtype));
  foldnorm::train::initializeGpt2Style(initial, o.initSeed);

  foldnorm::train::TrainOptions train;
  train.steps = o.steps;
  train.batch = o.batch;
  train.window = o.window;
  train.learningRate = o.learningRate;
  train.dataSeed = 1000 + seed;
  train.dropoutSeed = 2000 + seed;
  train.evalEvery = o.evalEvery;
  train.evalWindows = o.evalWindows;

  Trio trio;
  trio.dropout = dropout;
  trio.seed = seed;
  for (size_t v = 0; v < kVariants.size(); ++v) {
    config.norm = kVariants[v];
    foldnorm::train::TinyGpt model(config);
    model->to(parseDtype(o.dtype));
    foldnorm::train::copyParameters(*initial, *model);
    ++run;
    const auto start = std::chrono::steady_clock::now();
    trio.curves[v] = foldnorm::train::trainCharLm(model, corpus, train, [&](int step, double loss) {
      if ((step + 1) % 50 == 0 || step + 1 == o.steps) {
        const double seconds =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        std::fprintf(stderr, "[run %d/%d] %-12s dropout %.2f seed %llu: step %4d/%d loss %.4f (%.1f s)\n",
                     run, runs, toString(kVariants[v]), dropout,
                     static_cast<unsigned long long>(seed), step + 1, o.steps, loss, seconds);
      }
    });
  }
  return trio;
}

double maxAbsDifference(const std::vector<double>& a, const std::vector<double>& b) {
  double worst = 0.0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(a[i] - b[i]));
  return worst;
}

// Mean over seeds of one variant's validation curve.
std::vector<double> meanValidation(const std::vector<Trio>& trios, size_t variant) {
  std::vector<double> mean(trios.front().curves[variant].validation.size(), 0.0);
  for (const auto& trio : trios) {
    for (size_t i = 0; i < mean.size(); ++i) mean[i] += trio.curves[variant].validation[i];
  }
  for (auto& m : mean) m /= static_cast<double>(trios.size());
  return mean;
}

void printNoDropout(const Options& o, const Trio& trio) {
  const auto& [ln, rms, cbwc] = trio.curves;
  std::printf("\n## Without dropout: train loss (batch loss before the step's update)\n\n");
  std::printf("| step | LayerNorm | RMSNorm | CBWC+RMSNorm | abs(LN - CBWC) |\n");
  std::printf("|-----:|----------:|--------:|-------------:|---------------:|\n");
  for (int s = 0; s < o.steps; ++s) {
    if (s % o.tableEvery != 0 && s + 1 != o.steps) continue;
    std::printf("| %d | %.6f | %.6f | %.6f | %.2e |\n", s, ln.train[s], rms.train[s], cbwc.train[s],
                std::abs(ln.train[s] - cbwc.train[s]));
  }
  std::printf("\n## Without dropout: validation loss (%lld fixed windows, eval mode)\n\n",
              static_cast<long long>(o.evalWindows));
  std::printf("| after step | LayerNorm | RMSNorm | CBWC+RMSNorm | abs(LN - CBWC) |\n");
  std::printf("|-----------:|----------:|--------:|-------------:|---------------:|\n");
  for (size_t i = 0; i < ln.evalSteps.size(); ++i) {
    if (ln.evalSteps[i] % o.tableEvery != 0 && i + 1 != ln.evalSteps.size()) continue;
    std::printf("| %d | %.6f | %.6f | %.6f | %.2e |\n", ln.evalSteps[i], ln.validation[i],
                rms.validation[i], cbwc.validation[i],
                std::abs(ln.validation[i] - cbwc.validation[i]));
  }
  std::printf("\nmax |LN - CBWC| over %d steps: train loss %.3e, validation loss %.3e\n", o.steps,
              maxAbsDifference(ln.train, cbwc.train),
              maxAbsDifference(ln.validation, cbwc.validation));
  std::printf("max |LN - RMS|  over %d steps: train loss %.3e, validation loss %.3e (control)\n",
              o.steps, maxAbsDifference(ln.train, rms.train),
              maxAbsDifference(ln.validation, rms.validation));
}

const char* placement(double ln, double rms, double cbwc) {
  if ((cbwc - ln) * (cbwc - rms) < 0.0) return "between";
  if (cbwc < std::min(ln, rms)) return "best";
  if (cbwc > std::max(ln, rms)) return "worst";
  return "tied";
}

void printDropout(const Options& o, const std::vector<Trio>& trios) {
  std::printf("\n## With dropout %.2f: validation loss, mean over %zu seeds\n\n", o.dropout,
              trios.size());
  std::printf("| after step | LayerNorm | RMSNorm | CBWC+RMSNorm | CBWC - LN | RMS - LN | CBWC is |\n");
  std::printf("|-----------:|----------:|--------:|-------------:|----------:|---------:|:--------|\n");
  const auto ln = meanValidation(trios, 0), rms = meanValidation(trios, 1),
             cbwc = meanValidation(trios, 2);
  const auto& steps = trios.front().curves[0].evalSteps;
  int between = 0, counted = 0;
  for (size_t i = 0; i < steps.size(); ++i) {
    if (steps[i] > 0) {
      ++counted;
      between += std::string(placement(ln[i], rms[i], cbwc[i])) == "between";
    }
    if (steps[i] % o.tableEvery != 0 && i + 1 != steps.size()) continue;
    std::printf("| %d | %.4f | %.4f | %.4f | %+.4f | %+.4f | %s |\n", steps[i], ln[i], rms[i],
                cbwc[i], cbwc[i] - ln[i], rms[i] - ln[i], placement(ln[i], rms[i], cbwc[i]));
  }
  std::printf("\nCBWC+RMSNorm between LN and RMS at %d of %d evaluations after step 0 (seed mean)\n",
              between, counted);
  std::printf("\nFinal validation loss per seed:\n\n");
  std::printf("| seed | LayerNorm | RMSNorm | CBWC+RMSNorm | CBWC is | max abs(LN - CBWC) train |\n");
  std::printf("|-----:|----------:|--------:|-------------:|:--------|-------------------------:|\n");
  for (const auto& trio : trios) {
    const double l = trio.curves[0].validation.back(), r = trio.curves[1].validation.back(),
                 c = trio.curves[2].validation.back();
    std::printf("| %llu | %.4f | %.4f | %.4f | %s | %.3e |\n",
                static_cast<unsigned long long>(trio.seed), l, r, c, placement(l, r, c),
                maxAbsDifference(trio.curves[0].train, trio.curves[2].train));
  }
}

void writeCsv(const Options& o, const Trio& plain, const std::vector<Trio>& dropped) {
  std::filesystem::create_directories(o.dataDir);
  const std::string trainPath = o.dataDir + "/training.csv";
  const std::string valPath = o.dataDir + "/training_val.csv";
  std::ofstream train(trainPath), val(valPath);
  if (!train || !val) {
    throw foldnorm::Error("training_equivalence: cannot write " + trainPath + " or " + valPath +
                          "; run from the repository root or pass --data-dir");
  }
  train << "dropout,seed,step,layernorm,rmsnorm,cbwc_rmsnorm,abs_ln_minus_cbwc\n";
  val << "dropout,seed,step,layernorm,rmsnorm,cbwc_rmsnorm,abs_ln_minus_cbwc\n";
  char line[256];
  std::vector<const Trio*> all{&plain};
  for (const auto& t : dropped) all.push_back(&t);
  for (const Trio* t : all) {
    for (size_t s = 0; s < t->curves[0].train.size(); ++s) {
      const double l = t->curves[0].train[s], r = t->curves[1].train[s], c = t->curves[2].train[s];
      std::snprintf(line, sizeof line, "%.2f,%llu,%zu,%.17g,%.17g,%.17g,%.17g\n", t->dropout,
                    static_cast<unsigned long long>(t->seed), s, l, r, c, std::abs(l - c));
      train << line;
    }
    for (size_t i = 0; i < t->curves[0].evalSteps.size(); ++i) {
      const double l = t->curves[0].validation[i], r = t->curves[1].validation[i],
                   c = t->curves[2].validation[i];
      std::snprintf(line, sizeof line, "%.2f,%llu,%d,%.17g,%.17g,%.17g,%.17g\n", t->dropout,
                    static_cast<unsigned long long>(t->seed), t->curves[0].evalSteps[i], l, r, c,
                    std::abs(l - c));
      val << line;
    }
  }
  // Seed 0: the mean over the dropout seeds.
  const auto ln = meanValidation(dropped, 0), rms = meanValidation(dropped, 1),
             cbwc = meanValidation(dropped, 2);
  const auto& steps = dropped.front().curves[0].evalSteps;
  for (size_t i = 0; i < steps.size(); ++i) {
    std::snprintf(line, sizeof line, "%.2f,0,%d,%.17g,%.17g,%.17g,%.17g\n", o.dropout, steps[i],
                  ln[i], rms[i], cbwc[i], std::abs(ln[i] - cbwc[i]));
    val << line;
  }
  std::fprintf(stderr, "wrote %s and %s\n", trainPath.c_str(), valPath.c_str());
}

int run(const Options& o) {
  if (o.dropout <= 0.0) {
    throw foldnorm::Error("training_equivalence: --dropout must be positive (the run without "
                          "dropout is always made)");
  }
  if (o.dropoutSeeds < 1) throw foldnorm::Error("training_equivalence: --seeds must be >= 1");
  at::set_num_threads(o.threads);
  const auto corpus = foldnorm::train::CharCorpus::load(o.corpus, o.valFraction, o.window);
  std::printf("# Training equivalence: LayerNorm vs RMSNorm vs CBWC+RMSNorm\n\n");
  std::printf("corpus %s: %lld bytes, %lld distinct (train %lld, validation %lld)\n",
              o.corpus.c_str(), static_cast<long long>(corpus.size()),
              static_cast<long long>(corpus.vocabSize()),
              static_cast<long long>(corpus.train.numel()),
              static_cast<long long>(corpus.validation.numel()));
  std::printf("model: %lld layers, d_model %lld, %lld heads, context %lld, %s; Adam lr %g, "
              "batch %lld, %d steps, init seed %llu, %d threads\n",
              static_cast<long long>(o.layers), static_cast<long long>(o.dModel),
              static_cast<long long>(o.heads), static_cast<long long>(o.window), o.dtype.c_str(),
              o.learningRate, static_cast<long long>(o.batch), o.steps,
              static_cast<unsigned long long>(o.initSeed), o.threads);

  const int runs = 3 * (1 + o.dropoutSeeds);
  int done = 0;
  const Trio plain = trainTrio(o, corpus, 0.0, 1, done, runs);
  std::vector<Trio> dropped;
  for (int s = 1; s <= o.dropoutSeeds; ++s) {
    dropped.push_back(trainTrio(o, corpus, o.dropout, static_cast<uint64_t>(s), done, runs));
  }
  printNoDropout(o, plain);
  printDropout(o, dropped);
  writeCsv(o, plain, dropped);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"Train a tiny character GPT with LayerNorm, RMSNorm and CBWC+RMSNorm from one "
               "initialization and compare the loss curves"};
  app.add_option("--corpus", o.corpus, "text file (default: from the Debian package fortunes)");
  app.add_option("--steps", o.steps, "optimizer steps per run");
  app.add_option("--batch", o.batch, "sequences per batch");
  app.add_option("--context", o.window, "tokens per sequence");
  app.add_option("--d-model", o.dModel, "model width");
  app.add_option("--heads", o.heads, "attention heads");
  app.add_option("--layers", o.layers, "transformer blocks");
  app.add_option("--dropout", o.dropout, "dropout of the dropout runs");
  app.add_option("--seeds", o.dropoutSeeds, "dropout runs (batch and mask seeds 1..N)");
  app.add_option("--lr", o.learningRate, "Adam learning rate");
  app.add_option("--dtype", o.dtype, "float64 or float32");
  app.add_option("--init-seed", o.initSeed, "seed of the shared initialization");
  app.add_option("--threads", o.threads, "intra-op threads");
  app.add_option("--eval-every", o.evalEvery, "validation interval in steps");
  app.add_option("--eval-windows", o.evalWindows, "validation windows");
  app.add_option("--table-every", o.tableEvery, "table row interval in steps");
  app.add_option("--data-dir", o.dataDir, "where the CSV files go");
  CLI11_PARSE(app, argc, argv);
  try {
    return run(o);
  } catch (const std::exception& e) {
    return foldnorm::analyses::reportFailure("training_equivalence", e);
  }
}
