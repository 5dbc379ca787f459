// foldnorm-gui-check SHOT.png STATE.json LN_PATH [foldable|not-foldable] [--bench SEQS]
// The screenshot test's judge (gui/tests/screenshot_test.cmake): the PNG is a real picture (many
// colours, most pixels not the background) and the dump says the frame showed the selected LN's
// verdict in the inspector, with the canvas and the table drawn. With --bench 16 (or 64,128) the
// dump must also hold a benchmark report timed at those lengths (positive medians within their
// p10-p90, a positive speed-up, a verified fold) that the Benchmark panel drew as table rows and
// two bars per length. Reads the files only; it never asks the GUI anything.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include <stb_image.h>

namespace {

int failures = 0;

void check(bool ok, const std::string& what) {
  std::cout << (ok ? "ok    " : "FAIL  ") << what << "\n";
  if (!ok) ++failures;
}

std::vector<int64_t> splitSeqs(const std::string& text) {
  std::vector<int64_t> seqs;
  std::istringstream in(text);
  for (std::string s; std::getline(in, s, ',');) seqs.push_back(std::stoll(s));
  return seqs;
}

bool spreadOk(const nlohmann::json& s) {
  if (!s.is_object()) return false;
  const double lo = s.value("p10", -1.0), mid = s.value("median", -1.0), hi = s.value("p90", -1.0);
  return std::isfinite(lo) && std::isfinite(hi) && lo > 0 && lo <= mid && mid <= hi;
}

void checkBench(const nlohmann::json& state, const std::vector<int64_t>& seqs) {
  const auto& bench = state["bench"];
  check(bench.is_object(), "the dump has a bench section");
  if (!bench.is_object()) return;
  check(!bench.value("running", true), "the benchmark finished before the screenshot");
  check(bench.value("error", "x").empty(), "the benchmark reported no error: " + bench.value("error", ""));
  const auto& report = bench["report"];
  check(report.is_object() && report.value("format", "") == "foldnorm-bench",
        "the dump holds the benchmark report (format foldnorm-bench)");
  if (!report.is_object()) return;
  const auto& fold = report["fold"];
  check(fold.value("folded_layer_norms", 0) > 0, "the benchmarked model had LNs folded");
  check(fold.value("worst_relative_float64", 1.0) <= 1e-9, "the benchmarked fold was verified in float64");
  const auto& cases = report["cases"];
  check(cases.is_array() && cases.size() == seqs.size(),
        "one timed case per requested length (" + std::to_string(seqs.size()) + ")");
  if (!cases.is_array()) return;
  std::size_t timed = 0;
  for (std::size_t i = 0; i < std::min(seqs.size(), cases.size()); ++i) {
    const auto& c = cases[i];
    const std::string name = "seq " + std::to_string(seqs[i]);
    check(c.value("seq", int64_t{-1}) == seqs[i], name + " was the length timed");
    check(!c.contains("skipped"), name + " was not skipped: " + c.value("skipped", ""));
    if (c.contains("skipped")) continue;
    ++timed;
    check(spreadOk(c["original_ms"]), name + ": original median > 0 ms, within its p10-p90");
    check(spreadOk(c["folded_ms"]), name + ": folded median > 0 ms, within its p10-p90");
    check(spreadOk(c["speedup"]), name + ": a positive speed-up, within its p10-p90");
    if (spreadOk(c["original_ms"]) && spreadOk(c["speedup"])) {
      std::cout << "      " << name << ": original " << c["original_ms"]["median"].get<double>()
                << " ms, folded " << c["folded_ms"]["median"].get<double>() << " ms, speed-up "
                << c["speedup"]["median"].get<double>() << "x\n";
    }
  }
  check(bench.value("tableRows", 0) == static_cast<int>(cases.size()),
        "the Benchmark panel's table showed one row per length");
  check(bench.value("barsDrawn", 0) == static_cast<int>(2 * timed),
        "the Benchmark panel's chart drew two bars per timed length");
}

}  // namespace

