// Module paths ("transformer.h.0.attn") for every node of an imported Graph: a graph pass that
// needs no torch, so every importer (TorchScript today, torch.export tomorrow) names nodes alike.
//
// What an importer knows is handed over as ModuleEvidence; the graph supplies the rest
// (parameters with their attribute paths, producers and consumers). In order of precedence:
//   - a prim::GetAttr node belongs to what it reads: a parameter's module, or the submodule;
//   - a node that reads parameters belongs to their module (the deepest module that holds them
//     all): an LN with a weight is named by its weight's module;
//   - a node the trace recorded a call stack for belongs to the module instance that call ran
//     on. Call stacks name instances only by their last attribute name and skip containers that
//     are never called (ModuleList, Sequential indexed): block[0][0], block[1][0] and
//     layer_norm[0] of a SegFormer stage are all "0". So each call (one module instance) learns
//     its true path from the module value its own GetAttr nodes read from (that module's
//     attribute path); a call that reads nothing takes the path of the nearest learned call
//     before it whose names are a prefix of its own, plus the rest of its names. Paths are
//     unique per module instance wherever a call reads an attribute;
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
  /// Per node: which call (one run of one module instance's forward) it belongs to, as an index
  /// the importer chooses (nodes of one call share it); kNone where the trace kept no call stack.
  std::vector<std::size_t> callSite;
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
