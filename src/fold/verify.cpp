// Verification of a fold: original vs folded on the example and random inputs, in the model's
// dtype (practical equivalence) and on float64 copies (true equivalence).
#include <torch/cuda.h>

#include "foldnorm/common/setting_error.h"
#include "foldnorm/torch/model_surgery.h"
#include "fold_internal.h"

namespace foldnorm::fold_detail {
namespace {

void compare(const std::vector<at::Tensor>& original, const std::vector<at::Tensor>& folded,
             const std::string& dtype, std::vector<OutputCheck>& checks) {
  if (original.size() != folded.size())
    throw std::logic_error("fold: the folded model returns a different number of outputs");
  for (std::size_t i = 0; i < original.size(); ++i) {
    auto a = original[i].detach().to(at::kCPU), b = folded[i].detach().to(at::kCPU);
    auto it = std::find_if(checks.begin(), checks.end(),
                           [&](const auto& c) { return c.dtype == dtype && c.output == i; });
    if (it == checks.end()) {
      OutputCheck c;
      c.dtype = dtype;
      c.output = i;
      c.shape = formatShape(a.sizes().vec()) + " " + dtypeName(a.scalar_type());
      checks.push_back(c);
      it = checks.end() - 1;
    }
    if (!a.is_floating_point()) {
      if (!a.equal(b)) it->maxRel = it->maxAbs = std::numeric_limits<double>::infinity();
      continue;
    }
    auto ad = a.to(at::kDouble), bd = b.to(at::kDouble);
    double maxAbs = (ad - bd).abs().max().item<double>();
    double scale = ad.abs().max().item<double>();
    double rel = maxAbs / std::max(scale, std::numeric_limits<double>::min());
    if (!std::isfinite(maxAbs)) rel = maxAbs = std::numeric_limits<double>::infinity();
    it->maxAbs = std::max(it->maxAbs, maxAbs);
    it->maxRel = std::max(it->maxRel, rel);
    if (a.dim() >= 1 && a.size(-1) > 1 && a.numel() > 0) {
      it->hasPredictions = true;
      double agree = (a.argmax(-1) == b.argmax(-1)).to(at::kDouble).mean().item<double>();
      it->argmaxAgreement = std::min(it->argmaxAgreement, agree);
    }
  }
}

}  // namespace

Verification verify(const ImportedModel& model, const AnalysisResult& analysis,
                    const jit::Module& folded, const std::shared_ptr<jit::Graph>& foldedGraph,
                    const FoldOptions& options) {
  Verification v;
  v.ran = true;
  v.device = options.device;
  c10::Device device(options.device == "cuda" ? c10::kCUDA : c10::kCPU);
  if (device.is_cuda() && !torch::cuda::is_available())
    throw SettingError("device", "no CUDA device is available here to verify on");
  auto progress = [&](const std::string& m) { if (options.progress) options.progress(m); };
  const auto& tm = *model.torch;

  std::vector<std::vector<at::Tensor>> inputSets{tm.exampleInputs};
  for (int i = 1; i <= options.randomInputs; ++i)
    inputSets.push_back(makeInputs(model.inputSpecs, options.seed + 1000 + i));
  v.runs = static_cast<int>(inputSets.size());

  // float32 (the model's own dtype): original vs folded.
  jit::Module original32 = tm.module;
  jit::Module folded32 = folded;
  if (device.is_cuda()) {
    original32 = loadModule(serializeModule(tm.module));
    original32.to(device);
    folded32 = loadModule(serializeModule(folded));
    folded32.to(device);
  }
  auto folded32Graph = device.is_cuda() ? inlinedForward(folded32) : foldedGraph;
  for (std::size_t r = 0; r < inputSets.size(); ++r) {
    progress(strf("verifying in the model's dtype: input set %zu/%zu", r + 1, inputSets.size()));
    auto in = retargetInputs(inputSets[r], {std::nullopt, device});
    compare(runGraph(original32, tm.graph, in), runGraph(folded32, folded32Graph, in), "float32", v.checks);
  }

  // float64: the plan applied to a float64 copy of the original.
  progress("verifying in float64 (copies of both models)");
  const RetargetOptions float64{at::kDouble, device};
  auto original64 = freshCopy(tm);
  auto graph64 = inlineForwardInPlace(original64);
  auto folded64 = freshCopy(tm);
  auto foldedGraph64 = inlineForwardInPlace(folded64);
  retargetAttributes(original64, float64);
  retargetAttributes(folded64, float64);
  // The plan maps onto the graph by node order: apply it before retargeting inserts constants.
  applyPlan(folded64, foldedGraph64, model, analysis, options.rmsOp, nullptr);
  retargetGraph(graph64, float64);
  retargetGraph(foldedGraph64, float64);
  for (std::size_t r = 0; r < inputSets.size(); ++r) {
    progress(strf("verifying in float64: input set %zu/%zu", r + 1, inputSets.size()));
    auto in = retargetInputs(inputSets[r], float64);
    compare(runGraph(original64, graph64, in), runGraph(folded64, foldedGraph64, in), "float64", v.checks);
  }
  for (const auto& c : v.checks) {
    if (c.dtype == "float64") {
      v.worstRelative64 = std::max(v.worstRelative64, c.maxRel);
      if (!(c.maxRel <= options.float64Tolerance)) v.float64Equivalent = false;
    } else {
      v.worstRelative32 = std::max(v.worstRelative32, c.maxRel);
      if (c.hasPredictions && c.argmaxAgreement < 1) v.predictionsUnchanged = false;
    }
  }
  return v;
}

}  // namespace foldnorm::fold_detail
