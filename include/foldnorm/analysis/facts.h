// The lattice values of the foldability analysis (docs/design.md, "Analysis").
//
// Two facts per tensor value, each a small value type kept apart from the solver:
//  - MeanZeroFact (forward, per value): "this value can be made exactly mean-zero along the axes
//    `axes` by centering the leaves `leaves`" — or why not (the breaking node and the input it
//    was blamed on, so a path can be walked back). Mean-zero along a set B implies mean-zero
//    along every superset of B, so the smallest B is kept.
//  - ShiftFact (forward, per centered leaf): "centering that leaf changed this value by a term
//    that is constant along these axes", per value it reaches. An absorber (LayerNorm over axes within the set,
//    softmax over an axis within it) removes it; anything that is neither absorber nor
//    shift-passing op sees a changed value, and the leaf is unsafe.
//
// Factors of merged dims. A reshape can merge the normalized axis with others and split it out
// again later (MobileViT's unfold: [B,C,H,W] -> [B*C*nh, ph, nw, pw] -> transpose ->
// [B, C, N, P] -> ...). Between the two reshapes C is no whole axis, only a factor of one: the
// digit (i / stride) % size of axis `axis`'s index i (row-major). Both facts may carry one such
// AxisFactor as a refinement, and both are sound without it, so a rule that knows nothing of
// factors may drop it (every fact built by MeanZeroFact::meanZero has none):
//  - MeanZeroFact: `axes` stays the coarse claim and contains the factor's axis; the factor says
//    more: the sum over the factor's digit and the other axes of `axes` is already zero.
//  - ShiftFact: the change is constant along `axes` and, besides, along the factor's digit of an
//    axis not in `axes`.
// Only the reshape and permute rules (rules/axis.cpp) read and write factors; the mapping of
// axes and factors through a reshape is in axes.h.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "foldnorm/graph/graph.h"

namespace foldnorm {

/// A set of tensor axes (dims < 64) as a bit mask.
class AxisSet {
 public:
  AxisSet() = default;
  static AxisSet of(std::initializer_list<int64_t> axes);
  static AxisSet fromMask(uint64_t mask) { AxisSet s; s.mask_ = mask; return s; }
  static AxisSet trailing(int64_t rank, int64_t count);  // the last `count` axes of `rank`
  // An axis outside [0, 64) is no axis of any tensor here: inserting or erasing it does nothing
  // (a shift by it would be undefined); rules check their dims before they build sets.
  void insert(int64_t axis) { if (axis >= 0 && axis < 64) mask_ |= (uint64_t{1} << axis); }
  void erase(int64_t axis) { if (axis >= 0 && axis < 64) mask_ &= ~(uint64_t{1} << axis); }
  bool contains(int64_t axis) const { return axis >= 0 && axis < 64 && ((mask_ >> axis) & 1); }
  bool empty() const { return mask_ == 0; }
  bool subsetOf(const AxisSet& o) const { return (mask_ & ~o.mask_) == 0; }
  AxisSet operator|(const AxisSet& o) const { return fromMask(mask_ | o.mask_); }
  AxisSet operator&(const AxisSet& o) const { return fromMask(mask_ & o.mask_); }
  bool operator==(const AxisSet& o) const { return mask_ == o.mask_; }
  bool operator!=(const AxisSet& o) const { return mask_ != o.mask_; }
  std::vector<int64_t> axes() const;
  uint64_t mask() const { return mask_; }
  int64_t size() const;

