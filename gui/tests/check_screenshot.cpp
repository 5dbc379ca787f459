// foldnorm-gui-check SHOT.png STATE.json LN_PATH|- [foldable|not-foldable] [--bench SEQS]
//                    [--min-labels N] [--max-ui-median-ms MS] [--analysis ANALYSIS.json]
//                    [--first-sight] [--folded] [--export FILE] [--max-relayout-ms MS]
//                    [--toggled] [--reason REASON] [--mark KIND]... [--saved] [--runner NAME]
//                    [--rms-op NAME]
// The screenshot test's judge (gui/tests/screenshot_test.cmake): the PNG is a real picture (many
// colours, most pixels not the background) and the dump says the frame showed the selected LN's
// verdict in the inspector, with the canvas and the table drawn. With --bench 16 (or 64,128) the
// dump must also hold a benchmark report timed at those lengths (positive medians within their
// p10-p90, a positive speed-up, a verified fold) that the Benchmark panel drew as table rows and
// two bars per length. First sight (LN_PATH "-": nothing selected): --min-labels N legible box
// labels (>= 9 px) with every block summary drawn legible, --first-sight every block collapsed,
// --max-ui-median-ms the median time to build the ImGui frame, --analysis the summary boxes'
// LN counts equal to what `foldnorm analyze --json` says of the modules in each box; --folded
// the folded graph shown with RMSNorm nodes marked next to a verified fold; --export the
// --export-view file written. Analysis settings: --toggled one checkbox flip made a second
// analysis whose foldable count differs from the first and is what the table shows (and, with
// --analysis, what `foldnorm analyze` says under the same settings); --reason the selected LN's
// reason, named in its verdict text. --mark KIND the folded graph marks nodes of that kind
// (scaled, inserted, ...); --saved the fold was saved where the dump says, as a non-empty file;
// --runner the benchmark ran on that runner (torchscript, interpreter); --rms-op the panel was set
// to that RMSNorm op and the benchmark's report records it (foldnorm, aten). Reads the files only; it
// never asks the GUI anything.
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

bool isUnder(const std::string& module, const std::string& path) {
  return path.size() > module.size() && path.compare(0, module.size(), module) == 0 &&
         path[module.size()] == '.';
}

// Every summary box's counts against the analysis' verdicts of the LNs inside its modules.
void checkBlockCounts(const nlohmann::json& state, const nlohmann::json& analysis) {
  const auto& boxes = state["canvas"]["blockBoxes"];
  check(boxes.is_array() && !boxes.empty(), "the canvas has block summary boxes");
  if (!boxes.is_array()) return;
  std::size_t agree = 0;
  for (const auto& box : boxes) {
    int lns = 0, foldable = 0;
    for (const auto& m : box["modules"]) {
      for (const auto& ln : analysis["layer_norms"]) {
        if (!isUnder(m.get<std::string>(), ln.value("module", ""))) continue;
        ++lns;
        if (ln.value("foldable", false)) ++foldable;
      }
    }
    const bool ok = box.value("layerNorms", -1) == lns && box.value("foldable", -1) == foldable;
    if (!ok) {
      check(false, "box \"" + box.value("title", "") + "\" counts " + std::to_string(foldable) + "/" +
                       std::to_string(lns) + " in the analysis");
    }
    agree += ok;
  }
  check(agree == boxes.size(), std::to_string(agree) + "/" + std::to_string(boxes.size()) +
                                   " summary boxes count the LNs and foldable LNs the analysis has in them");
}

