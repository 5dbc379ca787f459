// One line from a LibTorch message (see include/foldnorm/common/error.h).
#include "foldnorm/common/error.h"

#include <sstream>
#include <vector>

namespace foldnorm {
namespace {

std::vector<std::string> lines(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  std::string line;
  while (std::getline(in, line)) out.push_back(line);
  return out;
}

std::string trimmed(const std::string& s) {
  auto b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) return {};
  auto e = s.find_last_not_of(" \t\r");
  return s.substr(b, e - b + 1);
}

/// "RuntimeError: x" -> "x" (the interpreter's closing line names the Python exception type).
std::string withoutExceptionType(const std::string& s) {
  for (const char* type : {"RuntimeError: ", "TypeError: ", "ValueError: ", "IndexError: ", "AssertionError: ",
                           "NotImplementedError: "})
    if (s.rfind(type, 0) == 0) return s.substr(std::string(type).size());
  return s;
}

}  // namespace

std::string firstLine(const std::string& s) {
  std::size_t start = s.find_first_not_of('\n');  // TorchScript compiler messages start with one
  if (start == std::string::npos) return {};
  auto nl = s.find('\n', start);
  return s.substr(start, nl == std::string::npos ? std::string::npos : nl - start);
}

std::string withoutBacktrace(const std::string& what) {
  // c10::Error::what() appends "Exception raised from F at FILE:LINE (most recent call first):"
  // and "frame #N: ..." lines after the message (older builds start straight with the frames).
  for (const char* start : {"Exception raised from ", "frame #0: "}) {
    for (auto at = what.find(start); at != std::string::npos; at = what.find(start, at + 1))
      if (at == 0 || what[at - 1] == '\n') return what.substr(0, at);
  }
  return what;
}

std::string errorCause(const std::string& full) {
  const std::string what = withoutBacktrace(full);
  if (what.find("Traceback of TorchScript") == std::string::npos &&
      what.find("operation failed in the TorchScript interpreter") == std::string::npos)
    return firstLine(what);
  const auto all = lines(what);
  // The cause: the last line that says something (the frames come before it).
  std::string cause;
  std::size_t causeAt = all.size();
  for (std::size_t i = all.size(); i-- > 0;) {
    auto t = trimmed(all[i]);
    if (t.empty()) continue;
    cause = withoutExceptionType(t);
    causeAt = i;
    break;
  }
  // The op: the code the "<--- HERE" marker underlines (the last such frame is the innermost).
  std::string op;
  for (std::size_t i = 1; i < all.size(); ++i) {
    const auto& marker = all[i];
    if (marker.find("<--- HERE") == std::string::npos) continue;
    auto from = marker.find('~');
    if (from == std::string::npos) continue;
    auto to = marker.find_first_not_of('~', from);
    const auto& code = all[i - 1];
    if (from < code.size()) op = trimmed(code.substr(from, (to == std::string::npos ? code.size() : to) - from));
  }
  // The source line: the recorded Python frames of the original code ("path/file.py(N): fn"),
  // innermost first; the first outside torch itself is the model's code that made the call.
  std::string where, fallback;
  for (std::size_t i = 0; i < causeAt; ++i) {
    auto t = trimmed(all[i]);
    auto open = t.rfind('('), close = t.rfind("):");
    if (open == std::string::npos || close == std::string::npos || close < open || t.find(".py") == std::string::npos)
      continue;
    auto path = t.substr(0, open);
    auto file = path.substr(path.find_last_of('/') == std::string::npos ? 0 : path.find_last_of('/') + 1);
    auto frame = file + ":" + t.substr(open + 1, close - open - 1);
    if (fallback.empty()) fallback = frame;
    if (where.empty() && path.find("/torch/") == std::string::npos) where = frame;
  }
  if (where.empty()) where = fallback;
  std::string out = op;
  if (!where.empty()) out += (out.empty() ? "at " : " at ") + where;
  if (cause.empty()) cause = firstLine(what);
  return out.empty() ? cause : out + ": " + cause;
}

std::string pythonSourceLine(const std::string& stackTrace) {
  std::string where, fallback;
  for (const auto& line : lines(stackTrace)) {
    auto file = line.find("File \"");
    if (file == std::string::npos) continue;
    auto close = line.find('"', file + 6);
    auto at = line.find(", line ", close == std::string::npos ? file : close);
    if (close == std::string::npos || at == std::string::npos) continue;
    const auto path = line.substr(file + 6, close - file - 6);
    auto slash = path.find_last_of('/');
    auto digits = line.substr(at + 7);
    digits = digits.substr(0, digits.find_first_not_of("0123456789"));
    if (digits.empty()) continue;
    const auto frame = (slash == std::string::npos ? path : path.substr(slash + 1)) + ":" + digits;
    // Innermost last; the model's own code is the last frame outside torch itself.
    fallback = frame;
    if (path.find("/torch/") == std::string::npos) where = frame;
  }
  return where.empty() ? fallback : where;
}

}  // namespace foldnorm
