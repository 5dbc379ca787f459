// A LibTorch constant (an IValue: a TorchScript prim::Constant, a schema argument's default) as
// a constant of our Graph, and a tensor as a Parameter; shared by the TorchScript and
// torch.export importers.
#pragma once

#include <ATen/core/ivalue.h>

#include <optional>

#include "foldnorm/graph/graph.h"

namespace foldnorm {

/// None, int, float, bool, string, int and float lists, devices (as "cpu", "cuda:0");
/// nullopt for anything else (tensors, tuples, objects).
std::optional<ConstantValue> constantOf(const c10::IValue& value);

/// A parameter, buffer or tensor constant as our Parameter: path, shape, dtype, bytes, and the
/// range of |value| for small floating tensors (the scale-absorption rule reads it).
Parameter describeTensor(std::string path, const at::Tensor& t);

}  // namespace foldnorm
