// A LibTorch constant (an IValue: a TorchScript prim::Constant, a schema argument's default) as
// a constant of our Graph; shared by the TorchScript and torch.export importers.
#pragma once

#include <ATen/core/ivalue.h>

#include <optional>

#include "foldnorm/graph/graph.h"

namespace foldnorm {

/// None, int, float, bool, string, int and float lists, devices (as "cpu", "cuda:0");
/// nullopt for anything else (tensors, tuples, objects).
std::optional<ConstantValue> constantOf(const c10::IValue& value);

}  // namespace foldnorm
