// What the TorchScript and the .pt2 fold share (see fold/fold_support.h).
#include "foldnorm/fold/fold_support.h"

#include <ATen/ATen.h>
#include <torch/cuda.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

#include "foldnorm/common/error.h"
#include "foldnorm/common/setting_error.h"
#include "foldnorm/torch/torch_model.h"

namespace foldnorm {

at::Tensor centeredCopy(const at::Tensor& t, const std::vector<CenterAction>& actions, const ScaleLookup& scaleOf) {
  at::NoGradGuard noGrad;
  auto x = t.detach().to(at::kDouble);
  for (const auto& a : actions) {
    auto n = x.size(a.axis);
    if (a.scale != kNone) {
      // x[c] -= mean_k(s_k x[k]) / s_c along the axis: s * x becomes mean-zero (method.md section 7).
      if (!scaleOf) throw Error("this fold does not execute scaled centerings (scale absorption): analyse without it");
      auto s = scaleOf(a.scale).to(at::kDouble).reshape({-1});
      if (s.numel() != n) throw std::logic_error("fold: the scale does not match the centered axis");
      auto moved = x.movedim(a.axis, -1);
      moved = moved - (moved * s).mean(-1, /*keepdim=*/true) / s;
      x = moved.movedim(-1, a.axis);
      continue;
    }
    if (n % a.groups != 0) throw std::logic_error("fold: groups do not divide the axis");
    auto moved = x.movedim(a.axis, -1).contiguous();
    auto grouped = moved.reshape({-1, a.groups, n / a.groups});
    grouped = grouped - grouped.mean(-1, /*keepdim=*/true);
    x = grouped.reshape(moved.sizes()).movedim(-1, a.axis);
  }
  return x.to(t.scalar_type()).contiguous();
}

VerificationSetup startVerification(const ImportedModel& model, const std::vector<at::Tensor>* examples,
                                    const FoldOptions& options) {
  VerificationSetup s;
  auto& v = s.verification;
  v.ran = true;
  v.device = options.device;
  v.savedFloat64Bound = options.savedFloat64Bound;
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