 private:
  uint64_t mask_ = 0;
};
std::ostream& operator<<(std::ostream& os, const AxisSet& s);
std::string toString(const AxisSet& s);

using LeafId = std::size_t;

/// The digit (i / stride) % size of the index i along `axis`; valid on a dim of length n when
/// n is a multiple of size * stride.
struct AxisFactor {
  int64_t axis = 0;
  int64_t size = 1;
  int64_t stride = 1;
  bool operator==(const AxisFactor& o) const { return axis == o.axis && size == o.size && stride == o.stride; }
  bool operator!=(const AxisFactor& o) const { return !(*this == o); }
};
std::ostream& operator<<(std::ostream& os, const AxisFactor& f);

/// How a parameter is centered: subtract its mean along `axis`, separately within each of
/// `groups` equal blocks of that axis (grouped convolutions), in float64, cast back.
/// With a `scale` (a per-channel vector s of that axis' length, read unchanged) the scaled map
/// is centered instead (docs/method.md section 7): x[c] -= mean_k(s_k x[k]) / s_c, so that s * x is
/// mean-zero along the axis (groups is then 1).
struct CenterAction {
  ParamId param = kNone;
  int64_t axis = 0;
  int64_t groups = 1;
  ParamId scale = kNone;
  bool operator==(const CenterAction& o) const {
    return param == o.param && axis == o.axis && groups == o.groups && scale == o.scale;
  }
};

/// InsertedCentering is not a node of the model: the fold inserts x - x.mean(axes) at `output`.
enum class LeafKind { Linear, Addmm, Matmul, Convolution, Embedding, Parameter, MeanSubtraction,
                      InsertedCentering };
const char* toString(LeafKind kind);

/// A node whose output can be made mean-zero along `axes` by centering parameters.
struct Leaf {
  LeafId id = kNone;
  LeafKind kind = LeafKind::Linear;
  NodeId node = kNone;          // the op (for LeafKind::Parameter: the node reading the parameter)
  ValueId output = kNone;       // the value that becomes mean-zero
  AxisSet axes;                 // along which
  std::vector<CenterAction> actions;  // empty for MeanSubtraction
  std::vector<NodeId> chain;    // transposes etc. between a weight parameter and the op
  std::string rule;             // the rule that made it a leaf
  // A scaled leaf (rule scaled-leaf): the weight leaf `scaledFrom` followed by the product with
  // the per-channel parameter `scale` at `scaleNode`; `output` is the product's, and every
  // action carries the scale (the scaled map is centered).
  ParamId scale = kNone;
  NodeId scaleNode = kNone;
  LeafId scaledFrom = kNone;
};

/// The mean-zero fact of one value, an element of a lattice ordered by what it costs to claim:
///
///   Unknown  ⊑  MeanZero(B, L)  ⊑  MeanZero(B', L')  ⊑  Broken      when B ⊆ B' and L ⊆ L'
///
/// Unknown (bottom) is "no fact yet" (non-tensor values, nodes not reached). MeanZero(B, L)
/// claims "mean-zero along B once the leaves L are centered": a larger B is a weaker claim (a
/// mean over more axes is implied by a mean over fewer) and more leaves cost more. Broken (top)
/// is "cannot be made mean-zero", with the node that broke it. Where the facts of several
/// operands meet (a sum, a concatenation, a list) the solver takes their join: the least fact
/// both operands imply, MeanZero(B ∪ B', L ∪ L'), or Broken when either is. `join` expects the
/// two axis sets in the same frame (the caller aligns broadcast ranks first).
struct MeanZeroFact {
  enum class State { Unknown, MeanZero, Broken };
  State state = State::Unknown;
  AxisSet axes;                  // MeanZero: along which (smallest set)
  std::optional<AxisFactor> factor;  // MeanZero: finer, along this factor of an axis of `axes`
  std::vector<LeafId> leaves;    // MeanZero: sorted, unique
  NodeId breaker = kNone;        // Broken: the node that broke it (may be upstream)
  std::string reason;            // Broken: why, in words
  ValueId blamed = kNone;        // Broken by propagation: the input it came from
  std::string rule;              // the rule that produced this fact (provenance, not compared)

  static MeanZeroFact meanZero(AxisSet axes, std::vector<LeafId> leaves, std::string rule);
  /// The same, refined by a factor (its axis is added to `axes`, the coarse claim).
  static MeanZeroFact meanZero(AxisSet axes, std::optional<AxisFactor> factor, std::vector<LeafId> leaves,
                               std::string rule);
  static MeanZeroFact broken(NodeId breaker, std::string reason, std::string rule);
  static MeanZeroFact propagated(const MeanZeroFact& from, ValueId blamed, std::string rule);
  /// Least upper bound. Unknown is the identity; of two Broken facts the first is kept (it names
  /// the breaker a report walks back to). The result's rule is `a`'s. A factor survives only
  /// when both carry the same factor on the same axes.
  static MeanZeroFact join(const MeanZeroFact& a, const MeanZeroFact& b);
  bool isMeanZero() const { return state == State::MeanZero; }
  /// Same lattice value: state, axes, factor and leaves; for Broken also who broke it and why.
  bool operator==(const MeanZeroFact& o) const;
  bool operator!=(const MeanZeroFact& o) const { return !(*this == o); }
};
std::ostream& operator<<(std::ostream& os, const MeanZeroFact& f);

/// The shift fact of one centered leaf: centering it changes some values by a term constant
/// along some axes. Per value reached, the axes along which the change is constant; a value not
/// reached is unchanged. Over several paths into one value the change is constant only along
/// the axes every path guarantees, so facts meet by intersection (fewer axes = less known =
/// higher in the order; the empty set still means "changed, along no axis constant").
class ShiftFact {
 public:
  /// Meets `axes` (and `factor`) into the fact of `v` (the first arrival sets it). A factor
  /// survives only when every path brings the same one. True when `v`'s fact changed, i.e. when
  /// its consumers must be visited (again).
  bool join(ValueId v, AxisSet axes, std::optional<AxisFactor> factor = std::nullopt);
  /// The axes along which `v` changes by a constant, nullptr when `v` is not changed.
  const AxisSet* constantAxes(ValueId v) const;
  /// Besides those axes, the factor of another axis along which `v`'s change is constant.
  std::optional<AxisFactor> constantFactor(ValueId v) const;
  bool reaches(ValueId v) const { return constantAxes(v) != nullptr; }
  std::size_t size() const { return axes_.size(); }
  bool operator==(const ShiftFact& o) const { return axes_ == o.axes_ && factors_ == o.factors_; }
  bool operator!=(const ShiftFact& o) const { return !(*this == o); }
  friend std::ostream& operator<<(std::ostream& os, const ShiftFact& f);

 private:
  std::map<ValueId, AxisSet> axes_;
  std::map<ValueId, AxisFactor> factors_;  // only values whose every path brought this factor
};

}  // namespace foldnorm
