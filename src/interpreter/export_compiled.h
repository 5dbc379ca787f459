// Internal to the .pt2 interpreter: a program compiled into steps over numbered slots (one per
// value name), what export_compile.cpp makes and export_interpreter.cpp runs.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <unordered_set>
#include <vector>

#include "foldnorm/interpreter/export_interpreter.h"

namespace foldnorm::export_interp {

// Where an argument's value comes from at run time.
struct ArgSource {
  enum Kind { Const, Slot, TensorList, OptionalTensorList, IntList, FloatList, BoolList } kind = Const;
  c10::IValue constant;
  int slot = -1;
  std::vector<int> slots;                // list elements: slot, or -1 for `elements[i]`
  std::vector<c10::IValue> elements;
};

struct OutBinding {
  int slot = -1;               // single value (-1: unused)
  std::vector<int> listSlots;  // a Tensor[] result, element by element
  bool isList = false;
};

struct Compiled;

struct Step {
  enum Kind { Op, GetItem, ScalarOp, SetGradSubgraph } kind = Op;
  std::string description;  // "node 12 'linear' (torch.ops.aten.linear.default)"
  std::string sourceLine;   // "modeling_gpt2.py:NNN": where the exported code called it, if recorded
  std::optional<c10::OperatorHandle> op;
  std::string scalarOp;     // "_operator.add", "torch.sym_max", ...
  std::vector<ArgSource> args;
  std::vector<OutBinding> outputs;
  std::shared_ptr<const Compiled> subgraph;
  bool gradEnabled = false;
};

// One compiled graph: the top-level program or a higher-order op's subgraph.
struct Compiled {
  std::vector<Step> steps;
  int slotCount = 0;
  std::vector<int> inputSlots;       // graph.inputs, in order
  std::vector<ArgSource> outputs;    // graph.outputs, in order
  std::unordered_set<int> writtenInputs;  // inputs some in-place op writes: cloned per run
};

/// Compiles one graph (the program's, or a higher-order op's subgraph): every node's op looked up
/// in the dispatcher and its arguments bound by the op's schema. Throws foldnorm::Error naming the
/// node it cannot compile.
std::shared_ptr<Compiled> compileGraph(const nlohmann::json& graph, const ExportRunOptions& options);

/// A float argument or constant; non-finite floats are written as strings (the JSON is dumped with
/// allow_nan=False).
double floatOf(const nlohmann::json& j);

}  // namespace foldnorm::export_interp
