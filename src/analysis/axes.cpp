// Axis bookkeeping (see include/foldnorm/analysis/axes.h).
#include "foldnorm/analysis/axes.h"

namespace foldnorm {

int64_t rankOf(const Graph& g, ValueId v) {
  const auto& t = g.value(v).tensor;
  return t ? t->rank() : -1;
}

const std::vector<int64_t>* shapeOf(const Graph& g, ValueId v) {
  const auto& t = g.value(v).tensor;
  return t ? &t->shape : nullptr;
}

std::optional<int64_t> dimArg(const Graph& g, ValueId dimValue, int64_t rank) {
  auto d = g.constantInt(dimValue);
  if (!d) return std::nullopt;
  if (*d < 0 && rank < 0) return std::nullopt;  // counted from the end of an unknown rank
  int64_t dim = *d < 0 ? *d + rank : *d;
  // A rank-0 tensor accepts dim 0 / -1 in torch (it acts as rank 1).
  if (dim < 0 || (rank > 0 && dim >= rank) || (rank == 0 && dim > 0) || dim >= 64) return std::nullopt;
  return dim;
}

std::optional<AxisSet> dimListArg(const Graph& g, ValueId dimsValue, int64_t rank) {
  auto dims = g.constantIntList(dimsValue);
  if (!dims) return std::nullopt;
  AxisSet out;
  for (auto d : *dims) {
    int64_t dim = d < 0 ? d + rank : d;
    if (dim < 0 || (rank >= 0 && dim >= rank) || dim >= 64) return std::nullopt;
    out.insert(dim);
  }
  return out;
}

std::vector<std::pair<AxisSet, AxisSet>> viewGroups(const std::vector<int64_t>& in,
                                                    const std::vector<int64_t>& out) {
  std::vector<std::pair<AxisSet, AxisSet>> groups;
  std::size_t i = 0, j = 0;
  const std::size_t n = in.size(), m = out.size();
  while (i < n || j < m) {
    AxisSet gi, go;
    int64_t pi = 1, pj = 1;
    if (i < n) { gi.insert(int64_t(i)); pi = in[i++]; }
    if (j < m) { go.insert(int64_t(j)); pj = out[j++]; }
    while (pi != pj) {
      if (pi < pj && i < n) { gi.insert(int64_t(i)); pi *= in[i++]; }
      else if (j < m) { go.insert(int64_t(j)); pj *= out[j++]; }
      else if (i < n) { gi.insert(int64_t(i)); pi *= in[i++]; }
      else break;
    }
    // Trailing size-1 dims join the last group.
    if (i == n) while (j < m && out[j] == 1) go.insert(int64_t(j++));
    if (j == m) while (i < n && in[i] == 1) gi.insert(int64_t(i++));
    groups.emplace_back(gi, go);
  }
  return groups;
}

AxisSet mapMeanZeroThroughView(const std::vector<int64_t>& in, const std::vector<int64_t>& out, AxisSet axes) {
  AxisSet result;
  for (const auto& [gi, go] : viewGroups(in, out))
    if (!(gi & axes).empty()) result = result | go;
  // A size-1 axis adds nothing to a mean (mean-zero along B + {it} is mean-zero along B): drop
  // those that a group picked up, e.g. [T, E] -> [T, 1, E].
  AxisSet trimmed = result;
  for (auto a : result.axes())
    if (a < int64_t(out.size()) && out[a] == 1) trimmed.erase(a);
  return trimmed.empty() ? result : trimmed;
}

AxisSet mapConstantThroughView(const std::vector<int64_t>& in, const std::vector<int64_t>& out, AxisSet axes) {
  AxisSet result;
  for (const auto& [gi, go] : viewGroups(in, out))
    if (!gi.empty() && gi.subsetOf(axes)) result = result | go;
  return result;
}

AxisSet alignAxes(AxisSet axes, int64_t from, int64_t to) {
  AxisSet out;
  for (auto a : axes.axes())
    if (a + (to - from) >= 0) out.insert(a + (to - from));
  return out;
}

AxisSet dropAxis(AxisSet axes, int64_t dim) {
  AxisSet out;
  for (auto a : axes.axes())
    if (a < dim) out.insert(a);
    else if (a > dim) out.insert(a - 1);
  return out;
}

AxisSet insertAxis(AxisSet axes, int64_t dim) {
  AxisSet out;
  for (auto a : axes.axes()) out.insert(a < dim ? a : a + 1);
  return out;
}

bool constantAlong(const Graph& g, ValueId operand, AxisSet axes, int64_t outRank) {
  if (g.value(operand).kind != ValueKind::Tensor) return true;  // a Python scalar
  const auto* shape = shapeOf(g, operand);
  if (!shape) return false;
  int64_t r = int64_t(shape->size());
  if (outRank < 0 || r > outRank) return false;  // not broadcast into the output as recorded
  for (auto a : axes.axes()) {
    if (a >= outRank) return false;  // an axis the output does not have
    int64_t oa = a - (outRank - r);
    if (oa >= 0 && shape->at(oa) != 1) return false;
  }
  return true;
}

}  // namespace foldnorm
