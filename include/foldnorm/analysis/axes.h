// Axis bookkeeping shared by the rules and the solver: recorded ranks and shapes, dim
// arguments, how axes map through reshapes, broadcasting and removed/inserted dims.
//
// Every function here is total: an unknown shape, a rank of 0, a dim out of range or a
// negative dim gives "unknown" (nullopt, -1, nullptr, or an empty set), never an index out of
// bounds, so a rule built on them can fall back to "breaks, named" on any input.
#pragma once

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "foldnorm/analysis/facts.h"

namespace foldnorm {

/// Recorded rank of a tensor value, -1 when unknown.
int64_t rankOf(const Graph& g, ValueId v);
/// Recorded shape of a tensor value, nullptr when unknown.
const std::vector<int64_t>* shapeOf(const Graph& g, ValueId v);
/// A dim argument normalized against `rank` (negative counts from the end); nullopt if not a
/// constant or out of range (a dim of a tensor of unknown rank must be non-negative).
std::optional<int64_t> dimArg(const Graph& g, ValueId dimValue, int64_t rank);
/// A constant int list of dims normalized against `rank`; nullopt if any is not a valid dim.
std::optional<AxisSet> dimListArg(const Graph& g, ValueId dimsValue, int64_t rank);

/// Groups of consecutive dims of equal element count between two shapes of a view/reshape.
std::vector<std::pair<AxisSet, AxisSet>> viewGroups(const std::vector<int64_t>& in,
                                                    const std::vector<int64_t>& out);
/// Mean-zero along `axes` of `in` -> smallest axes of `out` it implies (union of touched groups).
AxisSet mapMeanZeroThroughView(const std::vector<int64_t>& in, const std::vector<int64_t>& out, AxisSet axes);
/// Constant along `axes` of `in` -> axes of `out` along which it stays constant (whole groups).
AxisSet mapConstantThroughView(const std::vector<int64_t>& in, const std::vector<int64_t>& out, AxisSet axes);
/// Axes plus, optionally, a factor of one axis: a fact's frame as the reshape rule moves it.
struct FactoredAxes {
  AxisSet axes;
  std::optional<AxisFactor> factor;
};
/// Mean-zero along `from` (the factor's axis in `from.axes`, facts.h) of `in` -> the fact on
/// `out`: exact when the mean-zero part is one block of the row-major index (a run of whole
/// axes, or the factor) and that block is whole axes of `out` or a factor of one of them;
/// otherwise mapMeanZeroThroughView's coarse union of groups (no factor).
FactoredAxes mapFactoredMeanZeroThroughView(const std::vector<int64_t>& in, const std::vector<int64_t>& out,
                                            const FactoredAxes& from);
/// Constant along `from` (the factor's axis not in `from.axes`) of `in` -> along what of `out`:
/// mapConstantThroughView's groups, plus every axis of `out` inside a constant block, plus a
/// factor of `out` when a constant block lies inside one axis.
FactoredAxes mapFactoredConstantThroughView(const std::vector<int64_t>& in, const std::vector<int64_t>& out,
                                            const FactoredAxes& from);
/// A factor is well formed on `shape`: its axis exists and its length is a multiple of size * stride.
bool validFactor(const std::vector<int64_t>& shape, const AxisFactor& f);
/// Right-aligned broadcasting of an operand of rank `from` into rank `to`.
AxisSet alignAxes(AxisSet axes, int64_t from, int64_t to);
/// Removes axis `dim`, shifting later axes down (select, unbind, reductions without keepdim).
AxisSet dropAxis(AxisSet axes, int64_t dim);
/// Inserts a new axis at `dim`, shifting later axes up (stack, unsqueeze).
AxisSet insertAxis(AxisSet axes, int64_t dim);

/// Is `operand`, broadcast into an output of rank `outRank`, constant along every axis of
/// `axes` (a Python scalar is)? False when its shape or the output rank is unknown, when its
/// rank exceeds `outRank` (it is not broadcast into the output as recorded), or when `axes` has
/// an axis the output does not have.
bool constantAlong(const Graph& g, ValueId operand, AxisSet axes, int64_t outRank);

}  // namespace foldnorm
