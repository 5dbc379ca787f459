// What every timing harness shares (bench-norm, bench, bench-analysis, the analyses programs):
// quantiles of samples, the machine's load average said with the numbers, and printf-style
// formatting (torch-facing code cannot use the system {fmt}: LibTorch bundles its own headers).
#pragma once

#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

namespace foldnorm {

/// The q-quantile of the samples (linear interpolation between order statistics); 0 if none.
inline double quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double pos = q * static_cast<double>(v.size() - 1);
  const auto lo = static_cast<std::size_t>(pos);
  const auto hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (pos - static_cast<double>(lo));
}

/// The 1-minute load average from /proc/loadavg; -1 where there is none.
inline double loadAverage() {
  std::ifstream in("/proc/loadavg");
  double one = -1;
  if (!(in >> one)) return -1;
  return one;
}

/// printf into a std::string.
inline std::string format(const char* pattern, ...) __attribute__((format(printf, 1, 2)));
inline std::string format(const char* pattern, ...) {
  va_list args;
  va_start(args, pattern);
  va_list copy;
  va_copy(copy, args);
  const int size = std::vsnprintf(nullptr, 0, pattern, copy);
  va_end(copy);
  std::string s(static_cast<std::size_t>(std::max(size, 0)), '\0');
  std::vsnprintf(s.data(), s.size() + 1, pattern, args);
  va_end(args);
  return s;
}

}  // namespace foldnorm
