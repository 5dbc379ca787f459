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

namespace {

/// A block of a tensor's row-major linear index l: the digit (l / stride) % size.
struct Block {
  int64_t size = 1;
  int64_t stride = 1;
};

/// Row-major strides; nullopt for an empty tensor (no index to speak of).
std::optional<std::vector<int64_t>> strides(const std::vector<int64_t>& shape) {
  std::vector<int64_t> st(shape.size(), 1);
  for (std::size_t a = shape.size(); a-- > 0;) {
    if (shape[a] <= 0) return std::nullopt;
    if (a + 1 < shape.size()) st[a] = st[a + 1] * shape[a + 1];
  }
  return st;
}

/// The axes of `shape` (longer than 1) whose digits lie inside the block: changing one of them
/// changes only the block's digit.
AxisSet axesInside(const std::vector<int64_t>& shape, const std::vector<int64_t>& st, Block b) {
  AxisSet out;
  for (std::size_t a = 0; a < shape.size(); ++a)
    if (shape[a] > 1 && st[a] % b.stride == 0 && (b.stride * b.size) % (st[a] * shape[a]) == 0)
      out.insert(int64_t(a));
  return out;
}

/// The block as whole axes of `shape`: the axes inside it, when their lengths multiply to its size.
std::optional<AxisSet> wholeAxes(const std::vector<int64_t>& shape, const std::vector<int64_t>& st, Block b) {
  auto inside = axesInside(shape, st, b);
  int64_t product = 1;
  for (auto a : inside.axes()) product *= shape[a];
  if (inside.empty() || product != b.size) return std::nullopt;
  return inside;
}

/// The block as a factor of one axis of `shape`, when it lies inside one.
std::optional<AxisFactor> factorOf(const std::vector<int64_t>& shape, const std::vector<int64_t>& st, Block b) {
  for (std::size_t a = 0; a < shape.size(); ++a) {
    if (shape[a] <= 1 || st[a] > b.stride || b.stride % st[a] != 0) continue;
    int64_t k = b.stride / st[a];
    if (shape[a] % (k * b.size) == 0) return AxisFactor{int64_t(a), b.size, k};
  }
  return std::nullopt;
}

/// The runs of consecutive axes of `axes` as blocks.
std::vector<Block> runs(const std::vector<int64_t>& shape, const std::vector<int64_t>& st, AxisSet axes) {
  std::vector<Block> out;
  for (int64_t a = 0; a < int64_t(shape.size()); ++a) {
    if (!axes.contains(a)) continue;
    Block b{1, 1};
    while (a < int64_t(shape.size()) && axes.contains(a)) b.size *= shape[a++];
    b.stride = st[a - 1];
    out.push_back(b);
  }
  return out;
}

Block blockOf(const std::vector<int64_t>& st, const AxisFactor& f) { return {f.size, f.stride * st[f.axis]}; }

}  // namespace

bool validFactor(const std::vector<int64_t>& shape, const AxisFactor& f) {
  return f.axis >= 0 && f.axis < int64_t(shape.size()) && f.size > 0 && f.stride > 0 &&
         shape[f.axis] % (f.size * f.stride) == 0;
}

FactoredAxes mapFactoredMeanZeroThroughView(const std::vector<int64_t>& in, const std::vector<int64_t>& out,
                                            const FactoredAxes& from) {
  FactoredAxes coarse{mapMeanZeroThroughView(in, out, from.axes), std::nullopt};
  auto si = strides(in), so = strides(out);
  if (!si || !so) return coarse;
  // The mean-zero part as one block: the factor alone, or one run of whole axes.
  std::optional<Block> block;
  if (from.factor) {
    AxisSet others = from.axes;
    others.erase(from.factor->axis);
    if (others.empty() && validFactor(in, *from.factor)) block = blockOf(*si, *from.factor);
  } else {
    auto rs = runs(in, *si, from.axes);
    if (rs.size() == 1) block = rs.front();
  }
  if (!block || block->size <= 1) return coarse;
  if (auto whole = wholeAxes(out, *so, *block)) return {*whole, std::nullopt};
  if (auto f = factorOf(out, *so, *block)) return {AxisSet::of({f->axis}), f};
  return coarse;
}

FactoredAxes mapFactoredConstantThroughView(const std::vector<int64_t>& in, const std::vector<int64_t>& out,
                                            const FactoredAxes& from) {
  FactoredAxes result{mapConstantThroughView(in, out, from.axes), std::nullopt};
  auto si = strides(in), so = strides(out);
  if (!si || !so) return result;
  // Constant along each block separately is constant along all of them together.
  auto blocks = runs(in, *si, from.axes);
  if (from.factor && validFactor(in, *from.factor)) blocks.push_back(blockOf(*si, *from.factor));
  for (const auto& b : blocks) result.axes = result.axes | axesInside(out, *so, b);
  for (const auto& b : blocks) {
    auto f = factorOf(out, *so, b);
    if (f && !result.axes.contains(f->axis)) { result.factor = f; break; }
  }
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
