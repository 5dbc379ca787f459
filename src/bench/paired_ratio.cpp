// The paired-ratio statistics of `foldnorm bench` (bench/bench_model.h): the median of per-round
// original/folded ratios with a percentile-bootstrap interval, over one or several parameter layouts.
#include <cstddef>
#include <cstdint>
#include <random>
#include <stdexcept>
#include <vector>

#include "foldnorm/bench/bench_model.h"
#include "foldnorm/common/measure.h"

namespace foldnorm::bench {

PairedRatio pairedRatio(const std::vector<double>& ratios, uint64_t seed, int resamples) {
  return pairedRatioByLayout({ratios}, seed, resamples);
}

PairedRatio pairedRatioByLayout(const std::vector<std::vector<double>>& ratiosByLayout, uint64_t seed, int resamples) {
  std::vector<double> ratios;
  for (const auto& g : ratiosByLayout) {
    if (g.empty()) throw std::invalid_argument("pairedRatio: a layout without rounds");
    ratios.insert(ratios.end(), g.begin(), g.end());
  }
  if (ratios.size() < 2) throw std::invalid_argument("pairedRatio: at least two ratios are needed");
  if (resamples < 100) throw std::invalid_argument("pairedRatio: at least 100 resamples are needed");
  // Percentile bootstrap of the median: rounds are resampled whole, so each keeps its own pair of
  // back-to-back runs; a fixed seed makes the interval a function of the ratios. Under several
  // layouts, first the layouts are drawn with replacement (their spread is part of the
  // uncertainty: one layout is one draw of where the weights lie), then rounds within each.
  std::mt19937_64 generator(seed);
  const std::size_t groups = ratiosByLayout.size();
  std::uniform_int_distribution<std::size_t> pickGroup(0, groups - 1);
  std::vector<double> medians(static_cast<std::size_t>(resamples)), sample;
  sample.reserve(ratios.size());
  for (auto& m : medians) {
    sample.clear();
    for (std::size_t k = 0; k < groups; ++k) {
      const auto& g = ratiosByLayout[groups == 1 ? 0 : pickGroup(generator)];
      std::uniform_int_distribution<std::size_t> pick(0, g.size() - 1);
      for (std::size_t i = 0; i < g.size(); ++i) sample.push_back(g[pick(generator)]);
    }
    m = quantile(sample, 0.5);
  }
  PairedRatio p;
  p.median = quantile(ratios, 0.5);
  p.low = quantile(medians, 0.025);
  p.high = quantile(medians, 0.975);
  p.rounds = static_cast<int>(ratios.size());
  // Below 10 rounds a percentile bootstrap of a median is too coarse to trust either way (a 4-round
  // run on a loaded machine can look "slower" by chance).
  constexpr std::size_t kMinRoundsToDecide = 10;
  if (ratios.size() < kMinRoundsToDecide) p.verdict = "too few rounds";
  else p.verdict = p.low > 1 ? "faster" : p.high < 1 ? "slower" : "within noise";
  return p;
}

}  // namespace foldnorm::bench
