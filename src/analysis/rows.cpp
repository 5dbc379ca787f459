#include "rows.h"

#include <algorithm>

#include "foldnorm/analysis/axes.h"
#include "foldnorm/analysis/rules.h"

namespace foldnorm {
namespace {

std::vector<LeafId> leafUnion(const std::vector<LeafId>& a, const std::vector<LeafId>& b) {
  std::vector<LeafId> out;
  std::set_union(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(out));
  return out;
}

/// The rows [start, end) a slice, narrow or select takes along a dim of `size` rows; nullopt
/// when its step is not 1 or its bounds are neither constants nor implied by the recorded shape
/// (PiT's x[:, :token_length] with token_length = cls_tokens.shape[1], traced as aten::size:
/// with one bound constant the other is where the recorded output length puts it).
std::optional<std::pair<int64_t, int64_t>> takenRows(const Graph& g, const Node& n, int64_t size,
                                                     std::optional<int64_t> outLength = std::nullopt) {
  auto arg = [&](std::size_t slot, int64_t absent) -> std::optional<int64_t> {
    if (slot >= n.inputs.size() || g.isNoneValue(n.inputs[slot])) return absent;
    return g.constantInt(n.inputs[slot]);
  };
  auto clamped = [&](int64_t i) { return std::clamp<int64_t>(i < 0 ? i + size : i, 0, size); };
  if (n.kind == "aten::select") {
    auto i = arg(2, -1 - size);
    if (!i || *i < -size || *i >= size) return std::nullopt;
    int64_t at = *i < 0 ? *i + size : *i;
    return std::make_pair(at, at + 1);
  }
  if (n.kind == "aten::narrow") {
    auto start = arg(2, -1 - size), length = arg(3, -1);
    if (!start || !length || *start < -size || *start > size || *length < 0) return std::nullopt;
    int64_t s = *start < 0 ? *start + size : *start;
    if (s + *length > size) return std::nullopt;
    return std::make_pair(s, s + *length);
  }
  auto start = arg(2, 0), end = arg(3, size), step = arg(4, 1);
  if (!step || *step != 1) return std::nullopt;
  if (outLength && start && !end) end = clamped(*start) + *outLength;
  if (outLength && end && !start) start = clamped(*end) - *outLength;
  if (!start || !end) return std::nullopt;
  int64_t s = clamped(*start), e = clamped(*end);
  return std::make_pair(s, std::max(s, e));
}

/// The identity and dropout rules' nodes that are the identity on values (a float cast, a copy,
/// a dropout that drops nothing); their row facts are their input's. Negation keeps them too.
bool passesRows(const Graph& g, const Node& n, const std::string& rule) {
  if (rule == "identity") {
    const auto& t = g.value(n.outputs.at(0)).tensor;
    if (!t) return false;
    return t->dtype == "float32" || t->dtype == "float64" || t->dtype == "float16" || t->dtype == "bfloat16";
  }
  if (rule != "dropout") return false;
  auto p = n.inputs.size() > 1 ? g.constantDouble(n.inputs.at(1)) : std::nullopt;
  auto train = n.inputs.size() > 2 ? g.constantBool(n.inputs.at(2)) : std::nullopt;
  return (p && *p == 0.0) || (train && !*train);
}

}  // namespace

const RowFacts* RowTracker::rowsOf(ValueId v) const {
  auto it = rows_.find(v);
  return it == rows_.end() ? nullptr : &it->second;
}

void RowTracker::update(NodeId id, const std::string& rule, std::vector<MeanZeroFact>& facts) {
  const auto& n = g_.node(id);
  if (n.outputs.empty() || n.inputs.empty()) return;
  if (rule == "cat" && n.kind != "aten::stack") {
    cat(n, facts);
  } else if (rule == "add-sub") {
    addSub(n, facts);
  } else if (rule == "slice" && (n.kind == "aten::slice" || n.kind == "aten::narrow" || n.kind == "aten::select")) {
    slice(n, rule, facts);
  } else if (const auto* r = rowsOf(n.inputs.at(0)); r && passesRows(g_, n, rule)) {
    const auto *in = shapeOf(g_, n.inputs.at(0)), *out = shapeOf(g_, n.outputs.at(0));
    if (in && out && *in == *out) rows_[n.outputs.at(0)] = *r;
  }
}

void RowTracker::cat(const Node& n, const std::vector<MeanZeroFact>& facts) {
  auto list = g_.value(n.inputs.at(0)).producer;
  if (list == kNone || g_.node(list).kind != "prim::ListConstruct" || n.inputs.size() < 2) return;
  const auto out = n.outputs.at(0);
  const auto* outShape = shapeOf(g_, out);
  const auto rank = rankOf(g_, out);
  const auto dim = dimArg(g_, n.inputs.at(1), rank);
  if (!outShape || !dim) return;
  RowFacts rows;
  rows.axis = *dim;
  int64_t offset = 0;
  for (auto e : g_.node(list).inputs) {
    const auto* shape = shapeOf(g_, e);
    if (!shape || int64_t(shape->size()) != rank) return;
    const auto length = shape->at(*dim);
    if (const auto* own = rowsOf(e); own && own->axis == *dim) {
      for (auto p : own->parts) {
        p.start += offset;
        p.end += offset;
        rows.parts.push_back(std::move(p));
      }
    } else if (const auto& f = facts.at(e); f.isMeanZero() && !f.axes.contains(*dim)) {
      rows.parts.push_back({offset, offset + length, f.axes, f.leaves});
    }
    offset += length;
  }
  if (offset != outShape->at(*dim) || rows.parts.empty()) return;
  rows_[out] = std::move(rows);
}

void RowTracker::addSub(const Node& n, const std::vector<MeanZeroFact>& facts) {
  if (n.inputs.size() < 2) return;
  const auto a = n.inputs.at(0), b = n.inputs.at(1), out = n.outputs.at(0);
  if (g_.value(b).kind != ValueKind::Tensor) return;
  const auto* ra = rowsOf(a);
  const auto* rb = rowsOf(b);
  const auto* outShape = shapeOf(g_, out);
  if ((!ra && !rb) || !outShape) return;
  const auto rank = int64_t(outShape->size());
  // The operand with row facts is not broadcast along its rows: same rank, same row count.
  auto fits = [&](ValueId v, const RowFacts& r) {
    const auto* s = shapeOf(g_, v);
    return s && int64_t(s->size()) == rank && r.axis < rank && s->at(r.axis) == outShape->at(r.axis);
  };
  RowFacts rows;
  if (ra && rb) {
    if (ra->axis != rb->axis || !fits(a, *ra) || !fits(b, *rb) || ra->parts.size() != rb->parts.size()) return;
    rows.axis = ra->axis;
    for (std::size_t i = 0; i < ra->parts.size(); ++i) {
      const auto &p = ra->parts[i], &q = rb->parts[i];
      if (p.start != q.start || p.end != q.end) return;
      rows.parts.push_back({p.start, p.end, p.axes | q.axes, leafUnion(p.leaves, q.leaves)});
    }
  } else {
    const auto& r = ra ? *ra : *rb;
    const auto x = ra ? a : b, y = ra ? b : a;
    const auto& fy = facts.at(y);
    const auto ry = rankOf(g_, y);
    if (!fits(x, r) || !fy.isMeanZero() || ry < 0 || ry > rank) return;
    // The other operand's fact holds row by row when its axes do not include the rows' axis
    // (broadcast along the rows, its one row is every row).
    const auto axes = alignAxes(fy.axes, ry, rank);
    if (axes.contains(r.axis)) return;
    rows.axis = r.axis;
    for (const auto& p : r.parts) rows.parts.push_back({p.start, p.end, p.axes | axes, leafUnion(p.leaves, fy.leaves)});
  }
  rows_[out] = std::move(rows);
}

void RowTracker::slice(const Node& n, const std::string& rule, std::vector<MeanZeroFact>& facts) {
  const auto x = n.inputs.at(0), out = n.outputs.at(0);
  const auto* r = rowsOf(x);
  const auto* shape = shapeOf(g_, x);
  if (!r || !shape || n.inputs.size() < 2) return;
  const bool select = n.kind == "aten::select";
  const auto dim = dimArg(g_, n.inputs.at(1), int64_t(shape->size()));
  if (!dim) return;
  if (*dim != r->axis) {
    // Along another axis: a part holds for the rows' every other index, so for those taken,
    // unless the cut axis is one the part sums over.
    RowFacts rows;
    rows.axis = select && *dim < r->axis ? r->axis - 1 : r->axis;
    for (const auto& p : r->parts) {
      if (p.axes.contains(*dim)) continue;
      rows.parts.push_back({p.start, p.end, select ? dropAxis(p.axes, *dim) : p.axes, p.leaves});
    }
    if (!rows.parts.empty()) rows_[out] = std::move(rows);
    return;
  }
  const auto* outShape = shapeOf(g_, out);
  const auto taken = takenRows(g_, n, shape->at(*dim),
                               outShape && outShape->size() == shape->size() ? std::optional<int64_t>(outShape->at(*dim))
                                                                             : std::nullopt);
  if (!taken || taken->first >= taken->second) return;
  const auto [start, end] = *taken;
  RowFacts rows;
  rows.axis = r->axis;
  const RowPart* holder = nullptr;
  for (const auto& p : r->parts) {
    const auto lo = std::max(p.start, start), hi = std::min(p.end, end);
    if (lo >= hi) continue;
    if (p.start <= start && end <= p.end) holder = &p;
    rows.parts.push_back({lo - start, hi - start, p.axes, p.leaves});
  }
  if (!select && !rows.parts.empty()) rows_[out] = std::move(rows);
  if (!holder) return;
  // The rows taken all lie in one part: the output is as mean-zero as that part.
  const auto axes = select ? dropAxis(holder->axes, *dim) : holder->axes;
  auto& current = facts.at(out);
  const bool fewer = current.isMeanZero() && axes.subsetOf(current.axes) &&
                     std::includes(current.leaves.begin(), current.leaves.end(), holder->leaves.begin(),
                                   holder->leaves.end()) &&
                     (axes != current.axes || holder->leaves != current.leaves);
  if (current.isMeanZero() && !fewer) return;
  current = MeanZeroFact::meanZero(axes, holder->leaves, rule);
}

bool ShiftRows::join(ValueId v, bool first, const std::optional<RowSupport>& rows) {
  if (first) {
    if (rows) rows_[v] = *rows;
    return false;  // the caller's ShiftFact::join already says the value is new
  }
  auto it = rows_.find(v);
  if (it == rows_.end()) return false;  // already anywhere
  if (!rows || rows->axis != it->second.axis) {
    rows_.erase(it);
    return true;
  }
  auto& r = it->second;
  const auto start = std::min(r.start, rows->start), end = std::max(r.end, rows->end);
  if (start == r.start && end == r.end) return false;
  r.start = start;
  r.end = end;
  return true;
}

std::optional<RowSupport> ShiftRows::of(ValueId v) const {
  auto it = rows_.find(v);
  if (it == rows_.end()) return std::nullopt;
  return it->second;
}

namespace {

bool isRowSlice(const Node& n) {
  return n.kind == "aten::slice" || n.kind == "aten::narrow" || n.kind == "aten::select";
}

/// A slice's dim and the rows it takes along it, when that dim is `axis`.
std::optional<std::pair<int64_t, int64_t>> rowsTakenAlong(const Graph& g, const Node& n, int64_t axis) {
  const auto* shape = shapeOf(g, n.inputs.at(0));
  if (!shape || n.inputs.size() < 2) return std::nullopt;
  const auto dim = dimArg(g, n.inputs.at(1), int64_t(shape->size()));
  if (!dim || *dim != axis) return std::nullopt;
  const auto* out = shapeOf(g, n.outputs.at(0));
  return takenRows(g, n, shape->at(*dim),
                   out && out->size() == shape->size() ? std::optional<int64_t>(out->at(*dim)) : std::nullopt);
}

}  // namespace

bool takesNoneOf(const Graph& g, NodeId node, std::size_t slot, const RowSupport& rows) {
  const auto& n = g.node(node);
  if (slot != 0 || !isRowSlice(n)) return false;
  const auto taken = rowsTakenAlong(g, n, rows.axis);
  return taken && (taken->second <= rows.start || rows.end <= taken->first);
}

std::optional<RowSupport> shiftRowsThrough(const Graph& g, NodeId node, std::size_t slot,
                                           const std::optional<RowSupport>& rows, ValueId out,
                                           const std::function<bool(ValueId)>& carries) {
  const auto& n = g.node(node);
  const auto& rule = ruleFor(g, node).name;
  const auto* outShape = shapeOf(g, out);
  if (!outShape || slot >= n.inputs.size()) return std::nullopt;
  const auto rank = int64_t(outShape->size());
  const auto in = n.inputs.at(slot);
  if (rule == "cat" && n.kind != "aten::stack") {
    // The rows of the elements that can carry the change at all.
    auto list = g.value(n.inputs.at(0)).producer;
    if (slot != 0 || list == kNone || g.node(list).kind != "prim::ListConstruct" || n.inputs.size() < 2)
      return std::nullopt;
    // A plain integer from here on (GCC 12 warns, wrongly, of an uninitialized optional copy).
    const auto maybeDim = dimArg(g, n.inputs.at(1), rank);
    if (!maybeDim) return std::nullopt;
    const int64_t axis = maybeDim.value();
    RowSupport r{axis, 0, 0};
    bool any = false;
    int64_t offset = 0;
    for (auto e : g.node(list).inputs) {
      const auto* s = shapeOf(g, e);
      if (!s || int64_t(s->size()) != rank) return std::nullopt;
      const auto length = s->at(axis);
      if (carries(e)) {
        r.start = any ? std::min(r.start, offset) : offset;
        r.end = offset + length;
        any = true;
      }
      offset += length;
    }
    if (!any || offset != outShape->at(axis)) return std::nullopt;
    return r;
  }
  if (!rows) return std::nullopt;
  const auto* inShape = shapeOf(g, in);
  if (!inShape) return std::nullopt;
  if (isRowSlice(n) && slot == 0) {
    if (auto taken = rowsTakenAlong(g, n, rows->axis)) {
      if (n.kind == "aten::select") return std::nullopt;  // the changed row is the whole output
      const auto start = std::max(rows->start, taken->first), end = std::min(rows->end, taken->second);
      if (start >= end) return std::nullopt;  // takesNoneOf: not reached
      return RowSupport{rows->axis, start - taken->first, end - taken->first};
    }
    const auto dim = dimArg(g, n.inputs.at(1), int64_t(inShape->size()));
    if (!dim || *dim == rows->axis) return std::nullopt;  // along the rows, bounds not constant
    if (n.kind != "aten::select") return rows;
    return RowSupport{*dim < rows->axis ? rows->axis - 1 : rows->axis, rows->start, rows->end};
  }
  if (rule == "add-sub" || rule == "identity" || rule == "dropout") {
    // Row by row: the output's rows read the same rows of this operand (not broadcast along them).
    const auto axis = rows->axis + (rank - int64_t(inShape->size()));
    if (int64_t(inShape->size()) > rank || axis < 0 || axis >= rank ||
        inShape->at(rows->axis) != outShape->at(axis))
      return std::nullopt;
    return RowSupport{axis, rows->start, rows->end};
  }
  return std::nullopt;
}

}  // namespace foldnorm
