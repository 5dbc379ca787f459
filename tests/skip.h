// A test that cannot run here says so and is counted as skipped, never as passed. Catch2 v2 has
// no SKIP: skipTest(why) prints "SKIPPED: why" and counts it, the test returns right after, and
// the runner (tests/main.cpp) exits with kSkipExitCode when nothing failed but something was
// skipped. ctest maps that code to "Skipped" (SKIP_RETURN_CODE in tests/CMakeLists.txt).
// Torch-free, so every test executable can use it.
#pragma once

#include <iostream>
#include <string>

namespace foldnorm::test {

/// Automake's code for a skipped test; no other exit of the runner uses it (see runnerExitCode).
inline constexpr int kSkipExitCode = 77;

inline int& skippedTests() {
  static int count = 0;
  return count;
}

/// Call as `return skipTest("no CUDA device");` before the test checks anything.
inline void skipTest(const std::string& why) {
  std::cout << "SKIPPED: " << why << std::endl;
  ++skippedTests();
}

/// Catch's result as the runner's exit code: Catch returns the number of failed assertions,
/// which could be 77; any failure is 1 here, a clean run that skipped something kSkipExitCode.
inline int runnerExitCode(int catchResult) {
  if (catchResult != 0) return 1;
  return skippedTests() > 0 ? kSkipExitCode : 0;
}

}  // namespace foldnorm::test
