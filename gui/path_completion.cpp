#include "path_completion.h"

#include <algorithm>
#include <filesystem>

namespace foldnorm::gui {

namespace fs = std::filesystem;

std::string directoryPart(const std::string& typed) {
  auto slash = typed.rfind('/');
  return slash == std::string::npos ? std::string() : typed.substr(0, slash + 1);
}

std::string basenamePart(const std::string& typed) {
  auto slash = typed.rfind('/');
  return slash == std::string::npos ? typed : typed.substr(slash + 1);
}

std::string joinPath(const std::string& directory, const std::string& entry) {
  return directory + entry;
}

std::vector<std::string> listDirectory(const std::string& directory, std::string* error) {
  std::vector<std::string> dirs, files;
  error->clear();
  std::error_code ec;
  fs::directory_iterator it(directory.empty() ? fs::path(".") : fs::path(directory), ec);
  if (ec) {
    *error = "cannot list " + (directory.empty() ? std::string(".") : directory) + ": " + ec.message();
    return {};
  }
  for (const auto& entry : it) {
    const std::string name = entry.path().filename().string();
    std::error_code typeError;
    if (entry.is_directory(typeError)) dirs.push_back(name + "/");
    else if (entry.path().extension() == ".pt" || entry.path().extension() == ".pt2") files.push_back(name);
  }
  std::sort(dirs.begin(), dirs.end());
  std::sort(files.begin(), files.end());
  dirs.insert(dirs.end(), files.begin(), files.end());
  return dirs;
}

std::string completePath(const std::string& typed, const std::vector<std::string>& entries) {
  const std::string prefix = basenamePart(typed);
  std::string common;
  bool first = true;
  for (const auto& e : entries) {
    if (e.compare(0, prefix.size(), prefix) != 0) continue;
    if (first) {
      common = e;
      first = false;
      continue;
    }
    std::size_t n = 0;
    while (n < common.size() && n < e.size() && common[n] == e[n]) ++n;
    common.resize(n);
  }
  if (first || common.size() <= prefix.size()) return typed;
  return directoryPart(typed) + common;
}

}  // namespace foldnorm::gui
