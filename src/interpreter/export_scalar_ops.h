// The Python scalar helpers torch.export keeps for symbolic sizes (_operator.add, torch.sym_max,
// ...), evaluated on concrete values for the interpreter (export_interpreter.cpp). Private to
// src/interpreter/.
#pragma once

#include <ATen/core/ivalue.h>

#include <string>
#include <vector>

namespace foldnorm {

/// `op` ("_operator.floordiv") on `args` (ints, floats, bools) with Python's semantics. Throws
/// foldnorm::Error for a helper it does not know.
c10::IValue exportScalarOp(const std::string& op, const std::vector<c10::IValue>& args);

}  // namespace foldnorm
