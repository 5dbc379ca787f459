// How the analyses programs report a failure: one line that keeps its cause (the op and reason a
// TorchScript interpreter error closes with, errorCause), never LibTorch's C++ backtrace, and exit
// status 1. Every program's main catches std::exception once and returns this.
#pragma once

#include <c10/util/Exception.h>

#include <exception>
#include <iostream>
#include <string>

#include "foldnorm/common/error.h"

namespace foldnorm::analyses {

inline int reportFailure(const char* program, const std::exception& e) {
  std::string line;
  if (const auto* c10 = dynamic_cast<const c10::Error*>(&e)) {
    line = errorCause(c10->what_without_backtrace());
  } else if (dynamic_cast<const Error*>(&e)) {
    line = e.what();  // our own messages are written to be read whole
  } else {
    line = errorCause(e.what());
  }
  std::cerr << program << ": error: " << (line.empty() ? "(no message)" : line) << "\n";
  return 1;
}

}  // namespace foldnorm::analyses
