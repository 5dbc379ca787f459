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

/// The first non-empty line of a message (LibTorch's carry a C++ backtrace after it; the
/// TorchScript compiler's start with a newline).
std::string firstLine(const std::string& s);

/// A LibTorch message without the C++ backtrace c10::Error::what() appends ("Exception raised
/// from ..." and "frame #N: ..." lines); any other message unchanged. For code that sees only
/// std::exception (no LibTorch headers: the GUI).
std::string withoutBacktrace(const std::string& what);

/// One line that keeps a LibTorch error's cause. A failure inside the TorchScript interpreter
/// reads "The following operation failed in the TorchScript interpreter." first and its cause
/// last, after the frames: this gives "OP at FILE:LINE: CAUSE" (the op the interpreter's marker
/// underlines, the innermost frame of the original Python code outside torch itself, the closing
/// line without its exception type), each part where the message has it. Any other message: its
/// first line. A C++ backtrace after the message is dropped first (withoutBacktrace).
std::string errorCause(const std::string& what);

/// "file.py:N" of the innermost frame of a Python stack trace ('File "/x/file.py", line N, in f'
/// lines, as torch.export records a node's `stack_trace`) outside torch itself (the model's code
/// that made the call), else the innermost; "" where there is none.
std::string pythonSourceLine(const std::string& stackTrace);

}  // namespace foldnorm
