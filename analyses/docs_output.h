// The analyses programs write into docs/: atomically (a temp file renamed over the target), so a
// run that fails half-way never leaves a half-written table behind.
#pragma once

#include <filesystem>
#include <fstream>
#include <string>

#include "foldnorm/common/error.h"

namespace foldnorm::analyses {

inline void writeAtomically(const std::string& path, const std::string& text) {
  namespace fs = std::filesystem;
  if (auto dir = fs::path(path).parent_path(); !dir.empty()) fs::create_directories(dir);
  auto tmp = path + ".tmp";
  {
    std::ofstream f(tmp);
    f << text;
    if (!f) throw Error("cannot write " + tmp);
  }
  fs::rename(tmp, path);
}

}  // namespace foldnorm::analyses
