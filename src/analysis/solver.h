// Internal to src/analysis: solver pieces the steps in other files share.
#pragma once

#include "foldnorm/analysis/analysis.h"

namespace foldnorm {

/// Follows the change centering `leaf` causes (a shift constant along leaf.axes, or along no
/// axis for a grouped centering) forward; safe when it ends in absorbers.
ShiftCheck checkShift(const Graph& g, const Leaf& leaf);

}  // namespace foldnorm