int main(int argc, char** argv) {
  const char* usage =
      "usage: foldnorm-gui-check SHOT.png STATE.json LN_PATH [foldable|not-foldable] [--bench SEQS]\n";
  if (argc < 4) {
    std::cerr << usage;
    return 2;
  }
  const std::string png = argv[1], statePath = argv[2], ln = argv[3];
  std::string expect;
  std::vector<int64_t> benchSeqs;
  for (int i = 4; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--bench" && i + 1 < argc) {
      try {
        benchSeqs = splitSeqs(argv[++i]);
      } catch (const std::exception&) {
        benchSeqs.clear();
      }
      if (benchSeqs.empty()) {
        std::cerr << "foldnorm-gui-check: --bench wants lengths like 16 or 64,128\n" << usage;
        return 2;
      }
    } else if (arg == "foldable" || arg == "not-foldable") {
      expect = arg;
    } else {
      std::cerr << "foldnorm-gui-check: unexpected argument '" << arg << "'\n" << usage;
      return 2;
    }
  }

  int w = 0, h = 0, channels = 0;
  unsigned char* pixels = stbi_load(png.c_str(), &w, &h, &channels, 3);
  check(pixels != nullptr, "screenshot " + png + " is a readable PNG");
  if (pixels) {
    std::map<uint32_t, std::size_t> histogram;
    for (std::size_t i = 0; i < static_cast<std::size_t>(w) * h; ++i) {
      const unsigned char* p = pixels + 3 * i;
      ++histogram[(uint32_t{p[0]} << 16) | (uint32_t{p[1]} << 8) | p[2]];
    }
    std::size_t top = 0;
    for (const auto& [colour, count] : histogram) top = std::max(top, count);
    const double background = static_cast<double>(top) / (static_cast<double>(w) * h);
    std::cout << "      " << w << "x" << h << ", " << histogram.size() << " colours, commonest "
              << static_cast<int>(background * 100) << "%\n";
    check(w >= 640 && h >= 400, "screenshot is window-sized");
    check(histogram.size() >= 64, "screenshot has many colours (text, nodes, edges), not a blank");
    check(background < 0.9, "screenshot is not mostly one colour");
    stbi_image_free(pixels);
  }

  std::ifstream in(statePath);
  check(static_cast<bool>(in), "state dump " + statePath + " exists");
  if (!in) return 1;
  nlohmann::json state;
  try {
    in >> state;
  } catch (const std::exception& e) {
    check(false, std::string("state dump is JSON: ") + e.what());
    return 1;
  }
  check(state.value("schema", "") == "foldnorm-gui-state/1", "state dump has the schema tag");
  check(state.value("error", "x").empty(), "no error shown: " + state.value("error", ""));
  const auto& sel = state["selectedLn"];
  check(sel.is_object() && sel.value("modulePath", "") == ln, "selected LN is " + ln);
  if (sel.is_object() && !expect.empty()) {
    check(sel.value("foldable", false) == (expect == "foldable"), "its verdict is " + expect);
  }
  std::vector<std::string> text = state.value("inspectorText", std::vector<std::string>{});
  const std::string verdict = sel.is_object() ? sel.value("verdictText", "") : "";
  check(!verdict.empty() && std::find(text.begin(), text.end(), verdict) != text.end(),
        "the inspector showed the verdict text \"" + verdict + "\"");
  check(std::any_of(text.begin(), text.end(),
                    [&](const std::string& t) { return t.find(ln) != std::string::npos; }),
        "the inspector named the LN's module");
  std::vector<std::string> panels;
  for (const auto& p : state["panels"]) panels.push_back(p.value("name", ""));
  for (const char* want : {"Graph", "LayerNorms", "Inspector"}) {
    check(std::find(panels.begin(), panels.end(), want) != panels.end(),
          std::string("panel ") + want + " was drawn");
  }
  check(state["canvas"].value("nodesDrawn", 0) > 0, "the canvas drew nodes");
  check(state["lnTableRows"].get<int>() > 0, "the LN table showed rows");
  check(state["frameTimes"]["settled"].value("count", 0) > 0, "frame times were recorded");
  if (!benchSeqs.empty()) {
    check(std::find(panels.begin(), panels.end(), "Benchmark") != panels.end(),
          "panel Benchmark was drawn");
    checkBench(state, benchSeqs);
  }
  std::cout << (failures ? "FAILED: " + std::to_string(failures) + " check(s)" : "all checks passed")
            << "\n";
  return failures ? 1 : 0;
}
