// The absorb + rotate stage (include/foldnorm/fold/rotate.h): orchestration, the float64 check
// against the original, the atomic save with its reload, and the report. The pieces are listed in
// rotate_internal.h.
#include "foldnorm/fold/rotate.h"

#include <torch/csrc/jit/serialization/import.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "foldnorm/common/error.h"
#include "foldnorm/fold/fold_support.h"
#include "foldnorm/torch/model_surgery.h"
#include "fold_internal.h"
#include "rotate_internal.h"

namespace foldnorm {

using fold_detail::strf;
namespace jit = torch::jit;

namespace {

/// max |got - want| / max |want| over the floating outputs; integer outputs must be equal.
double relativeError(const std::vector<at::Tensor>& want, const std::vector<at::Tensor>& got) {
  if (want.size() != got.size()) throw Error("the rotated model returns another number of outputs than the original");
  double worst = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    if (!want[i].is_floating_point()) {
      if (!want[i].equal(got[i].to(want[i].scalar_type()))) worst = std::numeric_limits<double>::infinity();
      continue;
    }
    auto w = want[i].detach().to(at::kCPU).to(at::kDouble), g = got[i].detach().to(at::kCPU).to(at::kDouble);
    const double err = (g - w).abs().max().item<double>() / std::max(w.abs().max().item<double>(), 1e-300);
    worst = std::max(worst, std::isfinite(err) ? err : std::numeric_limits<double>::infinity());
  }
  return worst;
}

}  // namespace

RotatedModel rotateModel(const ImportedModel& model, const AnalysisResult& analysis, FoldOptions foldOptions,
                         const RotateOptions& options) {
  if (!model.torch)
    throw Error("'" + model.path + "' is a torch.export archive (.pt2): absorbing the affine and rotating take TorchScript models (.pt)");
  auto say = [&](const std::string& m) { if (options.progress) options.progress(m); };
  // The stage reads plain norms (no fused add+norm) and rewrites them to aten::rms_norm itself.
  foldOptions.fuseAddNorm = false;
  foldOptions.rmsOp = RmsOp::Foldnorm;
  foldOptions.device = "cpu";
  RotatedModel r;
  r.folded = foldModel(model, analysis, foldOptions);
  const auto& fv = r.folded.report.verification;
  if (fv.ran && !fv.passed())
    throw Error(strf("the fold itself failed its verification (float64 relative error %.2e): nothing to rotate",
                     fv.worstRelative64));
  const auto& tm = *model.torch;
  auto& product = *r.folded.torch;

  say("recording the folded model's shapes");
  const auto shapes = rotate_detail::recordShapes(product.module, product.graph, tm.exampleInputs);
  say(options.rotate ? "planning the absorb and the rotation" : "planning the absorb");
  auto plan = rotate_detail::planStage(product.module, product.graph, shapes, options);

  // The oracle: the fold's plan and this stage applied to a clone whose planned tensors are
  // float64 copies, every edit kept in float64: nothing rounded between the original and it.
  say("applying the fold and the stage in float64");
  std::vector<at::Tensor> planned;
  for (const auto& p : analysis.plan) planned.push_back(tm.parameterTensors.at(p.param));
  auto plan64 = cloneSharing(tm.module, planned, {at::kDouble, c10::kCPU});
  if (tm.tracedDevice != "cpu") methodsToCpu(plan64);
  auto planGraph = inlineForwardInPlace(plan64);
  fold_detail::applyPlan(plan64, planGraph, model, analysis, foldOptions, nullptr);
  rotate_detail::applyStage(plan64, planGraph, plan, at::kDouble, nullptr);
  say("applying the stage to the folded model");
  rotate_detail::applyStage(product.module, product.graph, plan, std::nullopt, &plan.report.untied);
  r.report = plan.report;

  std::vector<std::vector<at::Tensor>> inputSets{tm.exampleInputs};
  for (int i = 0; i < options.randomInputs; ++i)
    inputSets.push_back(makeInputs(model.inputSpecs, foldOptions.seed + 1 + static_cast<uint64_t>(i)));
  const RetargetOptions float64{at::kDouble, c10::kCPU};
  auto original64 = convertedReads(tm.module, tm.graph, float64);
  auto rotated64 = convertedReads(plan64, planGraph, float64);
  auto saved64 = convertedReads(product.module, product.graph, float64);
  auto runs = std::make_shared<VerificationRuns>();
  auto& rr = r.report;
  for (std::size_t i = 0; i < inputSets.size(); ++i) {
    say(strf("verifying on input set %zu/%zu", i + 1, inputSets.size()));
    const auto in64 = retargetInputs(inputSets[i], float64);
    auto z = runGraph(tm.module, original64, in64);
    rr.worstRelative64 = std::max(rr.worstRelative64, relativeError(z, runGraph(plan64, rotated64, in64)));
    rr.worstRelativeSaved64 = std::max(rr.worstRelativeSaved64, relativeError(z, runGraph(product.module, saved64, in64)));
    auto b = runGraph(product.module, product.graph, inputSets[i]);
    rr.worstRelative32 = std::max(rr.worstRelative32, relativeError(runGraph(tm.module, tm.graph, inputSets[i]), b));
    runs->inputSets.push_back(inputSets[i]);
    runs->folded.push_back(b);
    runs->original64.push_back(z);
  }
  rr.runs = static_cast<int>(inputSets.size());
  rr.tolerance = options.float64Tolerance;
  rr.passed = rr.worstRelative64 <= options.float64Tolerance;
  runs->tolerance = 1e-5;
  r.runs = runs;
  return r;
}