void checkFirstSight(const nlohmann::json& state, int minLabels, double maxUiMs, bool collapsed) {
  const auto& c = state["canvas"];
  std::cout << "      zoom " << c.value("zoom", 0.0) << ", " << c.value("labelsDrawn", 0)
            << " legible labels, " << c.value("collapsedBoxes", 0) << " summary boxes ("
            << c.value("blocksCollapsed", 0) << " blocks, " << c.value("groupBoxes", 0)
            << " groups), " << c.value("blocksExpanded", 0) << " expanded, re-layout "
            << c.value("relayoutMilliseconds", 0.0) << " ms\n";
  if (minLabels > 0) {
    check(c.value("labelsDrawn", 0) >= minLabels,
          "at least " + std::to_string(minLabels) + " labels drawn legible (>= 9 px)");
    check(c.value("blockBoxesDrawn", 0) > 0 && c.value("blockLabelsDrawn", 0) == c.value("blockBoxesDrawn", -1),
          "every block summary on screen has a legible label");
  }
  if (collapsed) {
    check(c.value("blocksExpanded", -1) == 0 && c.value("collapsedBoxes", 0) > 0,
          "every block starts collapsed into a summary box");
  }
  if (maxUiMs > 0) {
    // The bound is on the UI thread's CPU time, which other jobs on a loaded machine do not
    // inflate; the wall-clock median is printed beside it (an upper bound on a busy machine).
    const auto& cpu = state["frameTimes"]["settledUiCpu"];
    const auto& wall = state["frameTimes"]["settledUiOnly"];
    const double median = cpu.value("medianMs", 1e9);
    std::cout << "      UI frame (building the ImGui frame) over " << cpu.value("count", 0)
              << " frames: CPU median " << median << " ms, p90 " << cpu.value("p90Ms", 0.0)
              << " ms; wall-clock median " << wall.value("medianMs", 0.0) << " ms, p90 "
              << wall.value("p90Ms", 0.0) << " ms\n";
    check(cpu.value("count", 0) >= 10 && median < maxUiMs,
          "median UI frame (CPU time) under " + std::to_string(maxUiMs).substr(0, 4) + " ms");
  }
}

void checkFolded(const nlohmann::json& state) {
  const auto& f = state["fold"];
  check(f.value("equivalent", false), "the fold was verified: same function in float64");
  check(f.value("verificationRows", 0) > 0, "the verification table has rows");
  // The verdict lines of `foldnorm fold`, for a .pt and a .pt2 alike: the saved file in float64
  // (within its bound) and the prediction flips.
  auto detail = [&](const std::string& prefix) {
    for (const auto& d : f.value("details", nlohmann::json::array()))
      if (d.get<std::string>().rfind(prefix, 0) == 0) return d.get<std::string>();
    return std::string();
  };
  const auto saved = detail("saved file in float64: ");
  check(saved.find("(within the bound") != std::string::npos,
        "the Fold panel lists the saved file in float64, within its bound: '" + saved + "'");
  check(!detail("predictions: ").empty(), "the Fold panel lists the prediction flips");
  check(f.value("showFolded", false), "the canvas shows the folded graph");
  // foldnorm::rms_norm (a .pt's default), add_rms_norm (fused) or aten::rms_norm (a .pt2's default).
  const auto& m = f["marks"];
  check(m.value("folded", 0) + m.value("fused", 0) + m.value("portable", 0) > 0,
        "the folded graph marks its RMSNorm nodes");
  check(f["marks"].value("centered", 0) > 0, "the folded graph marks the ops reading centered parameters");
}

void checkToggled(const nlohmann::json& state, const nlohmann::json& analysis) {
  const auto& runs = state["analyses"];
  check(runs.is_array() && runs.size() == 2, "the checkbox flip analysed the model a second time");
  if (!runs.is_array() || runs.size() != 2) return;
  const auto& before = runs[0];
  const auto& after = runs[1];
  std::cout << "      analyses: " << before.dump() << " -> " << after.dump() << "\n";
  check(before.value("foldable", -1) != after.value("foldable", -1),
        "the new settings changed how many LNs fold (" + std::to_string(before.value("foldable", -1)) + " -> " +
            std::to_string(after.value("foldable", -1)) + ")");
  const auto& settings = state["analysisSettings"];
  check(after.value("scaleAbsorb", true) == settings.value("scaleAbsorb", false) &&
            after.value("insertCentering", true) == settings.value("insertCentering", false),
        "the analysis shown was made with the checkboxes' settings");
  check(state["model"].value("foldable", -1) == after.value("foldable", -2),
        "the LN table shows the new analysis' count");
  if (analysis.is_object()) {
    int foldable = 0;
    for (const auto& ln : analysis["layer_norms"]) foldable += ln.value("foldable", false) ? 1 : 0;
    check(foldable == after.value("foldable", -1),
          "foldnorm analyze under the same settings folds as many LNs (" + std::to_string(foldable) + ")");
  }
}

