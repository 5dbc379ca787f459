#include "bench_support.h"

#include <algorithm>
#include <cctype>
#include <stdexcept>

namespace foldnorm::gui {

std::vector<int64_t> parseSequenceLengths(const std::string& text) {
  std::vector<int64_t> seqs;
  std::string token;
  auto take = [&] {
    if (token.empty()) return;
    std::size_t used = 0;
    long long value = 0;
    try {
      value = std::stoll(token, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != token.size()) {
      throw std::invalid_argument("sequence length '" + token + "' is not a whole number");
    }
    if (value <= 0) {
      throw std::invalid_argument("sequence length " + token + " must be positive");
    }
    if (std::find(seqs.begin(), seqs.end(), value) != seqs.end()) {
      throw std::invalid_argument("sequence length " + token + " is given twice");
    }
    seqs.push_back(value);
    token.clear();
  };
  for (char c : text) {
    if (c == ',' || std::isspace(static_cast<unsigned char>(c))) take();
    else token += c;
  }
  take();
  return seqs;
}

std::string formatSequenceLengths(const std::vector<int64_t>& seqs) {
  std::string s;
  for (auto v : seqs) s += (s.empty() ? "" : ",") + std::to_string(v);
  return s;
}

LineCallbackBuf::LineCallbackBuf(std::function<void(const std::string&)> onLine)
    : onLine_(std::move(onLine)) {}

LineCallbackBuf::~LineCallbackBuf() { flushRemainder(); }

void LineCallbackBuf::flushRemainder() {
  if (pending_.empty()) return;
  std::string line;
  line.swap(pending_);
  onLine_(line);
}

LineCallbackBuf::int_type LineCallbackBuf::overflow(int_type ch) {
  if (traits_type::eq_int_type(ch, traits_type::eof())) return traits_type::not_eof(ch);
  const char c = traits_type::to_char_type(ch);
  xsputn(&c, 1);
  return ch;
}

std::streamsize LineCallbackBuf::xsputn(const char* s, std::streamsize n) {
  for (std::streamsize i = 0; i < n; ++i) {
    if (s[i] == '\n') {
      std::string line;
      line.swap(pending_);
      onLine_(line);
    } else {
      pending_ += s[i];
    }
  }
  return n;
}

std::vector<BenchBar> layoutBenchBars(const std::vector<BenchBarGroup>& groups, float width,
                                      float height) {
  std::vector<BenchBar> bars;
  if (groups.empty() || width <= 0 || height <= 0) return bars;
  double top = 0;
  for (const auto& g : groups) {
    top = std::max({top, g.original, g.originalHi, g.folded, g.foldedHi});
  }
  if (top <= 0) return bars;
  auto y = [&](double v) {
    return height - static_cast<float>(std::clamp(v, 0.0, top) / top) * height;
  };
  const float groupWidth = width / static_cast<float>(groups.size());
  // Two bars of 30% of the group's width each (at most 48 px), side by side at its middle.
  const float bar = std::min(groupWidth * 0.3f, 48.0f);
  for (std::size_t i = 0; i < groups.size(); ++i) {
    const auto& g = groups[i];
    const float mid = groupWidth * (static_cast<float>(i) + 0.5f);
    for (int k = 0; k < 2; ++k) {
      BenchBar b;
      b.group = static_cast<int>(i);
      b.folded = k == 1;
      b.x0 = k == 0 ? mid - bar - 1 : mid + 1;
      b.x1 = b.x0 + bar;
      b.value = k == 0 ? g.original : g.folded;
      b.top = y(b.value);
      b.whiskerTop = y(k == 0 ? g.originalHi : g.foldedHi);
      b.whiskerBottom = y(k == 0 ? g.originalLo : g.foldedLo);
      bars.push_back(b);
    }
  }
  return bars;
}

}  // namespace foldnorm::gui
