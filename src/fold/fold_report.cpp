// The fold report as JSON (schema foldnorm-fold/1) and as text.
#include <nlohmann/json.hpp>

#include "fold_internal.h"
#include "foldnorm/common/measure.h"

namespace foldnorm {

using fold_detail::strf;

nlohmann::json toJson(const FoldReport& r) {
  nlohmann::json j;
  j["schema"] = "foldnorm-fold/1";
  j["input"] = r.input;
  j["folded"] = r.folded;
  auto kept = nlohmann::json::array();
  for (std::size_t i = 0; i < r.kept.size(); ++i) kept.push_back({{"module", r.kept[i]}, {"reason", r.keptReasons[i]}});
  j["kept"] = kept;
  j["centered"] = r.centered;
  j["untied"] = r.untied;
  j["untie_bytes"] = r.untieBytes;
  j["inserted_centerings"] = r.inserted;
  j["fused_add_norms"] = r.fusedAddNorms;
  j["rms_op"] = toString(r.rmsOp);
  j["devices"] = {{"traced", r.tracedDevice}, {"saved_constants", r.savedDevice}};
  const auto& v = r.verification;
  nlohmann::json vj{{"ran", v.ran}};
  if (v.ran) {
    vj["device"] = v.device;
    vj["input_sets"] = v.runs;
    vj["model_dtype"] = v.modelDtype;
    vj["float64_equivalent"] = v.float64Equivalent;
    vj["predictions_unchanged"] = v.predictionsUnchanged;
    vj["worst_relative_float64"] = v.worstRelative64;
    vj["worst_relative_float32"] = v.worstRelative32;
    vj["saved_float64"] = {{"worst_relative", v.worstRelativeSaved64},
                           {"bound", v.savedFloat64Bound},
                           {"within_bound", v.savedWithinBound}};
    auto worst = nlohmann::json::array();
    for (const auto& f : v.worstFlips)
      worst.push_back({{"output", f.output}, {"input_set", f.run}, {"row", f.row}, {"margin", f.margin},
                       {"error_bound", f.errorBound}, {"within_rounding", f.withinRounding()}});
    vj["predictions"] = {{"rows", v.predictionRows},
                         {"flipped", v.flippedRows},
                         {"flipped_within_rounding", v.flippedRows - v.unexplainedFlips},
                         {"flipped_not_within_rounding", v.unexplainedFlips},
                         {"worst_flips", worst}};
    vj["passed"] = v.passed();
    auto checks = nlohmann::json::array();
    for (const auto& c : v.checks) {
      nlohmann::json cj{{"dtype", c.dtype}, {"output", c.output}, {"shape", c.shape},
                        {"max_abs", c.maxAbs}, {"max_rel", c.maxRel}};
      if (c.hasPredictions) cj["argmax_agreement"] = c.argmaxAgreement;
      if (c.dtype == "float32" && c.hasPredictions)
        cj["predictions"] = {{"rows", c.rows}, {"flipped", c.flippedRows},
                             {"flipped_not_within_rounding", c.unexplainedFlips}};
      checks.push_back(cj);
    }
    vj["checks"] = checks;
  }
  j["verification"] = vj;
  if (r.savedFile.ran) {
    const auto& sf = r.savedFile;
    j["saved_file"] = {{"reloaded", true}, {"loader", sf.loader}, {"input_sets", sf.runs},
                       {"tensors_bit_identical", sf.tensors},
                       {"forward_worst_relative", sf.worstRelative32}, {"forward_tolerance", sf.tolerance32},
                       {"float64_worst_relative", sf.worstRelativeSaved64}};
  }
  return j;
}

namespace {

/// The report's name of the run in the model's own dtype: "float32", or "float16 (the model's
/// dtype)" for a 16-bit model (its check keeps the name "float32": fold.h, OutputCheck).
std::string modelRunName(const Verification& v) {
  return v.modelDtype == "float32" ? v.modelDtype : v.modelDtype + " (the model's dtype)";
}

}  // namespace

std::vector<std::string> verificationSummary(const Verification& v) {
  std::vector<std::string> lines;
  const char* dtype = v.modelDtype.c_str();
  lines.push_back(v.float64Equivalent
                      ? strf("float64 (the plan): equivalent (worst relative error %.2e: float64 rounding)",
                             v.worstRelative64)
                      : strf("float64 (the plan): NOT equivalent (worst relative error %.2e): this is a bug",
                             v.worstRelative64));
  lines.push_back(strf("saved file in float64: worst relative error %.2e (%s the bound %.0e for weights rounded to "
                       "%s after centering%s)",
                       v.worstRelativeSaved64, v.savedWithinBound ? "within" : "ABOVE", v.savedFloat64Bound, dtype,
                       v.savedWithinBound ? "" : ": look at the centered weights"));
  lines.push_back(strf("%s: worst relative error %.2e", modelRunName(v).c_str(), v.worstRelative32));
  if (v.flippedRows == 0) {
    lines.push_back(strf("predictions: unchanged (0 of %lld rows flipped)", static_cast<long long>(v.predictionRows)));
  } else {
    auto line = strf("predictions: %lld of %lld rows flipped, ", static_cast<long long>(v.flippedRows),
                     static_cast<long long>(v.predictionRows));
    if (v.unexplainedFlips == 0)
      line += strf("all %lld within %s rounding (top-2 margin <= row error bound)",
                   static_cast<long long>(v.flippedRows), dtype);
    else
      line += strf("%lld NOT within %s rounding (top-2 margin > row error bound): this is a bug",
                   static_cast<long long>(v.unexplainedFlips), dtype);
    lines.push_back(line);
  }
  return lines;
}

std::string toText(const FoldReport& r) {
  std::string out;
  if (r.folded.empty()) {
    out += "nothing was folded: no LayerNorm is foldable (the output computes the input model's function)\n";
  } else {
    // Both kinds name the op the same way: the .pt2 program's aten.rms_norm.default is aten::rms_norm.
    const char* op = r.rmsOp == RmsOp::Aten ? "aten::rms_norm (+ a bias add where the LN has a bias)"
                                            : "foldnorm::rms_norm";
    out += strf("folded %zu LayerNorm(s) into %s; centered %zu parameter(s)", r.folded.size(), op,
                r.centered.size());
    if (!r.untied.empty())
      out += strf("; untied %zu (%s copied)", r.untied.size(), humanBytes(r.untieBytes).c_str());
    if (r.fusedAddNorms > 0)
      out += strf("; fused %d residual add(s) into foldnorm::add_rms_norm", r.fusedAddNorms);
    out += "\n";
  }
  if (r.tracedDevice != r.savedDevice)
    out += "the input's constants name " + r.tracedDevice + "; the folded model's name " + r.savedDevice +
           " (where it was folded and verified)\n";
  else if (r.savedDevice != "cpu")
    out += "the folded program names " + r.savedDevice + ", as its input did" +
           (r.verification.ran ? " (verified on " + r.verification.device + ")" : std::string()) +
           "; torch.export.load needs that device (where it is, torch.export.passes.move_to_device_pass moves the program)\n";
  for (const auto& ins : r.inserted) out += "  " + ins + "\n";
  for (std::size_t i = 0; i < r.kept.size(); ++i)
    out += "  kept LayerNorm " + (r.kept[i].empty() ? std::string("<top>") : r.kept[i]) + ": " + r.keptReasons[i] + "\n";
  const auto& v = r.verification;
  if (!v.ran) {
    out += "verification: skipped (not asked for)\n";
    return out;
  }
  out += strf("verification on %s (%d input sets):\n", v.device.c_str(), v.runs);
  out += strf("  %-13s %6s  %-24s %12s %12s  %s\n", "comparison", "output", "shape", "max abs", "max rel",
              "argmax unchanged");
  for (const auto& c : v.checks)
    out += strf("  %-13s %6zu  %-24s %12.3e %12.3e  %s\n",
                (c.dtype == "float32" ? v.modelDtype : c.dtype).c_str(), c.output, c.shape.c_str(), c.maxAbs,
                c.maxRel, c.hasPredictions ? strf("%.2f%%", 100 * c.argmaxAgreement).c_str() : "-");
  for (const auto& line : verificationSummary(v)) out += line + "\n";
  for (const auto& f : v.worstFlips)
    out += strf("  output %zu, input set %d, row %lld: top-2 margin %.3e %s error bound %.3e\n", f.output, f.run,
                static_cast<long long>(f.row), f.margin, f.withinRounding() ? "<=" : ">", f.errorBound);
  if (r.savedFile.ran) {
    const auto& sf = r.savedFile;
    out += strf("saved file reloaded (%s): %lld tensors bit for bit the verified ones; its own forward on the %d "
                "input sets: worst relative error %.2e against the verified fold (tolerance %.0e), %.2e against the "
                "original in float64\n",
                sf.loader.c_str(), static_cast<long long>(sf.tensors), sf.runs, sf.worstRelative32, sf.tolerance32,
                sf.worstRelativeSaved64);
  }
  return out;
}

}  // namespace foldnorm