void checkSaved(const nlohmann::json& state) {
  const std::string path = state["fold"].value("savedPath", "");
  check(!path.empty(), "the folded model was saved");
  std::ifstream in(path, std::ios::binary);
  std::string head(4, '\0');
  in.read(head.data(), 4);
  check(in.gcount() == 4, "the saved file " + path + " exists and is not empty");
  check(head.compare(0, 2, "PK") == 0, "the saved file is a zip archive (.pt and .pt2 both are)");
}

}  // namespace

int main(int argc, char** argv) {
  const char* usage =
      "usage: foldnorm-gui-check SHOT.png STATE.json LN_PATH|- [foldable|not-foldable] [--bench SEQS]\n"
      "       [--min-labels N] [--max-ui-median-ms MS] [--analysis A.json] [--first-sight] [--folded]\n"
      "       [--export FILE] [--max-relayout-ms MS] [--toggled] [--reason R] [--mark KIND]... [--saved]\n"
      "       [--runner NAME] [--rms-op NAME]\n";
  if (argc < 4) {
    std::cerr << usage;
    return 2;
  }
  const std::string png = argv[1], statePath = argv[2], ln = argv[3];
  std::string expect, analysisPath, exportPath;
  std::vector<int64_t> benchSeqs;
  int minLabels = 0;
  double maxUiMs = 0, maxRelayoutMs = 0;
  bool firstSight = false, folded = false, toggled = false, saved = false;
  std::string reason, runner, rmsOp;
  std::vector<std::string> marks;
  for (int i = 4; i < argc; ++i) {
    const std::string arg = argv[i];
    try {
      if (arg == "--min-labels" && i + 1 < argc) {
        minLabels = std::stoi(argv[++i]);
        continue;
      }
      if (arg == "--max-relayout-ms" && i + 1 < argc) {
        maxRelayoutMs = std::stod(argv[++i]);
        continue;
      }
      if (arg == "--max-ui-median-ms" && i + 1 < argc) {
        maxUiMs = std::stod(argv[++i]);
        continue;
      }
    } catch (const std::exception&) {
      std::cerr << "foldnorm-gui-check: " << arg << " wants a number\n" << usage;
      return 2;
    }
    if (arg == "--analysis" && i + 1 < argc) {
      analysisPath = argv[++i];
    } else if (arg == "--export" && i + 1 < argc) {
      exportPath = argv[++i];
    } else if (arg == "--first-sight") {
      firstSight = true;
    } else if (arg == "--folded") {
      folded = true;
    } else if (arg == "--toggled") {
      toggled = true;
    } else if (arg == "--saved") {
      saved = true;
    } else if (arg == "--reason" && i + 1 < argc) {
      reason = argv[++i];
    } else if (arg == "--runner" && i + 1 < argc) {
      runner = argv[++i];
    } else if (arg == "--rms-op" && i + 1 < argc) {
      rmsOp = argv[++i];
    } else if (arg == "--mark" && i + 1 < argc) {
      marks.push_back(argv[++i]);
    } else if (arg == "--bench" && i + 1 < argc) {
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
  if (ln == "-") {
    check(sel.is_null(), "nothing is selected at first sight");
  } else {
    check(sel.is_object() && sel.value("modulePath", "") == ln, "selected LN is " + ln);
  }
  if (sel.is_object() && !expect.empty()) {
    check(sel.value("foldable", false) == (expect == "foldable"), "its verdict is " + expect);
  }
  std::vector<std::string> text = state.value("inspectorText", std::vector<std::string>{});
  if (ln != "-") {
    const std::string verdict = sel.is_object() ? sel.value("verdictText", "") : "";
    check(!verdict.empty() && std::find(text.begin(), text.end(), verdict) != text.end(),
          "the inspector showed the verdict text \"" + verdict + "\"");
    check(std::any_of(text.begin(), text.end(),
                      [&](const std::string& t) { return t.find(ln) != std::string::npos; }),
          "the inspector named the LN's module");
    check(!text.empty() && text.size() >= 2 && text[1].rfind("why: ", 0) == 0,
          "the inspector opens with the one-sentence why card");
  }
  std::vector<std::string> panels;
  for (const auto& p : state["panels"]) panels.push_back(p.value("name", ""));
  for (const char* want : {"Graph", "LayerNorms", "Inspector"}) {
    check(std::find(panels.begin(), panels.end(), want) != panels.end(),
          std::string("panel ") + want + " was drawn");
  }
  check(state["canvas"].value("nodesDrawn", 0) > 0, "the canvas drew nodes");
  check(state["lnTableRows"].get<int>() > 0, "the LN table showed rows");
  check(state["frameTimes"]["settled"].value("count", 0) > 0, "frame times were recorded");
  if (minLabels > 0 || maxUiMs > 0 || firstSight) checkFirstSight(state, minLabels, maxUiMs, firstSight);
  nlohmann::json analysis;
  if (!analysisPath.empty()) {
    std::ifstream a(analysisPath);
    try {
      a >> analysis;
      checkBlockCounts(state, analysis);
    } catch (const std::exception& e) {
      check(false, "analysis " + analysisPath + " is JSON: " + e.what());
    }
  }
  if (toggled) checkToggled(state, analysis);
  if (!reason.empty()) {
    check(sel.is_object() && sel.value("reason", "") == reason, "the selected LN's reason is " + reason);
    check(sel.is_object() && sel.value("verdictText", "").find("(" + reason + ")") != std::string::npos,
          "its verdict text (shown in the inspector) names " + reason);
  }
  if (folded) checkFolded(state);
  for (const auto& kind : marks) {
    const int n = state["fold"]["marks"].value(kind, 0);
    check(n > 0, "the folded graph marks " + std::to_string(n) + " node(s) as " + kind);
  }
  if (saved) checkSaved(state);
  if (!runner.empty()) {
    const auto& report = state["bench"]["report"];
    check(report.is_object() && report.value("runner", "") == runner, "the benchmark ran on the " + runner + " runner");
  }
  if (!rmsOp.empty()) {
    const auto& bench = state["bench"];
    check(bench["settings"].value("rmsOp", "") == rmsOp, "the Benchmark panel was set to the " + rmsOp + " RMSNorm op");
    check(bench["report"].is_object() && bench["report"].value("rms_op", "") == rmsOp,
          "the benchmark's report records rms_op " + rmsOp);
  }
  if (maxRelayoutMs > 0) {
    const double ms = state["canvas"].value("relayoutMilliseconds", 1e9);
    std::cout << "      last re-layout (collapse, Graphviz, drawable form): " << ms << " ms\n";
    check(ms < maxRelayoutMs, "the last re-layout took under " + std::to_string(maxRelayoutMs).substr(0, 5) + " ms");
  }
  if (!exportPath.empty()) {
    std::ifstream e(exportPath, std::ios::binary);
    std::string head(64, '\0');
    e.read(head.data(), 64);
    check(e.gcount() > 8 && (head.find("<svg") != std::string::npos || head.find("<?xml") != std::string::npos ||
                             head.compare(1, 3, "PNG") == 0),
          "the exported view " + exportPath + " is an SVG or PNG");
  }
  if (!benchSeqs.empty()) {
    check(std::find(panels.begin(), panels.end(), "Benchmark") != panels.end(),
          "panel Benchmark was drawn");
    checkBench(state, benchSeqs);
  }
  std::cout << (failures ? "FAILED: " + std::to_string(failures) + " check(s)" : "all checks passed")
            << "\n";
  return failures ? 1 : 0;
}
