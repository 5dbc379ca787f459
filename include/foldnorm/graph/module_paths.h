// Module paths ("transformer.h.0.attn") for every node of an imported Graph: a graph pass that
// needs no torch, so every importer (TorchScript today, torch.export tomorrow) names nodes alike.
//
// What an importer knows is handed over as ModuleEvidence; the graph supplies the rest
// (parameters with their attribute paths, producers and consumers):
//   - a node that reads parameters belongs to their module (the deepest module that holds them
//     all): an LN with a weight is named by its weight's module;
//   - a node the trace recorded a call stack for belongs to the module instance that call ran
//     on; call stacks name instances but skip containers that are never called (ModuleList,
//     Sequential indexed), so the pass learns the true path of each call from the parameters
//     read inside it;
//   - where no node has a call stack (C++ traces), a node takes the deepest module shared by its
//     latest data producer and its first data consumer.
#pragma once

#include <string>
#include <vector>

#include "foldnorm/graph/graph.h"

namespace foldnorm {

struct ModuleEvidence {
  /// Per node: the module instance names of its call stack, outermost first, joined by '.'
  /// ("transformer.0.ln_1" for transformer.h.0.ln_1); empty where the trace kept none.
  std::vector<std::string> callStackPath;
  /// Per node: the attribute path a prim::GetAttr node reads from the root module
  /// ("transformer.h.0" for a submodule, "transformer.h.0.ln_1.weight" for a parameter); empty
  /// for other nodes.
  std::vector<std::string> attributePath;
};

/// Sets Node::modulePath of every node of `graph`. `evidence` has one entry per node.
void inferModulePaths(Graph& graph, const ModuleEvidence& evidence);

/// The deepest module containing both paths ("a.b.c", "a.b.d" -> "a.b"; "a.b", "a.b.c" -> "a.b").
std::string commonModulePrefix(const std::string& a, const std::string& b);
/// "a.b.c" -> "a.b"; "a" -> "".
std::string parentModule(const std::string& path);

}  // namespace foldnorm
