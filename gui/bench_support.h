// The benchmark panel's pure parts, tested alone (gui/tests/test_gui_bench.cpp): the sequence
// lengths field, a stream that hands the library's progress lines to a callback, and the bar
// chart's geometry (original vs folded per length, with p10-p90 whiskers).
#pragma once

#include <cstdint>
#include <functional>
#include <streambuf>
#include <string>
#include <vector>

namespace foldnorm::gui {

/// "64,128", "64 128" or "64, 128" -> {64, 128}; empty or blank -> {} (the spec's own length).
/// Throws std::invalid_argument naming the bad entry (not a number, not positive, duplicated).
std::vector<int64_t> parseSequenceLengths(const std::string& text);
/// {64, 128} -> "64,128".
std::string formatSequenceLengths(const std::vector<int64_t>& seqs);

/// A streambuf that calls `onLine` with every complete line written to it (without the '\n');
/// a last line without '\n' is handed over by flushRemainder() (or the destructor).
class LineCallbackBuf : public std::streambuf {
 public:
  explicit LineCallbackBuf(std::function<void(const std::string&)> onLine);
  ~LineCallbackBuf() override;
  void flushRemainder();

 protected:
  int_type overflow(int_type ch) override;
  std::streamsize xsputn(const char* s, std::streamsize n) override;

 private:
  std::function<void(const std::string&)> onLine_;
  std::string pending_;
};

/// One length's timings for the chart: medians and p10/p90 of both models, in ms.
struct BenchBarGroup {
  std::string label;  // "seq 64"
  double original = 0, originalLo = 0, originalHi = 0;
  double folded = 0, foldedLo = 0, foldedHi = 0;
};

/// A bar in chart coordinates: x right, y down, (0,0) the top left of the plot area.
struct BenchBar {
  int group = 0;
  bool folded = false;
  float x0 = 0, x1 = 0;    // left and right edge
  float top = 0;           // y of the median (the baseline is at `height`)
  float whiskerTop = 0;    // y of p90
  float whiskerBottom = 0; // y of p10
  double value = 0;        // the median, ms
};

/// Two bars per group (original, then folded), groups side by side across `width`, heights on a
/// common scale from 0 to the largest p90, so the tallest whisker just reaches the top.
std::vector<BenchBar> layoutBenchBars(const std::vector<BenchBarGroup>& groups, float width,
                                      float height);

}  // namespace foldnorm::gui
