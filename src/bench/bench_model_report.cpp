// `foldnorm bench`'s report as JSON (format foldnorm-bench/1) and as a plain-text table.
#include <nlohmann/json.hpp>

#include <algorithm>

#include "foldnorm/bench/bench_model.h"
#include "foldnorm/common/measure.h"

namespace foldnorm::bench {

nlohmann::json toJson(const ModelBenchReport& r) {
  auto spread = [](const Spread& s) { return nlohmann::json{{"median", s.median}, {"p10", s.p10}, {"p90", s.p90}}; };
  nlohmann::json cases = nlohmann::json::array();
  for (const auto& c : r.cases) {
    nlohmann::json j{{"seq", c.seq}, {"inputs", c.inputShapes}, {"items", c.items}};
    if (!c.skipped.empty()) {
      j["skipped"] = c.skipped;
    } else {
      j["original_ms"] = spread(c.originalMs);
      j["folded_ms"] = spread(c.foldedMs);
      j["speedup"] = spread(c.speedup);
      j["paired"] = {{"median", c.paired.median}, {"ci95_low", c.paired.low}, {"ci95_high", c.paired.high},
                     {"rounds", c.paired.rounds}, {"verdict", c.paired.verdict}};
      if (c.control.rounds > 0) {
        j["null_control"] = {{"copy_ms", spread(c.controlMs)}, {"median", c.control.median},
                             {"ci95_low", c.control.low}, {"ci95_high", c.control.high},
                             {"rounds", c.control.rounds}, {"verdict", c.control.verdict}};
      }
      j["original_" + r.itemUnit + "_per_s"] = c.originalItemsPerSecond;
      j["folded_" + r.itemUnit + "_per_s"] = c.foldedItemsPerSecond;
    }
    cases.push_back(j);
  }
  nlohmann::json load = nullptr;
  if (r.loadBefore >= 0) load = {{"before", r.loadBefore}, {"after", r.loadAfter}};
  return {{"format", "foldnorm-bench"},
          {"version", 1},
          {"model", r.model},
          {"device", r.device},
          {"dtype", r.dtype},
          {"torch", r.torchVersion},
          {"cpu_kernel_isa", r.cpuKernelIsa},
          {"threads", r.threads},
          {"warmup", r.warmup},
          {"reps", r.reps},
          {"case_seconds", r.caseSeconds},
          {"layouts", r.layouts},
          {"runner", r.runner},
          {"executor", r.executor},
          {"rms_op", r.rmsOp},
          {"large_buffers_on_heap", r.largeBuffersOnHeap},
          {"huge_pages", r.hugePages},
          {"null_control_skipped", r.nullControlSkipped.empty() ? nlohmann::json(nullptr) : nlohmann::json(r.nullControlSkipped)},
          {"layouts_skipped", r.layoutsSkipped.empty() ? nlohmann::json(nullptr) : nlohmann::json(r.layoutsSkipped)},
          {"released_bytes", r.releasedBytes},
          {"item_unit", r.itemUnit},
          {"seq_applies", r.seqApplies},
          {"seq_note", r.seqNote},
          {"load_average", load},
          {"fold", {{"folded_layer_norms", r.foldedLayerNorms},
                    {"kept_layer_norms", r.keptLayerNorms},
                    {"fused_add_norms", r.fusedAddNorms},
                    {"worst_relative_float32", r.worstRelative32},
                    {"worst_relative_float64", r.worstRelative64},
                    {"predictions_unchanged", r.predictionsUnchanged}}},
          {"cases", cases}};
}

std::string formatModelBenchTable(const ModelBenchReport& r) {
  std::string s = format("%s: %d LayerNorm(s) folded, %d kept; fold verified (float64 worst relative "
                         "error %.2e, float32 %.2e, predictions %s)\n",
                         r.model.c_str(), r.foldedLayerNorms, r.keptLayerNorms, r.worstRelative64,
                         r.worstRelative32, r.predictionsUnchanged ? "unchanged" : "changed");
  s += format("device %s, %s, %d threads, CPU kernels %s, torch %s; folded LNs are %s\n", r.device.c_str(),
              r.dtype.c_str(), r.threads, r.cpuKernelIsa.c_str(), r.torchVersion.c_str(),
              r.rmsOp == "aten" ? "aten::rms_norm + bias add" : "foldnorm::rms_norm");
  const bool control = std::any_of(r.cases.begin(), r.cases.end(), [](const auto& c) { return c.control.rounds > 0; });
  s += format("%d warm-up forwards per model and length, then %d rounds%s%s, each running %s\nrunner %s: %s; "
              "allocator: %s\n%s\n",
              r.warmup, r.reps,
              r.caseSeconds > 0 ? format(" or more, until %.0f s of timed rounds", r.caseSeconds).c_str() : "",
              r.layouts > 1 ? format(" over %d parameter layouts (every storage moved to a drawn page offset "
                                     "before each share)", r.layouts).c_str() : "",
              control ? "the original, the folded model and the original's second copy (the null fold; the six "
                        "orders in turn)"
                      : "both models (order alternating)",
              r.runner.c_str(), r.executor.c_str(),
              (std::string(r.largeBuffersOnHeap ? "large buffers kept on the heap" : "glibc's default (large buffers mmapped)") +
               (r.hugePages ? ", buffers of 2 MiB and more on transparent huge pages" : ", 4 KiB pages")).c_str(),
              r.seqNote.c_str());
  if (r.loadBefore >= 0)
    s += format("1-minute load average %.2f before, %.2f after (others' work on this machine)\n",
                r.loadBefore, r.loadAfter);
  if (!r.nullControlSkipped.empty()) s += "null fold skipped: " + r.nullControlSkipped + "\n";
  if (!r.layoutsSkipped.empty()) s += "parameter layouts skipped: " + r.layoutsSkipped + "\n";
  if (r.releasedBytes > 0)
    s += "the import's and the fold's tensors (" + humanBytes(r.releasedBytes) +
         ") were freed before timing: only the timed copies stay\n";
  s += "median ms (p10-p90); speed-up = per-round original/folded, median (p10-p90); its bootstrap 95% "
       "interval decides faster / slower / within noise\n\n";
  const std::string unit = r.itemUnit == "tokens" ? "tok/s" : "img/s";
  s += format("%6s %8s %24s %24s %11s %11s %22s %13s %7s  %s\n", "seq", r.itemUnit.c_str(), "original ms",
              "folded ms", ("orig " + unit).c_str(), ("fold " + unit).c_str(), "speed-up", "95% interval",
              "rounds", "verdict");
  for (const auto& c : r.cases) {
    const std::string seq = r.seqApplies ? std::to_string(c.seq) : "-";
    if (!c.skipped.empty()) {
      s += format("%6s %8lld  skipped: %s\n", seq.c_str(), static_cast<long long>(c.items), c.skipped.c_str());
      continue;
    }
    auto cell = [](const Spread& x, const char* f) {
      return format(f, x.median, x.p10, x.p90);
    };
    s += format("%6s %8lld %24s %24s %11.1f %11.1f %22s %13s %7d  %s\n", seq.c_str(),
                static_cast<long long>(c.items), cell(c.originalMs, "%.2f (%.2f-%.2f)").c_str(),
                cell(c.foldedMs, "%.2f (%.2f-%.2f)").c_str(), c.originalItemsPerSecond, c.foldedItemsPerSecond,
                cell(c.speedup, "%.3f (%.3f-%.3f)").c_str(), format("%.3f-%.3f", c.paired.low, c.paired.high).c_str(),
                c.paired.rounds, c.paired.verdict.c_str());
    if (c.control.rounds > 0) {
      s += format("%6s %8s  null fold (original / its second copy, same rounds): %.3f, 95%% interval %.3f-%.3f, %s\n",
                  "", "", c.control.median, c.control.low, c.control.high, c.control.verdict.c_str());
    }
  }
  return s;
}

}  // namespace foldnorm::bench
