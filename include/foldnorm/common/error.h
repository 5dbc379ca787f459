// Errors a user can cause (bad path, wrong input spec, unsupported op). Thrown anywhere, caught
// once at the CLI/GUI and shown as one line without a stack.
#pragma once

#include <stdexcept>
#include <string>

namespace foldnorm {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

}  // namespace foldnorm
