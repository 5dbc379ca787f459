// Centering one checkpoint tensor in its own dtype (centerInPlace in fold_checkpoint.h).
//
// The tensor is viewed as [pre, n, post] around the centered axis, with n split into `groups`
// parts of m = n / groups. Pass 1 sums each (pre, group, post) column in float64; pass 2 writes
// x - mean rounded to the dtype once, and sums the rounded values and their magnitudes, so the
// check the result carries (worst |sum| / sum|x| of a group) is of the values written. Extra
// memory: one float64 per column (the tensor divided by m), not a float64 copy of the tensor.
// A plan with several actions for one tensor (rare) is applied on a float64 copy instead, with
// one rounding at the end, as the eager fold (python/foldnorm/_fold.py) does.
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "foldnorm/checkpoint/fold_checkpoint.h"
#include "foldnorm/common/error.h"

namespace foldnorm::checkpoint {
namespace {

// The 16-bit types round as torch's double -> bfloat16/half does: through float.
template <typename T> inline double toDouble(T x) { return static_cast<double>(static_cast<float>(x)); }
template <> inline double toDouble<double>(double x) { return x; }
template <typename T> inline T fromDouble(double x) { return static_cast<T>(static_cast<float>(x)); }
template <> inline double fromDouble<double>(double x) { return x; }

struct Geometry {
  int64_t pre = 1, n = 1, post = 1, groups = 1, m = 1;
};

Geometry geometry(const std::vector<int64_t>& shape, int axis, int groups) {
  Geometry g;
  for (int d = 0; d < axis; ++d) g.pre *= shape[d];
  g.n = shape[axis];
  for (std::size_t d = axis + 1; d < shape.size(); ++d) g.post *= shape[d];
  g.groups = groups;
  g.m = g.n / groups;
  return g;
}

template <typename T, typename Out>
double centerOne(T* x, const Geometry& g, Out* out) {
  const int64_t columns = g.pre * g.groups * g.post;
  std::vector<double> mean(columns, 0.0);
  for (int64_t p = 0; p < g.pre; ++p)
    for (int64_t k = 0; k < g.n; ++k) {
      const T* row = x + (p * g.n + k) * g.post;
      double* acc = mean.data() + (p * g.groups + k / g.m) * g.post;
      for (int64_t q = 0; q < g.post; ++q) acc[q] += toDouble(row[q]);
    }
  for (auto& v : mean) v /= static_cast<double>(g.m);
  std::vector<double> sum(columns, 0.0), mag(columns, 0.0);
  for (int64_t p = 0; p < g.pre; ++p)
    for (int64_t k = 0; k < g.n; ++k) {
      const int64_t base = (p * g.n + k) * g.post, col = (p * g.groups + k / g.m) * g.post;
      for (int64_t q = 0; q < g.post; ++q) {
        const Out y = fromDouble<Out>(toDouble(x[base + q]) - mean[col + q]);
        out[base + q] = y;
        const double d = toDouble(y);
        sum[col + q] += d;
        mag[col + q] += std::fabs(d);
      }
    }
  double worst = 0;
  for (int64_t c = 0; c < columns; ++c)
    if (mag[c] > 0) worst = std::max(worst, std::fabs(sum[c]) / mag[c]);
  return worst;
}

template <typename T>
double centerTyped(T* x, const std::vector<int64_t>& shape, const std::vector<std::pair<int, int>>& actions) {
  if (actions.size() == 1) {
    const auto [axis, groups] = actions.front();
    return centerOne<T, T>(x, geometry(shape, axis, groups), x);
  }
  int64_t count = 1;
  for (auto d : shape) count *= d;
  std::vector<double> wide(count);
  for (int64_t i = 0; i < count; ++i) wide[i] = toDouble(x[i]);
  for (std::size_t a = 0; a + 1 < actions.size(); ++a)
    centerOne<double, double>(wide.data(), geometry(shape, actions[a].first, actions[a].second), wide.data());
  // The last action rounds into the tensor; the check is of that axis (earlier axes stay centered
  // up to the same rounding).
  return centerOne<double, T>(wide.data(), geometry(shape, actions.back().first, actions.back().second), x);
}

}  // namespace

double centerInPlace(void* data, const std::string& dtype, const std::vector<int64_t>& shape,
                     const std::vector<std::pair<int, int>>& actions) {
  if (actions.empty()) return 0;
  for (auto [axis, groups] : actions)
    if (axis < 0 || axis >= static_cast<int>(shape.size()) || groups < 1 || shape[axis] % groups != 0)
      throw Error("cannot center axis " + std::to_string(axis) + " in " + std::to_string(groups) + " groups");
  if (dtype == "F64") return centerTyped(static_cast<double*>(data), shape, actions);
  if (dtype == "F32") return centerTyped(static_cast<float*>(data), shape, actions);
  if (dtype == "BF16") return centerTyped(static_cast<c10::BFloat16*>(data), shape, actions);
  if (dtype == "F16") return centerTyped(static_cast<c10::Half*>(data), shape, actions);
  throw Error("cannot center a " + dtype + " tensor (BF16, F16, F32, F64 only)");
}

}  // namespace foldnorm::checkpoint
