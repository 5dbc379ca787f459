// Verification of a fold: original vs folded on the example and random inputs, in the model's
// dtype (practical equivalence), the plan in float64 (true equivalence: the verdict), and the
// saved float32 file run in float64 (what a user who checks the file in float64 sees).
#include <torch/cuda.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "foldnorm/common/memory.h"
#include "foldnorm/common/setting_error.h"
#include "foldnorm/torch/model_surgery.h"
#include "foldnorm/fold/fold_support.h"
#include "fold_internal.h"

namespace foldnorm::fold_detail {
namespace {

/// How flips are ranked: the closer margin/errorBound is to (or the further above) 1, the worse.
double badness(const PredictionFlip& f) {
  if (f.errorBound > 0) return f.margin / f.errorBound;
  return f.margin > 0 || std::isnan(f.margin) ? std::numeric_limits<double>::infinity() : 0;
}

}  // namespace

void keepWorst(std::vector<PredictionFlip>& flips, std::size_t keep) {
  std::stable_sort(flips.begin(), flips.end(),
                   [](const auto& x, const auto& y) { return badness(x) > badness(y); });
  if (flips.size() > keep) flips.resize(keep);
}

/// Rows of each float32 output whose argmax flipped, and whether float32 rounding explains each
/// (PredictionFlip in fold.h gives the bound and why it holds for every rounding flip).
/// `a`, `b`: original and folded in float32; `z`: the original in float64; `s`: the saved file
/// in float64.
void checkPredictions(int run, const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b,
                      const std::vector<at::Tensor>& z, const std::vector<at::Tensor>& s, double savedBound,
                      std::vector<OutputCheck>& checks, std::vector<PredictionFlip>& worst) {
  for (std::size_t i = 0; i < a.size(); ++i) {
    auto a32 = a[i].detach().to(at::kCPU);
    if (!hasPredictions(a32)) continue;
    const auto n = a32.size(-1);
    auto rowsOf = [n](const at::Tensor& t) { return t.detach().to(at::kCPU).reshape({-1, n}); };
    auto A = rowsOf(a32), B = rowsOf(b[i]);
    auto& c = outputCheckFor(checks, "float32", i, a32);
    c.rows += A.size(0);
    auto flipped = (A.argmax(1) != B.argmax(1)).nonzero().flatten();
    if (flipped.numel() == 0) continue;
    auto pick = [&](const at::Tensor& rows) { return rows.index_select(0, flipped).to(at::kDouble); };
    auto Z = pick(rowsOf(z[i])), S = pick(rowsOf(s[i]));
    auto top2 = std::get<0>(Z.topk(2, 1));
    auto margin = top2.select(1, 0) - top2.select(1, 1);
    auto savedCap = savedBound * rowsOf(z[i]).abs().max().item<double>();
    auto bound = 2 * ((pick(A) - Z).abs().amax(1) + (pick(B) - S).abs().amax(1) +
                      (S - Z).abs().amax(1).clamp_max(savedCap));
    auto rows = flipped.accessor<int64_t, 1>();
    auto m = margin.accessor<double, 1>();
    auto e = bound.accessor<double, 1>();
    for (int64_t k = 0; k < flipped.numel(); ++k) {
      PredictionFlip f{i, run, rows[k], m[k], e[k]};
      ++c.flippedRows;
      if (!f.withinRounding()) ++c.unexplainedFlips;
      worst.push_back(f);
      if (worst.size() > 64 * kWorstFlips) keepWorst(worst, kWorstFlips);
    }
  }
}

namespace {

/// Whether `kept` are outputs of the shapes and dtypes `run` has, one for one.
bool sameLayout(const std::vector<at::Tensor>& kept, const std::vector<at::Tensor>& run) {
  if (kept.size() != run.size()) return false;
  for (std::size_t i = 0; i < kept.size(); ++i)
    if (!kept[i].defined() || !run[i].defined() || kept[i].sizes() != run[i].sizes() ||
        kept[i].scalar_type() != run[i].scalar_type())
      return false;
  return true;
}

std::vector<at::Tensor> onCpu(const std::vector<at::Tensor>& ts) {
  std::vector<at::Tensor> out;
  for (const auto& t : ts) out.push_back(t.detach().to(at::kCPU));
  return out;
}

const void* storageOf(const at::Tensor& t) {
  return t.has_storage() ? static_cast<const void*>(t.storage().unsafeGetStorageImpl()) : nullptr;
}

/// The reads of the float64 plan made from the fold itself: each read of a tensor the fold
/// centred reads the original centred in float64 at that use. Empty where that cannot stand for
/// the plan: a centred storage the folded model (or graph) also holds through another view.
ReadReplacement centeredReads(const jit::Module& folded, const std::shared_ptr<jit::Graph>& foldedGraph,
                              const std::vector<CenteredTensor>& centered) {
  std::map<const void*, const CenteredTensor*> byStorage;
  for (const auto& c : centered)
    if (!storageOf(c.centered) || !byStorage.emplace(storageOf(c.centered), &c).second) return {};
  auto sameView = [](const at::Tensor& a, const at::Tensor& b) {
    return a.storage_offset() == b.storage_offset() && a.sizes() == b.sizes() && a.strides() == b.strides();
  };
  auto matches = [&](const at::Tensor& t) {
    auto it = byStorage.find(storageOf(t));
    return it == byStorage.end() || sameView(t, it->second->centered);
  };
  for (const auto& a : folded.named_attributes(/*recurse=*/true))
    if (a.value.isTensor() && a.value.toTensor().defined() && !matches(a.value.toTensor())) return {};
  for (auto* n : foldedGraph->nodes())
    if (n->kind() == c10::prim::Constant && n->hasAttribute(c10::attr::value) &&
        n->kindOf(c10::attr::value) == jit::AttributeKind::t && !matches(n->t(c10::attr::value)))
      return {};
  return [byStorage](jit::Graph& graph, const at::Tensor& t) -> jit::Value* {
    auto it = byStorage.find(storageOf(t));
    if (it == byStorage.end()) return nullptr;
    return insertCentered64(graph, it->second->original, it->second->actions, it->second->scales);
  };
}

}  // namespace

Verification verify(const ImportedModel& model, const AnalysisResult& analysis,
                    const jit::Module& folded, const std::shared_ptr<jit::Graph>& foldedGraph,
                    const FoldOptions& options, const std::vector<CenteredTensor>* centered, VerificationRuns* keep) {
  auto progress = [&](const std::string& m) { if (options.progress) options.progress(m); };
  const auto& tm = *model.torch;
  auto setup = startVerification(model, analysis, &tm.exampleInputs, options);
  auto& v = setup.verification;
  const auto device = setup.device;
  const auto& inputSets = setup.inputSets;
  if (keep) {
    keep->device = device;
    keep->inputSets = inputSets;
    keep->tolerance = savedBoundFor(1e-5, v.modelDtype);
    keep->progress = options.progress;
  }

  // float32 (the model's own dtype): original vs folded.
  // On a GPU: copies on the device, their graphs retargeted to it (a trace's constants name the
  // CPU: device constants, `device=None` factories, tensor constants).
  jit::Module original32 = tm.module;
  jit::Module folded32 = folded;
  auto original32Graph = tm.graph;
  auto folded32Graph = foldedGraph;
  if (device.is_cuda()) {
    const RetargetOptions onDevice{std::nullopt, device};
    original32 = loadModule(serializeModule(tm.module));
    retargetAttributes(original32, onDevice);
    original32Graph = tm.graph->copy();
    retargetGraph(original32Graph, onDevice);
    folded32 = loadModule(serializeModule(folded));
    retargetAttributes(folded32, onDevice);
    folded32Graph = inlinedForward(folded32);
    retargetGraph(folded32Graph, onDevice);
  }

  // float64. The original and the saved file run on their own float32 weights, upcast at each
  // read (exact, and no copy of the weights). The plan needs its centering unrounded: on the
  // CPU, with what the fold centred at hand, it is the folded graph reading each centred tensor
  // as its original centred in float64 at that read (one such tensor exists at a time);
  // otherwise the plan is applied to a clone of the original that shares every tensor but the
  // planned ones, which get float64 copies of their own (centering writes into them).
  progress("preparing the float64 runs");
  const RetargetOptions float64{at::kDouble, device};
  auto original64Graph = convertedReads(tm.module, tm.graph, float64);
  auto saved64Graph = convertedReads(folded, foldedGraph, float64);
  const auto perUse = centered && !device.is_cuda() ? centeredReads(folded, foldedGraph, *centered) : ReadReplacement();
  jit::Module plan64 = folded;
  auto planGraph = foldedGraph;
  if (!perUse) {
    std::vector<at::Tensor> planned;
    for (const auto& plan : analysis.plan) planned.push_back(tm.parameterTensors.at(plan.param));
    plan64 = cloneSharing(tm.module, planned, {at::kDouble, c10::kCPU});
    planGraph = inlineForwardInPlace(plan64);
    // The plan maps onto the graph by node order: apply it before retargeting inserts constants.
    applyPlan(plan64, planGraph, model, analysis, options, nullptr);
  }
  auto plan64Graph = convertedReads(plan64, planGraph, float64, perUse);

  for (std::size_t r = 0; r < inputSets.size(); ++r) {
    // One line per kind of run: the memory table (fold_memory.h) times each as a step.
    // Each run starts on a trimmed heap: the last run's freed activations are not kept under it.
    auto say = [&](const char* what) {
      releaseFreedHeap();
      progress(strf("verifying on input set %zu/%zu: %s", r + 1, inputSets.size(), what));
    };
    say("float32 (original, folded)");
    auto in32 = retargetInputs(inputSets[r], {std::nullopt, device});
    auto b = runGraph(folded32, folded32Graph, in32);
    // The original in float32 on the example inputs is the run the import recorded shapes with
    // (the same graph on the same inputs, its outputs kept): not run a second time.
    auto a = r == 0 && !device.is_cuda() && sameLayout(tm.exampleOutputs, b) ? tm.exampleOutputs
                                                                             : runGraph(original32, original32Graph, in32);
    compareOutputs(a, b, "float32", v.checks);
    say("float64 (original, plan)");
    auto in64 = retargetInputs(inputSets[r], float64);
    auto z = runGraph(tm.module, original64Graph, in64);
    compareOutputs(z, runGraph(plan64, plan64Graph, in64), "float64", v.checks);
    say("float64 (saved file)");
    auto s = runGraph(folded, saved64Graph, in64);
    compareOutputs(z, s, "saved-float64", v.checks);
    if (keep) {
      keep->folded.push_back(onCpu(b));
      keep->original64.push_back(onCpu(z));
    }
    checkPredictions(static_cast<int>(r), a, b, z, s, v.savedFloat64Bound, v.checks, v.worstFlips);
  }
  keepWorst(v.worstFlips, kWorstFlips);
  summarizeChecks(v, options.float64Tolerance, v.savedFloat64Bound);
  return setup.verification;
}

}  // namespace foldnorm::fold_detail
