// foldnorm-gui-check SHOT.png STATE.json LN_PATH [foldable|not-foldable]
// The screenshot test's judge (gui/tests/screenshot_test.cmake): the PNG is a real picture (many
// colours, most pixels not the background) and the dump says the frame showed the selected LN's
// verdict in the inspector, with the canvas and the table drawn. Reads the files only; it never
// asks the GUI anything.
#include <algorithm>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include <stb_image.h>

namespace {

int failures = 0;

void check(bool ok, const std::string& what) {
  std::cout << (ok ? "ok    " : "FAIL  ") << what << "\n";
  if (!ok) ++failures;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::cerr << "usage: foldnorm-gui-check SHOT.png STATE.json LN_PATH [foldable|not-foldable]\n";
    return 2;
  }
  const std::string png = argv[1], statePath = argv[2], ln = argv[3];
  const std::string expect = argc > 4 ? argv[4] : "";

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
  std::cout << (failures ? "FAILED: " + std::to_string(failures) + " check(s)" : "all checks passed")
            << "\n";
  return failures ? 1 : 0;
}
