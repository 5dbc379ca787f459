// Internal to src/analysis: mean-zero facts of row ranges (issue 31 item 4).
//
// A value's MeanZeroFact holds for all of it. Where parts are concatenated along an axis that is
// not a mean-zero axis (PiT's class row before the spatial rows, X-CLIP's message token after the
// frames), each part keeps its own fact here: along that axis, rows [start, end) are mean-zero
// along `axes` once `leaves` are centered, whatever the other rows are (broken, or mean-zero
// only by centering leaves whose shifts are unsafe). A slice or select that takes rows of one
// part gets that part's fact when it is better than the whole's, so an LN reading only PiT's
// class row needs only the leaves that write that row.
//
// Why it is sound: a fact along axes B (the row axis r not in B) is a statement about every
// fixed index of the other axes, so it holds row by row; a cat's part is the element's fact; a
// sum's part is the join of the parts' facts (r in neither); a slice keeps the rows it takes.
// Only the ops below move row facts; every other op drops them (they are a refinement: the
// ordinary fact stays true without them).
//  - cat (not stack) along r: each element's rows, at its offset: its own row facts along r, or
//    its whole fact when that is mean-zero along axes without r.
//  - add/sub (rule add-sub) of tensors: the row facts of the operand that has them (rank and
//    length along r of the output), each joined with the other operand's whole mean-zero fact
//    (aligned, r not among its axes), or part by part when both have the same rows.
//  - identity and dropout rules (when they do not break there): copied.
//  - slice/narrow/select with constant bounds and step 1: along r, the rows taken (a fact for the
//    output from the one part that holds them all); along another axis d not among a part's
//    axes, the part is kept (select moves r down when d < r).
//
// The shift walk keeps rows too (X-CLIP's message token): where a centered leaf's change can be
// non-zero along one axis, rows [start, end), outside them it is zero. A cat along that axis
// starts it (the rows of the elements the change can reach at all), add/sub, the identity and
// dropout rules and slices along other axes keep it, a slice or select along it narrows it, and
// one that takes none of those rows does not see the change at all. Every other op forgets it
// (the change may then be anywhere), and where two paths meet the rows are the hull of both.
#pragma once

#include <functional>
#include <optional>

#include <string>
#include <unordered_map>
#include <vector>

#include "foldnorm/analysis/facts.h"

namespace foldnorm {

struct RowPart {
  int64_t start = 0, end = 0;  // rows [start, end) along the row axis
  AxisSet axes;                // mean-zero along these (never the row axis)
  std::vector<LeafId> leaves;  // sorted, unique
};

struct RowFacts {
  int64_t axis = -1;
  std::vector<RowPart> parts;  // disjoint, in row order; rows in no part have no claim
};

class RowTracker {
 public:
  explicit RowTracker(const Graph& g) : g_(g) {}
  /// After the rules set node `id`'s facts (in topological order): the row facts of its outputs
  /// and, for a slice or select that takes the rows of one part, that part's fact in `facts`
  /// when it claims less than the rule's (a subset of the leaves along a subset of the axes, or
  /// the rule's fact is broken).
  void update(NodeId id, const std::string& rule, std::vector<MeanZeroFact>& facts);
  const RowFacts* rowsOf(ValueId v) const;

 private:
  void cat(const Node& n, const std::vector<MeanZeroFact>& facts);
  void addSub(const Node& n, const std::vector<MeanZeroFact>& facts);
  void slice(const Node& n, const std::string& rule, std::vector<MeanZeroFact>& facts);

  const Graph& g_;
  std::unordered_map<ValueId, RowFacts> rows_;
};

/// Rows [start, end) along `axis` outside which a change is zero.
struct RowSupport {
  int64_t axis = -1, start = 0, end = 0;
};

/// The rows of each changed value of one shift walk; a value without an entry may change anywhere.
class ShiftRows {
 public:
  /// Meets `rows` into value `v`'s (`first`: `v` was not reached before). True when they widened.
  bool join(ValueId v, bool first, const std::optional<RowSupport>& rows);
  std::optional<RowSupport> of(ValueId v) const;

 private:
  std::unordered_map<ValueId, RowSupport> rows_;
};

/// `node` reads, at input `slot`, a value changed only within `rows`, and takes none of those
/// rows (a slice or select along their axis): it does not see the change.
bool takesNoneOf(const Graph& g, NodeId node, std::size_t slot, const RowSupport& rows);

/// The rows of `node`'s output `out` that the change arriving at input `slot` (within `rows`,
/// when known) can reach. `carries(v)`: whether value `v` can carry the change at all.
std::optional<RowSupport> shiftRowsThrough(const Graph& g, NodeId node, std::size_t slot,
                                           const std::optional<RowSupport>& rows, ValueId out,
                                           const std::function<bool(ValueId)>& carries);

}  // namespace foldnorm
