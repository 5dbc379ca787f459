// What every timing harness shares (bench-norm, bench, bench-analysis, the analyses programs):
// quantiles of samples, the machine's load average said with the numbers, printf-style
// formatting and byte counts in words (torch-facing code cannot use the system {fmt}: LibTorch bundles its own headers).
#pragma once

#include <algorithm>
#include <cstdarg>
#include <cstdint>
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

/// A byte count for people: "512 B", "3.0 KiB", "1.5 MiB", "5.85 GiB".
inline std::string humanBytes(int64_t b) {
  if (b >= (int64_t{1} << 30)) return format("%.2f GiB", static_cast<double>(b) / static_cast<double>(int64_t{1} << 30));
  if (b >= (int64_t{1} << 20)) return format("%.1f MiB", static_cast<double>(b) / static_cast<double>(int64_t{1} << 20));
  if (b >= (int64_t{1} << 10)) return format("%.1f KiB", static_cast<double>(b) / static_cast<double>(int64_t{1} << 10));
  return format("%lld B", static_cast<long long>(b));
}

}  // namespace foldnorm
