#include "foldnorm/analysis/facts.h"

#include <algorithm>
#include <ostream>
#include <sstream>

#include "foldnorm/analysis/rules.h"

namespace foldnorm {

AxisSet AxisSet::of(std::initializer_list<int64_t> axes) {
  AxisSet s;
  for (auto a : axes) s.insert(a);
  return s;
}

AxisSet AxisSet::trailing(int64_t rank, int64_t count) {
  AxisSet s;
  for (int64_t a = rank - count; a < rank; ++a)
    if (a >= 0) s.insert(a);
  return s;
}

std::vector<int64_t> AxisSet::axes() const {
  std::vector<int64_t> out;
  for (int64_t a = 0; a < 64; ++a)
    if (contains(a)) out.push_back(a);
  return out;
}

int64_t AxisSet::size() const { return __builtin_popcountll(mask_); }

std::ostream& operator<<(std::ostream& os, const AxisSet& s) {
  os << '{';
  bool first = true;
  for (auto a : s.axes()) {
    os << (first ? "" : ",") << a;
    first = false;
  }
  return os << '}';
}

std::string toString(const AxisSet& s) {
  std::ostringstream os;
  os << s;
  return os.str();
}

const char* toString(LeafKind kind) {
  switch (kind) {
    case LeafKind::Linear: return "linear";
    case LeafKind::Addmm: return "addmm";
    case LeafKind::Matmul: return "matmul";
    case LeafKind::Convolution: return "convolution";
    case LeafKind::Embedding: return "embedding";
    case LeafKind::Parameter: return "parameter";
    case LeafKind::MeanSubtraction: return "mean-subtraction";
  }
  return "?";
}

MeanZeroFact MeanZeroFact::meanZero(AxisSet axes, std::vector<LeafId> leaves, std::string rule) {
  MeanZeroFact f;
  f.state = State::MeanZero;
  f.axes = axes;
  std::sort(leaves.begin(), leaves.end());
  leaves.erase(std::unique(leaves.begin(), leaves.end()), leaves.end());
  f.leaves = std::move(leaves);
  f.rule = std::move(rule);
  return f;
}

MeanZeroFact MeanZeroFact::broken(NodeId breaker, std::string reason, std::string rule) {
  MeanZeroFact f;
  f.state = State::Broken;
  f.breaker = breaker;
  f.reason = std::move(reason);
  f.rule = std::move(rule);
  return f;
}

MeanZeroFact MeanZeroFact::propagated(const MeanZeroFact& from, ValueId blamed, std::string rule) {
  MeanZeroFact f = from;
  f.state = State::Broken;
  f.blamed = blamed;
  f.leaves.clear();
  f.rule = std::move(rule);
  return f;
}

std::ostream& operator<<(std::ostream& os, const MeanZeroFact& f) {
  switch (f.state) {
    case MeanZeroFact::State::Unknown: return os << "unknown";
    case MeanZeroFact::State::MeanZero: {
      os << "mean-zero along " << f.axes << " by centering leaves [";
      for (std::size_t i = 0; i < f.leaves.size(); ++i) os << (i ? "," : "") << f.leaves[i];
      return os << "]";
    }
    case MeanZeroFact::State::Broken: return os << "broken at node " << f.breaker << ": " << f.reason;
  }
  return os;
}

// ---- shape helpers ----

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
  int64_t dim = *d < 0 ? *d + rank : *d;
  if (dim < 0 || (rank > 0 && dim >= rank) || dim >= 64) return std::nullopt;
  return dim;
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

}  // namespace foldnorm
