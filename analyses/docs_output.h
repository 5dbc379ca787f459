// The analyses programs write into docs/: atomically (a temp file renamed over the target), so a
// run that fails half-way never leaves a half-written table behind.
#pragma once

#include <filesystem>
#include <string>

#include "foldnorm/common/write_file.h"

namespace foldnorm::analyses {

inline void writeAtomically(const std::string& path, const std::string& text) {
  if (auto dir = std::filesystem::path(path).parent_path(); !dir.empty()) std::filesystem::create_directories(dir);
  writeFileAtomically(path, text);
}

}  // namespace foldnorm::analyses
