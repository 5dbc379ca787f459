// `foldnorm bench`: a model end to end, original against folded, in one run.
//
// Either kind of model: a TorchScript file runs on LibTorch's graph executor (runner
// "torchscript"), a torch.export program (.pt2) on foldnorm's interpreter over the dispatcher
// (interpreter/export_interpreter.h, runner "interpreter": each node's op called boxed, so its times are
// the interpreter's, with its per-node overhead in both models alike, not those of torch.compile or
// AOTInductor). benchModel() takes an ImportedModel of either kind (what the GUI calls).
//
// The bench times a model that is already imported, analysed and folded (the GUI holds one): a
// fold that was not verified, or is not float64-equivalent, is refused before anything is timed.
// The CLI's path wrapper imports, analyses and folds (foldForBench / foldExportForBench: verified in
// float32 and float64) first. Then both models are loaded afresh (forward inlined, the same graph-executor
// settings), optionally cast to bfloat16/float16 (parameters, float tensor constants and the
// float32 dtype constants a trace bakes in: torch/model_surgery.h), and timed per sequence length:
//   - warm-up first: the profiling executor profiles on the first run and optimises on the
//     second; more runs settle allocator growth and, on CUDA, lazy module loading and cuBLAS
//     heuristics. A new sequence length is a new shape, so every length is warmed up again.
//   - interleaved A/B per round, the order alternating (AB, BA, ...) so drift hits both alike;
//   - CPU: wall clock around a synchronous forward. CUDA: events on the current stream around
//     the forward, then a synchronize; no L2 flush (a model's layers see warm caches);
//   - c10::InferenceMode around everything.
// Per length it reports median and p10-p90 of each model, tokens/s (images/s for image models),
// and the speed-up as the per-round ratio original/folded of back-to-back runs (median and
// p10-p90), with a bootstrap 95% interval of its median that says "faster", "slower" or "within
// noise" (a drift in load moves both runs of a round alike, so the ratio cancels most of it).
//
// The sequence dimension: the last dimension of every integer (or bool) input, which is where
// token ids and attention masks keep it. A model with no such input (an image model) has no
// sequence length: sequence lengths do not apply and its spec shape is timed (the report says so).
//
// Process-wide settings belong to the program: the bench sets the intra-op thread count only for
// its own run (restored after), and keeps large buffers on the heap only where the program asked
// for it (keepLargeBuffersOnHeap: the CLI does, the GUI does not). Bad settings throw
// SettingError naming the setting ("reps"), never a flag.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

#include "foldnorm/analysis/analysis.h"
#include "foldnorm/fold/fold.h"
#include "foldnorm/import/torchscript.h"

namespace foldnorm {
struct FoldedExport;  // fold/fold_export.h (torch-facing: this header stays torch-free for the GUI)
}

