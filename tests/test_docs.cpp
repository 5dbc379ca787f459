// Docs generated from code, or describing it, must not drift from it.
#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "foldnorm/analysis/rules.h"

namespace fs = std::filesystem;

namespace {

std::string readDoc(const std::string& name) {
  std::ifstream in(std::string(FOLDNORM_SOURCE_DIR) + "/docs/" + name);
  REQUIRE(in);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

/// The rows of the table under "## Map of the folders" in docs/design.md, as cells.
std::vector<std::vector<std::string>> folderMapRows(const std::string& design) {
  const auto start = design.find("## Map of the folders");
  REQUIRE(start != std::string::npos);
  std::vector<std::vector<std::string>> rows;
  std::istringstream in(design.substr(start));
  std::string line;
  bool inTable = false;
  while (std::getline(in, line)) {
    const bool tableLine = !line.empty() && line[0] == '|';
    if (inTable && !tableLine) break;  // the first table ends the map
    if (!tableLine) continue;
    inTable = true;
    if (line.rfind("|---", 0) == 0 || line.rfind("| folder", 0) == 0) continue;  // rule, header
    std::vector<std::string> cells;
    std::string cell;
    std::istringstream cellsIn(line.substr(1));
    while (std::getline(cellsIn, cell, '|')) {
      const auto first = cell.find_first_not_of(' '), last = cell.find_last_not_of(' ');
      cells.push_back(first == std::string::npos ? "" : cell.substr(first, last - first + 1));
    }
    rows.push_back(cells);
  }
  return rows;
}

/// The `quoted/` names in a cell: folders (a name in backticks that ends in '/').
std::vector<std::string> folderNames(const std::string& cell) {
  static const std::regex quoted("`([A-Za-z0-9_./-]+/)`");
  std::vector<std::string> names;
  for (std::sregex_iterator it(cell.begin(), cell.end(), quoted), end; it != end; ++it) {
    names.push_back((*it)[1].str());
  }
  return names;
}

bool holdsCode(const fs::path& folder) {
  static const std::set<std::string> code = {".cpp", ".h", ".hpp", ".cu", ".cuh", ".py"};
  for (const auto& entry : fs::directory_iterator(folder)) {
    if (entry.is_regular_file() && code.count(entry.path().extension().string())) return true;
  }
  return false;
}

}  // namespace

TEST_CASE("docs/rules.md is the registry's own table", "[docs][analysis]") {
  INFO("regenerate with: build/bin/foldnorm rules > docs/rules.md");
  CHECK(readDoc("rules.md") == foldnorm::rulesMarkdown());
}

// How the map is written: a row's first cell names its folders (`common/`, or `zoo/`, `train/`),
// which live under src/ and include/foldnorm/ (`common/` is both) or, from `gui/` on, at the top
// of the repository; the other cells name subfolders in backticks with a trailing '/', relative
// to the row's folder (`rules/`), to src/ and include/foldnorm/ (`import/export/`) or to the top
// (`tests/fixtures/`). So: every name must be a folder in one of those places, and every folder
// that holds code (a .cpp, .h, .cu or .py file of its own) must be one of the folders named.
TEST_CASE("docs/design.md's map of the folders matches the tree", "[docs]") {
  const fs::path root(FOLDNORM_SOURCE_DIR);
  const auto rows = folderMapRows(readDoc("design.md"));
  REQUIRE(rows.size() >= 10);
  const std::vector<fs::path> bases = {root / "src", root / "include" / "foldnorm", root};

  std::set<fs::path> listed;
  for (const auto& row : rows) {
    REQUIRE(row.size() >= 2);
    const auto rowFolders = folderNames(row[0]);
    INFO("the map's row " << row[0]);
    CHECK_FALSE(rowFolders.empty());
    std::vector<fs::path> rowPlaces;  // where the row's own folders are
    for (const auto& name : rowFolders) {
      bool found = false;
      for (const auto& base : bases) {
        if (fs::is_directory(base / name)) {
          listed.insert(fs::canonical(base / name));
          rowPlaces.push_back(base / name);
          found = true;
        }
      }
      if (!found) FAIL_CHECK("docs/design.md's map lists `" << name << "`, but no folder src/" << name
                             << ", include/foldnorm/" << name << " or " << name << " exists");
    }
    for (std::size_t c = 1; c < row.size(); ++c) {
      for (const auto& name : folderNames(row[c])) {
        bool found = false;
        std::vector<fs::path> places = rowPlaces;
        places.insert(places.end(), bases.begin(), bases.end());
        for (const auto& place : places) {
          if (fs::is_directory(place / name)) {
            listed.insert(fs::canonical(place / name));
            found = true;
          }
        }
        if (!found) FAIL_CHECK("docs/design.md's map names the folder `" << name << "` in the row "
                               << row[0] << ", but it exists neither in that row's folder nor under "
                               << "src/, include/foldnorm/ or the top");
      }
    }
  }

  std::vector<std::string> missing;
  for (const char* top : {"src", "include/foldnorm", "gui", "python", "tests", "analyses"}) {
    const fs::path start = root / top;
    REQUIRE(fs::is_directory(start));
    std::vector<fs::path> folders{start};
    for (auto it = fs::recursive_directory_iterator(start); it != fs::recursive_directory_iterator(); ++it) {
      if (!it->is_directory()) continue;
      const auto name = it->path().filename().string();
      if (name == "__pycache__" || name[0] == '.') {
        it.disable_recursion_pending();  // Python's caches, hidden tool folders
        continue;
      }
      folders.push_back(it->path());
    }
    for (const auto& folder : folders) {
      if (!holdsCode(folder) || listed.count(fs::canonical(folder))) continue;
      missing.push_back(fs::relative(folder, root).string());
    }
  }
  std::sort(missing.begin(), missing.end());
  for (const auto& folder : missing) {
    FAIL_CHECK("the folder " << folder << "/ holds code, but docs/design.md's map of the folders does "
               "not list it: give it a row, or name it as `" << folder << "/` (or relative to its "
               "row's folder) in the row it belongs to");
  }
}

namespace {

std::size_t lineCount(const fs::path& file) {
  std::ifstream in(file);
  std::size_t n = 0;
  for (std::string line; std::getline(in, line);) ++n;
  return n;
}

}  // namespace

TEST_CASE("no source file passes 600 lines counted with its own header", "[docs]") {
  // docs/design.md's rule: a .cpp (or .cu) together with its header (the same name beside it, or
  // under include/foldnorm/ at the same place), and every header that has no source of its own.
  constexpr std::size_t kLimit = 600;
  const fs::path root(FOLDNORM_SOURCE_DIR);
  std::set<fs::path> counted;  // headers counted with their source
  std::vector<std::string> over;
  std::size_t sources = 0;
  for (const char* top : {"src", "gui", "python/src"}) {
    for (const auto& entry : fs::recursive_directory_iterator(root / top)) {
      const auto ext = entry.path().extension().string();
      if (!entry.is_regular_file() || (ext != ".cpp" && ext != ".cu")) continue;
      ++sources;
      const auto stem = entry.path().stem().string();
      const auto rel = fs::relative(entry.path().parent_path(), root / "src");
      std::vector<fs::path> headers{entry.path().parent_path() / (stem + ".h")};
      if (std::string(top) == "src") headers.push_back(root / "include" / "foldnorm" / rel / (stem + ".h"));
      std::size_t n = lineCount(entry.path());
      std::string with;
      for (const auto& h : headers) {
        if (!fs::exists(h)) continue;
        n += lineCount(h);
        counted.insert(fs::canonical(h));
        with += " + " + fs::relative(h, root).string();
      }
      if (n > kLimit) over.push_back(fs::relative(entry.path(), root).string() + with + ": " + std::to_string(n));
    }
  }
  for (const char* top : {"src", "include/foldnorm", "gui", "python/src"}) {
    for (const auto& entry : fs::recursive_directory_iterator(root / top)) {
      if (!entry.is_regular_file() || entry.path().extension() != ".h" || counted.count(fs::canonical(entry.path())))
        continue;
      const auto n = lineCount(entry.path());
      if (n > kLimit) over.push_back(fs::relative(entry.path(), root).string() + ": " + std::to_string(n));
    }
  }
  CHECK(sources > 100);  // the walk found the tree
  for (const auto& file : over)
    FAIL_CHECK(file << " lines, over the " << kLimit << "-line limit (docs/design.md): split it where it has two jobs");
}
