#include "foldnorm/analysis/facts.h"

#include <algorithm>
#include <ostream>
#include <sstream>


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
    case LeafKind::InsertedCentering: return "inserted-centering";
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

MeanZeroFact MeanZeroFact::meanZero(AxisSet axes, std::optional<AxisFactor> factor, std::vector<LeafId> leaves,
                                    std::string rule) {
  if (factor) axes.insert(factor->axis);
  MeanZeroFact f = meanZero(axes, std::move(leaves), std::move(rule));
  f.factor = factor;
  return f;
}

std::ostream& operator<<(std::ostream& os, const AxisFactor& f) {
  return os << "factor " << f.size << " (stride " << f.stride << ") of axis " << f.axis;
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
      os << "mean-zero along " << f.axes;
      if (f.factor) os << " (" << *f.factor << ")";
      os << " by centering leaves [";
      for (std::size_t i = 0; i < f.leaves.size(); ++i) os << (i ? "," : "") << f.leaves[i];
      return os << "]";
    }
    case MeanZeroFact::State::Broken: return os << "broken at node " << f.breaker << ": " << f.reason;
  }
  return os;
}

MeanZeroFact MeanZeroFact::join(const MeanZeroFact& a, const MeanZeroFact& b) {
  if (a.state == State::Unknown) return b;
  if (b.state == State::Unknown || a.state == State::Broken) return a;
  if (b.state == State::Broken) return b;
  std::vector<LeafId> leaves = a.leaves;
  leaves.insert(leaves.end(), b.leaves.begin(), b.leaves.end());
  // Two factors are comparable only when they and the axes around them agree; otherwise the
  // coarse union is the least both imply.
  bool keep = a.factor && b.factor && *a.factor == *b.factor && a.axes == b.axes;
  return meanZero(a.axes | b.axes, keep ? a.factor : std::nullopt, std::move(leaves), a.rule);
}

bool MeanZeroFact::operator==(const MeanZeroFact& o) const {
  if (state != o.state) return false;
  switch (state) {
    case State::Unknown: return true;
    case State::MeanZero: return axes == o.axes && factor == o.factor && leaves == o.leaves;
    case State::Broken: return breaker == o.breaker && reason == o.reason && blamed == o.blamed;
  }
  return false;
}

bool ShiftFact::join(ValueId v, AxisSet axes, std::optional<AxisFactor> factor) {
  // A factor of an axis that is constant as a whole says nothing more.
  if (factor && axes.contains(factor->axis)) factor.reset();
  auto [it, inserted] = axes_.emplace(v, axes);
  if (inserted) {
    if (factor) factors_[v] = *factor;
    return true;
  }
  bool changed = false;
  auto f = factors_.find(v);
  if (f != factors_.end() && (!factor || *factor != f->second)) {
    factors_.erase(f);
    changed = true;
  }
  auto met = it->second & axes;
  if (met != it->second) {
    it->second = met;
    changed = true;
  }
  return changed;
}

std::optional<AxisFactor> ShiftFact::constantFactor(ValueId v) const {
  auto it = factors_.find(v);
  if (it == factors_.end()) return std::nullopt;
  return it->second;
}

const AxisSet* ShiftFact::constantAxes(ValueId v) const {
  auto it = axes_.find(v);
  return it == axes_.end() ? nullptr : &it->second;
}

std::ostream& operator<<(std::ostream& os, const ShiftFact& f) {
  os << "shift {";
  bool first = true;
  for (const auto& [v, axes] : f.axes_) {
    os << (first ? "" : ", ") << "%" << v << " const along " << axes;
    if (auto it = f.factors_.find(v); it != f.factors_.end()) os << " and " << it->second;
    first = false;
  }
  return os << "}";
}

}  // namespace foldnorm
