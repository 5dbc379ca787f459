// The benchmark panel's pure parts: the sequence lengths field, the progress line splitter and
// the bar chart's geometry.
#include <catch2/catch.hpp>

#include <ostream>
#include <stdexcept>

#include "bench_support.h"

using namespace foldnorm::gui;

TEST_CASE("Benchmark panel: sequence lengths field", "[gui][bench]") {
  CHECK(parseSequenceLengths("64,128") == std::vector<int64_t>{64, 128});
  CHECK(parseSequenceLengths(" 64, 128 ") == std::vector<int64_t>{64, 128});
  CHECK(parseSequenceLengths("16 32\t8") == std::vector<int64_t>{16, 32, 8});
  CHECK(parseSequenceLengths("").empty());
  CHECK(parseSequenceLengths(" , ").empty());
  CHECK_THROWS_AS(parseSequenceLengths("64,abc"), std::invalid_argument);
  CHECK_THROWS_AS(parseSequenceLengths("64x"), std::invalid_argument);
  CHECK_THROWS_AS(parseSequenceLengths("0"), std::invalid_argument);
  CHECK_THROWS_AS(parseSequenceLengths("-16"), std::invalid_argument);
  CHECK_THROWS_AS(parseSequenceLengths("16,16"), std::invalid_argument);
  try {
    parseSequenceLengths("64,12a");
    FAIL("no exception");
  } catch (const std::invalid_argument& e) {
    CHECK(std::string(e.what()).find("12a") != std::string::npos);
  }
  CHECK(formatSequenceLengths({64, 128}) == "64,128");
  CHECK(parseSequenceLengths(formatSequenceLengths({3, 1, 2})) == std::vector<int64_t>{3, 1, 2});
}

TEST_CASE("Benchmark panel: progress stream hands over whole lines", "[gui][bench]") {
  std::vector<std::string> lines;
  {
    LineCallbackBuf buf([&](const std::string& l) { lines.push_back(l); });
    std::ostream out(&buf);
    out << "[bench] importing" << "\n" << std::flush;
    CHECK(lines == std::vector<std::string>{"[bench] importing"});
    out << "seq 16: round " << 1 << "/4";
    CHECK(lines.size() == 1);  // not a whole line yet
    out << '\n' << "a\nb\n\n" << "tail";
    CHECK(lines == std::vector<std::string>{"[bench] importing", "seq 16: round 1/4", "a", "b", ""});
  }
  CHECK(lines.back() == "tail");  // the destructor hands over the unterminated rest
}

TEST_CASE("Benchmark panel: bar chart geometry", "[gui][bench]") {
  // Two lengths; the tallest whisker (p90 of seq 128's original, 20 ms) reaches the top.
  std::vector<BenchBarGroup> groups{{"seq 64", 5, 4, 6, 4, 3.5, 5},
                                    {"seq 128", 10, 9, 20, 8, 7, 9}};
  const float width = 400, height = 100;
  const auto bars = layoutBenchBars(groups, width, height);
  REQUIRE(bars.size() == 4);
  CHECK(bars[0].group == 0);
  CHECK_FALSE(bars[0].folded);
  CHECK(bars[1].folded);
  CHECK(bars[2].group == 1);
  // Heights on one scale from 0 (the baseline, y = height) to the largest p90 (y = 0).
  CHECK(bars[2].whiskerTop == Approx(0));
  CHECK(bars[2].top == Approx(50));          // 10 of 20 ms
  CHECK(bars[3].top == Approx(60));          // 8 ms
  CHECK(bars[0].top == Approx(75));          // 5 ms
  CHECK(bars[0].whiskerBottom == Approx(80));  // p10 4 ms
  CHECK(bars[1].value == 4);
  for (const auto& b : bars) {
    CHECK(b.x0 < b.x1);
    CHECK(b.whiskerTop <= b.top);
    CHECK(b.top <= b.whiskerBottom);
    CHECK(b.x0 >= 0);
    CHECK(b.x1 <= width);
  }
  // Each pair sits in its own half, original left of folded, not overlapping.
  CHECK(bars[0].x1 <= bars[1].x0);
  CHECK(bars[1].x1 <= width / 2);
  CHECK(bars[2].x0 >= width / 2);
  CHECK(bars[2].x1 <= bars[3].x0);
  // Nothing to draw: no groups, no room, or all zero.
  CHECK(layoutBenchBars({}, width, height).empty());
  CHECK(layoutBenchBars(groups, 0, height).empty());
  CHECK(layoutBenchBars({{"seq 1", 0, 0, 0, 0, 0, 0}}, width, height).empty());
}
