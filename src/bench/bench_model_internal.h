// What the two runners of `foldnorm bench` share (bench_model.cpp: TorchScript on the graph
// executor; bench_export.cpp: .pt2 on the interpreter): the option check, the report header and
// the timing loop. Only the way a model is bound to a case's inputs differs between them.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <functional>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "foldnorm/bench/bench_model.h"

namespace torch::jit {
struct Module;
}

namespace foldnorm::bench::detail {

at::ScalarType parseDtype(const std::string& name);
RmsOp rmsOpOf(const BenchModelOptions& options);
/// The FoldOptions of a bench's fold: verified on the CPU with options.verifyRandomInputs sets.
FoldOptions foldOptionsFor(const BenchModelOptions& options, std::ostream& progress);
/// Throws foldnorm::Error when nothing folds: original and folded would be one model.
void requireSomethingFolds(const ImportedModel& model, const AnalysisResult& analysis);

/// The intra-op thread count for one bench, restored afterwards: the host's own setting (the
/// GUI's) is not changed behind its back.
class ScopedThreads {
 public:
  explicit ScopedThreads(int threads);
  ~ScopedThreads();
  ScopedThreads(const ScopedThreads&) = delete;
  ScopedThreads& operator=(const ScopedThreads&) = delete;

 private:
  int previous_;
  bool changed_ = false;
};

/// One model's forward with one case's inputs bound.
using Forward = std::function<void()>;
/// Binds a model to a case's inputs (already in the timing dtype, on the timing device).
using Bind = std::function<Forward(const std::vector<at::Tensor>&)>;

struct Runners {
  Bind original;
  Bind folded;
  /// Non-empty: why the model cannot run inputs of these specs (checked before any forward).
  std::function<std::string(const std::vector<InputSpec>&)> refuse;
  /// Set: a second copy of the original, timed in every round as a null fold (nullControl).
  Bind control;
  /// Set: gives every model a new parameter layout (BenchModelOptions::layouts > 1), called before
  /// each layout's share of a length's rounds.
  std::function<void()> relayout;
};

/// The report's header from the fold it times: refuses a fold that folded nothing, was not
/// verified or is not float64-equivalent; says "fold verified: ..." on `progress`. Call with the
/// bench's ScopedThreads in place (the thread count is read here).
ModelBenchReport startReport(const ImportedModel& model, const FoldReport& fold, const BenchModelOptions& options,
                             const std::string& runner, const std::string& executor, std::ostream& progress);

/// Chooses the sequence lengths (report.seqApplies, seqNote, itemUnit) and times every case:
/// warm-up, interleaved rounds in alternating order, medians and p10-p90, per length.
void timeCases(ModelBenchReport& report, const ImportedModel& model, const Runners& runners,
               const BenchModelOptions& options, std::ostream& progress);

c10::Device deviceOf(const BenchModelOptions& options);

/// Whether useHugePages() was called (LibTorch's CPU allocations are then page-aligned).
bool hugePagesInUse();

/// Moves every tensor attribute's storage of `module` (parameters, buffers, recursively) to a fresh
/// allocation at an offset in its 4 KiB page drawn from `rng` (64-byte steps; the page start with huge
/// pages on, as LibTorch aligns then); tied tensors stay tied,
/// values are unchanged bit for bit (bench_model_layout.cpp).
void relocateParameters(torch::jit::Module& module, std::mt19937_64& rng);

}  // namespace foldnorm::bench::detail
