// "file.py:123" of a node, from the source range its trace kept.
#include <filesystem>

#include "steps.h"

namespace foldnorm::torchscript {

std::string sourceLocation(const torch::jit::Node* node) {
  auto range = node->sourceRange();
  if (auto original = range.findSourceRangeThatGenerated()) range = *original;
  auto flc = range.file_line_col();
  if (!flc) return {};
  auto [file, line, col] = *flc;
  (void)col;
  if (file.empty()) return {};
  return std::filesystem::path(file).filename().string() + ":" + std::to_string(line);
}

}  // namespace foldnorm::torchscript
