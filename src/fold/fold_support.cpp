// What the TorchScript and the .pt2 fold share (see fold/fold_support.h).
#include "foldnorm/fold/fold_support.h"

#include <ATen/ATen.h>
#include <torch/cuda.h>
#include <torch/csrc/jit/ir/ir.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

#include "foldnorm/common/dtype.h"
#include "foldnorm/common/error.h"
#include "foldnorm/common/setting_error.h"
#include "foldnorm/torch/torch_model.h"

namespace foldnorm {

std::vector<at::Tensor> centeringScales(const std::vector<CenterAction>& actions, const ScaleLookup& scaleOf) {
  std::vector<at::Tensor> scales;
  for (const auto& a : actions) {
    if (a.scale == kNone) {
      scales.emplace_back();
      continue;
    }
    if (!scaleOf) throw Error("this fold does not execute scaled centerings (scale absorption): analyse without it");
    scales.push_back(scaleOf(a.scale).detach());
  }
  return scales;
}

namespace {

/// `t` in float64 (a copy of its own, also when `t` is float64 already) centred by `actions`,
/// each written into that copy in place: one float64 tensor of t's size, no more.
at::Tensor centered64(const at::Tensor& t, const std::vector<CenterAction>& actions,
                      const std::vector<at::Tensor>& scales) {
  at::NoGradGuard noGrad;
  auto x = t.detach().to(at::kDouble, /*non_blocking=*/false, /*copy=*/true);
  for (std::size_t i = 0; i < actions.size(); ++i) {
    const auto& a = actions[i];
    const auto axis = a.axis < 0 ? a.axis + x.dim() : a.axis;
    auto n = x.size(axis);
    if (scales[i].defined()) {
      // x[c] -= mean_k(s_k x[k]) / s_c along the axis: s * x becomes mean-zero (docs/method.md section 7).
      auto s = scales[i].to(at::kDouble).reshape({-1});
      if (s.numel() != n) throw std::logic_error("fold: the scale does not match the centered axis");
      auto moved = x.movedim(axis, -1);
      moved.sub_((moved * s).mean(-1, /*keepdim=*/true) / s);
      continue;
    }
    if (n % a.groups != 0) throw std::logic_error("fold: groups do not divide the axis");
    // Contiguous along the axis (a copy when it is not the last: x is then that copy).
    auto moved = x.movedim(axis, -1).contiguous();
    auto grouped = moved.view({-1, a.groups, n / a.groups});
    grouped.sub_(grouped.mean(-1, /*keepdim=*/true));
    x = moved.movedim(-1, axis);
  }
  return x;
}

/// The op the float64 check of a fold runs at each read of a centred tensor (insertCentered64):
/// actions as lists, scale_index[i] indexing `scales` (-1: unscaled).
at::Tensor centered64Op(const at::Tensor& x, c10::IntArrayRef axes, c10::IntArrayRef groups, at::TensorList scales,
                        c10::IntArrayRef scaleIndex) {
  if (axes.size() != groups.size() || axes.size() != scaleIndex.size())
    throw std::logic_error("foldnorm_check::centered64: the action lists differ in length");
  std::vector<CenterAction> actions;
  std::vector<at::Tensor> scaleOfAction;
  for (std::size_t i = 0; i < axes.size(); ++i) {
    CenterAction a;
    a.axis = axes[i];
    a.groups = groups[i];
    actions.push_back(a);
    scaleOfAction.push_back(scaleIndex[i] < 0 ? at::Tensor() : scales.at(static_cast<std::size_t>(scaleIndex[i])));
  }
  return centered64(x, actions, scaleOfAction);
}

/// Rows of this many float64 bytes at a time (centeredCopy): small against any model worth
/// measuring, large enough that the per-chunk calls cost nothing.
constexpr int64_t kChunkBytes = 16 << 20;

}  // namespace

TORCH_LIBRARY(foldnorm_check, m) {
  // Only the verification's own graphs call it (never a saved model): the float64 plan of a
  // fold, centred at each read from the original tensor (fold_support.h, insertCentered64).
  m.def("centered64(Tensor x, int[] axes, int[] groups, Tensor[] scales, int[] scale_index) -> Tensor",
        &centered64Op);
}

at::Tensor centeredCopy(const at::Tensor& t, const std::vector<CenterAction>& actions, const ScaleLookup& scaleOf) {
  at::NoGradGuard noGrad;
  const auto src = t.detach();
  const auto scales = centeringScales(actions, scaleOf);
  // The slices along a dim no action centres along are centred independently: a float64 copy
  // of a few rows at a time instead of the whole tensor (an embedding of GPT-2 medium is 0.4 GB
  // in float64). The largest such dim.
  int64_t along = -1;
  for (int64_t d = 0; d < src.dim(); ++d) {
    bool centred = false;
    for (const auto& a : actions) centred = centred || (a.axis < 0 ? a.axis + src.dim() : a.axis) == d;
    if (!centred && (along < 0 || src.size(d) > src.size(along))) along = d;
  }
  auto out = at::empty(src.sizes(), src.options().memory_format(at::MemoryFormat::Contiguous));
  const int64_t slice = along < 0 || src.size(along) == 0 ? 0 : src.numel() / src.size(along) * 8;
  const int64_t step = slice > 0 ? std::max<int64_t>(1, kChunkBytes / slice) : 0;
  if (along < 0 || step == 0 || step >= src.size(along)) {
    out.copy_(centered64(src, actions, scales));  // rounds once, to t's dtype
    return out;
  }
  for (int64_t i = 0; i < src.size(along); i += step) {
    const auto n = std::min(step, src.size(along) - i);
    out.narrow(along, i, n).copy_(centered64(src.narrow(along, i, n), actions, scales));
  }
  return out;
}

torch::jit::Value* insertCentered64(torch::jit::Graph& graph, const at::Tensor& t,
                                    const std::vector<CenterAction>& actions, const std::vector<at::Tensor>& scales) {
  auto constant = [&](const at::Tensor& value) {
    auto* node = graph.create(c10::prim::Constant);
    const auto shared = value.detach();  // shares the storage: no copy
    node->t_(c10::attr::value, shared);
    node->output()->inferTypeFrom(shared);
    return graph.insertNode(node)->output();
  };
  std::vector<int64_t> axes, groups, scaleIndex;
  std::vector<torch::jit::Value*> scaleValues;
  for (std::size_t i = 0; i < actions.size(); ++i) {
    axes.push_back(actions[i].axis);
    groups.push_back(actions[i].groups);
    scaleIndex.push_back(scales.at(i).defined() ? static_cast<int64_t>(scaleValues.size()) : -1);
    if (scales[i].defined()) scaleValues.push_back(constant(scales[i]));
  }
  auto* list = graph.insertNode(graph.createList(c10::TensorType::get(), scaleValues))->output();
  return graph.insert(c10::Symbol::fromQualString("foldnorm_check::centered64"),
                      {constant(t), axes, groups, list, scaleIndex});
}

std::string plannedWeightDtype(const Graph& graph, const AnalysisResult& analysis) {
  // The saved file's rounding is that of its coarsest centered tensor (largest unit roundoff).
  std::string coarsest = "float32";
  double u = 0;
  for (const auto& plan : analysis.plan) {
    const auto& dtype = graph.parameter(plan.param).dtype;
    if (unitRoundoff(dtype) > u) {
      u = unitRoundoff(dtype);
      coarsest = dtype;
    }
  }
  return coarsest;
}

double savedBoundFor(double float32Bound, const std::string& dtype) {
  return float32Bound * std::max(1.0, unitRoundoff(dtype) / unitRoundoff("float32"));
}

VerificationSetup startVerification(const ImportedModel& model, const AnalysisResult& analysis,
                                    const std::vector<at::Tensor>* examples, const FoldOptions& options) {
  VerificationSetup s;
  auto& v = s.verification;
  v.ran = true;
  v.device = options.device;
  v.modelDtype = plannedWeightDtype(model.graph, analysis);
  v.savedFloat64Bound = savedBoundFor(options.savedFloat64Bound, v.modelDtype);
  s.device = c10::Device(options.device == "cuda" ? c10::kCUDA : c10::kCPU);
  if (s.device.is_cuda() && !torch::cuda::is_available())
    throw SettingError("device", "no CUDA device is available here to verify on");
  if (examples) s.inputSets.push_back(*examples);
  for (int i = 1; i <= options.randomInputs; ++i)
    s.inputSets.push_back(makeInputs(model.inputSpecs, options.seed + 1000 + i));
  if (s.inputSets.empty()) s.inputSets.push_back(makeInputs(model.inputSpecs, options.seed));
  v.runs = static_cast<int>(s.inputSets.size());
  return s;
}

void reportCentered(FoldReport& report, const std::string& path, const ParameterPlan& plan) {
  report.centered.push_back(path);
  if (plan.untie) {
    report.untied.push_back(path);
    report.untieBytes += plan.untieBytes;
  }
}

void reportKept(FoldReport& report, const LayerNormVerdict& verdict) {
  report.kept.push_back(verdict.info.modulePath);
  report.keptReasons.push_back(verdict.explanation);
}

bool hasPredictions(const at::Tensor& t) {
  return t.is_floating_point() && t.dim() >= 1 && t.size(-1) > 1 && t.numel() > 0;
}

OutputCheck& outputCheckFor(std::vector<OutputCheck>& checks, const std::string& dtype, std::size_t output,
                            const at::Tensor& shapeOf) {
  auto it = std::find_if(checks.begin(), checks.end(),
                         [&](const auto& c) { return c.dtype == dtype && c.output == output; });
  if (it != checks.end()) return *it;
  OutputCheck c;
  c.dtype = dtype;
  c.output = output;
  c.shape = formatShape(shapeOf.sizes().vec()) + " " + dtypeName(shapeOf.scalar_type());
  checks.push_back(c);
  return checks.back();
}

void compareOutputs(const std::vector<at::Tensor>& original, const std::vector<at::Tensor>& folded,
                    const std::string& dtype, std::vector<OutputCheck>& checks) {
  if (original.size() != folded.size())
    throw std::logic_error("fold: the folded model returns a different number of outputs");
  for (std::size_t i = 0; i < original.size(); ++i) {
    auto a = original[i].detach().to(at::kCPU), b = folded[i].detach().to(at::kCPU);
    auto& c = outputCheckFor(checks, dtype, i, a);
    if (!a.is_floating_point()) {
      if (!a.equal(b)) c.maxRel = c.maxAbs = std::numeric_limits<double>::infinity();
      continue;
    }
    auto ad = a.to(at::kDouble), bd = b.to(at::kDouble);
    double maxAbs = (ad - bd).abs().max().item<double>();
    double scale = ad.abs().max().item<double>();
    double rel = maxAbs / std::max(scale, std::numeric_limits<double>::min());
    if (!std::isfinite(maxAbs)) rel = maxAbs = std::numeric_limits<double>::infinity();
    c.maxAbs = std::max(c.maxAbs, maxAbs);
    c.maxRel = std::max(c.maxRel, rel);
    if (hasPredictions(a)) {
      c.hasPredictions = true;
      double agree = (a.argmax(-1) == b.argmax(-1)).to(at::kDouble).mean().item<double>();
      c.argmaxAgreement = std::min(c.argmaxAgreement, agree);
    }
  }
}

void summarizeChecks(Verification& v, double float64Tolerance, double savedFloat64Bound) {
  for (const auto& c : v.checks) {
    if (c.dtype == "float64") {
      v.worstRelative64 = std::max(v.worstRelative64, c.maxRel);
      if (!(c.maxRel <= float64Tolerance)) v.float64Equivalent = false;
    } else if (c.dtype == "saved-float64") {
      v.worstRelativeSaved64 = std::max(v.worstRelativeSaved64, c.maxRel);
      if (!(c.maxRel <= savedFloat64Bound)) v.savedWithinBound = false;
    } else {
      v.worstRelative32 = std::max(v.worstRelative32, c.maxRel);
      if (c.hasPredictions && c.argmaxAgreement < 1) v.predictionsUnchanged = false;
      v.predictionRows += c.rows;
      v.flippedRows += c.flippedRows;
      v.unexplainedFlips += c.unexplainedFlips;
    }
  }
}

}  // namespace foldnorm