double saveRotated(const RotatedModel& rotated, const ImportedModel& original, const std::string& outPath) {
  namespace fs = std::filesystem;
  const auto& rr = rotated.report;
  if (!rr.passed)
    throw Error(strf("the rotated model differs from the original in float64 (relative %.2e > %.0e): not writing '%s'",
                     rr.worstRelative64, rr.tolerance, outPath.c_str()));
  checkOutputPath(original.path, outPath);
  jit::ExtraFilesMap extra;
  extra[kInputSpecExtraFile] = inputSpecsToJson(original.inputSpecs);
  extra[kFoldReportExtraFile] = toJson(rotated.folded.report).dump(2);
  extra[kRotateReportExtraFile] = toJson(rr).dump(2);
  const auto tmp = outPath + ".tmp-" + std::to_string(::getpid());
  double saved64 = 0;
  try {
    rotated.folded.torch->module.save(tmp, extra);
    // What torch.jit.load gets is what was verified: its own forward, on the same input sets.
    auto loaded = jit::load(tmp, c10::Device(c10::kCPU));
    auto graph = inlinedForward(loaded);
    auto graph64 = convertedReads(loaded, graph, {at::kDouble, c10::kCPU});
    const auto& runs = *rotated.runs;
    for (std::size_t i = 0; i < runs.inputSets.size(); ++i) {
      const double err = relativeError(runs.folded[i], runGraph(loaded, graph, runs.inputSets[i]));
      if (!(err <= runs.tolerance))
        throw Error(strf("the written file computes something else than the verified model (relative %.2e)", err));
      saved64 = std::max(saved64, relativeError(runs.original64[i],
                                                runGraph(loaded, graph64, retargetInputs(runs.inputSets[i],
                                                                                         {at::kDouble, c10::kCPU}))));
    }
  } catch (const std::exception& e) {
    std::error_code ec;
    fs::remove(tmp, ec);
    const auto* c10 = dynamic_cast<const c10::Error*>(&e);
    throw Error("cannot write '" + outPath + "': " + errorCause(c10 ? c10->what_without_backtrace() : e.what()));
  }
  std::error_code ec;
  fs::rename(tmp, outPath, ec);
  if (ec) {
    fs::remove(tmp, ec);
    throw Error("cannot move the output into place at '" + outPath + "': " + ec.message());
  }
  return saved64;
}

nlohmann::json toJson(const RotateReport& r) {
  nlohmann::json j;
  j["schema"] = "foldnorm-rotate/1";
  auto absorbed = nlohmann::json::array();
  for (const auto& a : r.absorbed) {
    nlohmann::json aj{{"norm", a.norm}, {"absorbed", a.absorbed}};
    if (a.absorbed) aj["into"] = a.readers;
    else aj["reason"] = a.reason;
    absorbed.push_back(aj);
  }
  j["absorbed"] = absorbed;
  auto streams = nlohmann::json::array();
  for (const auto& s : r.streams) {
    nlohmann::json sj{{"width", s.width}, {"rotated", s.rotated}, {"norms", s.norms},
                      {"writers", s.writerNames}, {"readers", s.readerNames}, {"inserted", s.inserted}};
    if (s.rotated) sj["rotation"] = {{"kind", s.rotation}, {"seed", s.seed}};
    else sj["reason"] = s.reason;
    streams.push_back(sj);
  }
  j["streams"] = streams;
  j["untied"] = r.untied;
  j["verification"] = {{"input_sets", r.runs},
                       {"worst_relative_float64", r.worstRelative64},
                       {"tolerance_float64", r.tolerance},
                       {"worst_relative_model_dtype_in_float64", r.worstRelativeSaved64},
                       {"worst_relative_model_dtype", r.worstRelative32},
                       {"passed", r.passed}};
  return j;
}

std::string toText(const RotateReport& r) {
  std::string out;
  int absorbed = 0;
  for (const auto& a : r.absorbed) absorbed += a.absorbed ? 1 : 0;
  out += strf("absorbed the affine of %d of %zu folded norm(s) into their readers\n", absorbed, r.absorbed.size());
  for (const auto& a : r.absorbed) {
    if (a.absorbed) {
      std::string into;
      for (const auto& p : a.readers) into += (into.empty() ? "" : ", ") + p;
      out += "  " + a.norm + " -> " + into + "\n";
    } else {
      out += "  " + a.norm + " keeps its affine: " + a.reason + "\n";
    }
  }
  for (const auto& s : r.streams) {
    if (!s.rotated) {
      out += strf("stream of width %lld: not rotated: %s\n", static_cast<long long>(s.width), s.reason.c_str());
      continue;
    }
    out += strf("stream of width %lld: rotated (%s, seed %llu): %d norm(s), %zu writer(s), %zu reader(s)\n",
                static_cast<long long>(s.width), s.rotation.c_str(), static_cast<unsigned long long>(s.seed),
                s.norms, s.writerNames.size(), s.readerNames.size());
    for (const auto& i : s.inserted) out += "  inserted a rotation op " + i + "\n";
  }
  for (const auto& u : r.untied) out += "  untied: " + u + " (its reads need different edits)\n";
  out += strf("float64: original vs fold + absorb + rotation (unrounded), %d input set(s): relative %.2e (tolerance "
              "%.0e): %s\n", r.runs, r.worstRelative64, r.tolerance, r.passed ? "passed" : "FAILED");
  out += strf("the model in its dtype, run in float64: relative %.2e; in its dtype against the original's: %.2e\n",
              r.worstRelativeSaved64, r.worstRelative32);
  return out;
}

}  // namespace foldnorm