namespace foldnorm::bench {

struct BenchModelOptions {
  std::string device = "cpu";     // cpu | cuda
  std::string dtype = "float32";  // float32 | bfloat16 | float16 (timing dtype)
  std::vector<int64_t> seqs;      // empty: the spec's own sequence length
  int64_t batch = 0;              // 0: the spec's own batch (dim 0)
  int warmup = 10;                // untimed forwards of each model per sequence length
  int reps = 20;                  // timed rounds per length (at least); each runs both models once
  // > 0: after `reps` rounds, keep timing rounds until the length's timed rounds have taken this
  // many seconds of wall clock (so cheap lengths get more rounds; the count depends on the time a
  // round takes, never on the ratios seen). 0: exactly `reps` rounds.
  double caseSeconds = 0;
  int threads = 0;                // CPU intra-op threads for this run; 0: leave the process's
  int verifyRandomInputs = 2;     // random input sets for the fold verification
  bool fuseAddNorm = true;        // fold with residual add + norm fused (FoldOptions::fuseAddNorm)
  // Null fold: also time a second, separately loaded copy of the original in every round, so the
  // report shows what the bench reads between two identical models (its own noise floor, layout
  // and allocation included) next to what it reads for the fold. TorchScript models only.
  bool nullControl = false;
  // Parameter layouts per length (TorchScript models): 1 keeps each model where its load put it;
  // N > 1 moves every parameter storage of every model to a fresh allocation at a drawn offset in
  // its page before each of N equal shares of the length's rounds (bench_model_layout.cpp), so a
  // difference of layouts is not read as the fold's, and the interval resamples the layouts too.
  int layouts = 1;
  // What a folded LN becomes: "foldnorm" (our fused op: the fast one on CPU, docs/kernels.md) or
  // "aten" (aten::rms_norm + bias add, unfused). The same for both kinds of model.
  std::string rmsOp = "foldnorm";
  // The analysis of the path wrapper (AnalysisOptions): the two folds beyond the paper.
  bool scaleAbsorb = true;
  bool insertCentering = true;
  uint64_t seed = 0;
  std::vector<std::string> inputSpecs;  // input spec texts; empty: the model's embedded spec
};

/// Throws SettingError (naming the option) for options no bench can run: an unknown device or
/// dtype, cuda where LibTorch sees no CUDA device, non-positive lengths, too few warm-ups or
/// rounds. Every runner checks first; a program that builds models before benching (e2e_speed)
/// calls it up front so a bad option costs no model build.
void checkOptions(const BenchModelOptions& options);

/// Median and p10-p90 of a set of samples.
struct Spread {
  double median = 0;
  double p10 = 0;
  double p90 = 0;
};

/// The per-round speed-ups of back-to-back runs (original / folded) summed up: their median with
/// a percentile-bootstrap 95% interval of that median, and what the interval decides.
struct PairedRatio {
  double median = 0;
  double low = 0;            // 2.5% point of the bootstrapped medians
  double high = 0;           // 97.5% point
  int rounds = 0;
  std::string verdict;       // "faster" (low > 1), "slower" (high < 1), "within noise", or
                             // "too few rounds" (under 10: no verdict)
};

/// The PairedRatio of `ratios` (original / folded per round), `resamples` bootstrap medians drawn
/// with a generator seeded by `seed` (the same ratios and seed give the same interval). Needs at
/// least two ratios (std::invalid_argument otherwise).
PairedRatio pairedRatio(const std::vector<double>& ratios, uint64_t seed, int resamples = 4000);

/// The same for rounds timed under several parameter layouts (one group of ratios per layout): a
/// two-stage bootstrap draws the layouts with replacement, then rounds within each drawn layout, so
/// the interval also holds the spread between layouts. One group is pairedRatio(ratios) exactly.
PairedRatio pairedRatioByLayout(const std::vector<std::vector<double>>& ratiosByLayout, uint64_t seed,
                        int resamples = 4000);

struct ModelBenchCase {
  int64_t seq = 0;                       // 0 when the model has no sequence dimension
  std::vector<std::string> inputShapes;  // input specs as run
  int64_t items = 0;                     // tokens (batch x seq) or images per forward
  std::string skipped;                   // non-empty: why this length was not timed
  Spread originalMs;
  Spread foldedMs;
  Spread speedup;                        // per-round original / folded
  PairedRatio paired;                    // the same ratios: median, bootstrap 95% interval, verdict
  // With BenchModelOptions::nullControl: the second copy of the original, timed in the same rounds,
  // and the per-round original / copy ratios (rounds == 0: no control ran).
  Spread controlMs;
  PairedRatio control;
  double originalItemsPerSecond = 0;     // items / median
  double foldedItemsPerSecond = 0;
};

struct ModelBenchReport {
  std::string model;
  std::string device;
  std::string dtype;
  std::string torchVersion;
  std::string cpuKernelIsa;
  int threads = 0;
  int warmup = 0;
  int reps = 0;
  double caseSeconds = 0;   // BenchModelOptions::caseSeconds (0: every length ran exactly reps rounds)
  int layouts = 1;          // BenchModelOptions::layouts as run (1: each model where its load put it)
  std::string itemUnit;     // "tokens" | "images"
  bool seqApplies = true;   // false: no integer input, the spec shape was timed
  std::string seqNote;      // how the sequence dimension was chosen (or why it does not apply)
  std::string runner;       // "torchscript" (graph executor) | "interpreter" (.pt2: foldnorm's interpreter)
  std::string executor;     // how both models ran: graph-executor settings, or the interpreter
  std::string rmsOp;        // what the folded LNs became: "foldnorm" | "aten"
  bool largeBuffersOnHeap = false;  // keepLargeBuffersOnHeap() was called (else glibc mmaps them)
  bool hugePages = false;           // useHugePages() was called (else 4 KiB pages: a load's placement varies)
  std::string nullControlSkipped;   // non-empty: the null fold was asked for but not run, and why
  std::string layoutsSkipped;       // non-empty: several layouts were asked for, 1 was run, and why
  // Bytes of the import's and the fold's tensors freed before timing (the CLI's path owns both and
  // times fresh copies: GPT-2 XL's null fold fits beside its two copies only so); 0 where the host
  // keeps them (benchModel, the GUI).
  int64_t releasedBytes = 0;
  int foldedLayerNorms = 0;
  int keptLayerNorms = 0;
  int fusedAddNorms = 0;    // residual adds fused into foldnorm::add_rms_norm by the fold
  double worstRelative32 = 0;  // fold verification, float32
  double worstRelative64 = 0;  // fold verification, float64
  bool predictionsUnchanged = true;
  double loadBefore = -1;   // 1-minute load average (CPU runs; -1 if unknown)
  double loadAfter = -1;
  std::vector<ModelBenchCase> cases;
};

/// Folds `model` as the bench needs it: verified in float32 and float64 on the CPU, with
/// options.verifyRandomInputs random input sets. Throws foldnorm::Error when no LayerNorm folds
/// (original and folded would be the same model) and SettingError for bad options.
FoldedModel foldForBench(const ImportedModel& model, const AnalysisResult& analysis,
                         const BenchModelOptions& options, std::ostream& progress);

/// Times `model` against `folded` (its fold) per sequence length. Throws foldnorm::Error for a
/// fold that folded nothing, was not verified or failed its float64 verification, SettingError
/// for bad options. A sequence length the model cannot run (e.g. longer than its position table)
/// is reported as skipped with the model's error, not thrown. Progress lines go to `progress`.
ModelBenchReport runModelBench(const ImportedModel& model, const FoldedModel& folded,
                               const BenchModelOptions& options, std::ostream& progress);

/// foldForBench for a .pt2 (foldExport with options.rmsOp), verified by the interpreter in float32
/// and float64. Throws as foldForBench does; std::logic_error for a TorchScript model.
FoldedExport foldExportForBench(const ImportedModel& model, const AnalysisResult& analysis,
                                const BenchModelOptions& options, std::ostream& progress);

/// runModelBench for a .pt2: original and folded programs timed by the interpreter. A length or
/// batch the program's signature does not allow (a static size, or outside a dynamic dimension's
/// range) is reported as skipped with the size it was exported with.
ModelBenchReport runModelBench(const ImportedModel& model, const FoldedExport& folded,
                               const BenchModelOptions& options, std::ostream& progress);

/// Either kind of model, already imported and analysed: folds as its kind needs (verified), then
/// times original against folded. The one entry a host holding an ImportedModel calls.
ModelBenchReport benchModel(const ImportedModel& model, const AnalysisResult& analysis,
                            const BenchModelOptions& options, std::ostream& progress);

/// The CLI's path: imports `modelPath` by content (.pt or .pt2; with options.inputSpecs, or its
/// embedded spec), analyses it (options.scaleAbsorb, insertCentering), then benchModel. It owns the
/// import and the fold, so for a TorchScript model it frees their tensors as soon as the timed
/// copies no longer need them (the import's before the copies load, the fold's once its copy has
/// loaded; report.releasedBytes): the peak is then the timed copies, not two more beside them.
ModelBenchReport runModelBench(const std::string& modelPath, const BenchModelOptions& options,
                               std::ostream& progress);

/// Keeps buffers of 32 MiB and more on the heap for the rest of the process (glibc would mmap and
/// page-fault a model's large outputs afresh on every forward, timing page faults rather than
/// the model). For programs that time (the CLI, analyses); a host like the GUI keeps its own.
void keepLargeBuffersOnHeap();

/// Puts LibTorch's CPU buffers of 2 MiB and more on transparent huge pages for the rest of the
/// process (THP_MEM_ALLOC_ENABLE=1: every CPU allocation page-aligned, the large ones
/// madvise(MADV_HUGEPAGE)), so each model's weights lie on 2 MiB pages wherever a load puts them.
/// With 4 KiB pages two loads of one model differ by a few percent (where each weight's pages
/// land), which a bench would read as the fold's; with huge pages five loads of OPT-125m agreed
/// within +-0.5%. For programs that time, called first in main: LibTorch reads the setting once,
/// at its first CPU allocation. Throws foldnorm::Error when it was read before, or when the kernel
/// has transparent huge pages off.
void useHugePages();

/// Why the null fold's third copy of a model of `modelBytes` is not loaded with `availableBytes`
/// left (/proc/meminfo's MemAvailable after the two timed copies; < 0: unknown, then it is);
/// empty: it fits with a quarter to spare for the forwards' activations. A CPU bench without room
/// runs without its null fold and says so (ModelBenchReport::nullControlSkipped).
std::string nullControlRefusal(int64_t modelBytes, int64_t availableBytes);

/// The same for moving parameters between layouts (BenchModelOptions::layouts > 1) of timed models
/// of `modelsBytes` together: empty where it fits, else why the bench keeps 1 layout
/// (ModelBenchReport::layoutsSkipped).
std::string layoutsRefusal(int64_t modelsBytes, int64_t availableBytes);

/// Whether LibTorch sees a CUDA device (torch::cuda::is_available()): lets code that includes no
/// torch header (the GUI's device choice) offer `device = "cuda"` only where it can run.
bool cudaAvailable();

nlohmann::json toJson(const ModelBenchReport& report);

/// Plain text: a header with the settings and the verification, then one row per length.
std::string formatModelBenchTable(const ModelBenchReport& report);

}  // namespace foldnorm::bench
