// Importing a torch.export program (.pt2) into a foldnorm::Graph (the entry that picks the
// importer by a file's content is importModel, import/import.h). Torch-free: the archive's tensors stay behind ExportArchive
// (import/export_archive.h, torch-facing).
//
// The Graph of a .pt2 has the same shape as a TorchScript one, so the analysis, render and GUI
// run unchanged:
//   - node 0 is prim::Param (the user inputs, in the program's order), the last prim::Return
//     (the program's outputs, mutation outputs first as the signature has them);
//   - each lifted parameter or buffer placeholder is a prim::GetAttr node (a tensor constant a
//     prim::Constant node) whose output reads the Parameter named by its FQN;
//   - each program node becomes a node of kind "ns::op" ("torch.ops.aten.linear.default" ->
//     "aten::linear") whose inputs follow the op's schema (omitted arguments filled from its
//     defaults), every constant argument a prim::Constant node, every tensor list a
//     prim::ListConstruct and a Tensor[] result a prim::ListUnpack, as TorchScript has them;
//   - functional, as torch's functionalization writes a program: an in-place op (add_, copy_,
//     masked_fill_) is its out-of-place op ("aten::add", "aten::copy") producing a new value that
//     later readers of the mutated tensor read instead; a write through a view (slice, select,
//     diagonal, as_strided, view/reshape, transpose/permute, unsqueeze/squeeze, alias, chains of
//     them) gives the base a new value made by nodes the importer adds (slice_scatter,
//     select_scatter, diagonal_scatter, as_strided_scatter, or the view's inverse for a reshape or a
//     permutation), and a later read of the base or of any other view of its storage reads that
//     value (a view replayed on it). A write that cannot be written back (through expand, an
//     element of split/unbind) is refused in one line when its storage is read later;
//   - symbolic sizes take their recorded example value (the hint); shapes come from the file
//     (tensor_values), no recording run;
//   - higher-order ops that only set a mode (wrap_with_set_grad_enabled, a disabled
//     wrap_with_autocast) are inlined; any other is refused in one line;
//   - _assert_* nodes (no outputs, no effect on values) are left out of the Graph.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "foldnorm/import/torchscript.h"

namespace foldnorm {

struct ExportArchive;  // import/export_archive.h

/// The .pt2 side of an imported model: the archive, and how the Graph maps back onto its
/// program (what the .pt2 fold and the interpreter need).
struct ExportModel {
  std::shared_ptr<const ExportArchive> archive;
  /// Per Graph node: its position in the program, as indices into graph_module.graph.nodes and,
  /// for a node inlined from a higher-order op, on into that op's subgraph ({hop, i}); empty for
  /// nodes the importer made (inputs, placeholders, constants, lists, return). Node::origin is the
  /// first index (kNone when empty).
  std::vector<std::vector<std::size_t>> nodeLocation;
  /// Per Graph node: the program node's name ("layer_norm_3"); for a placeholder node its
  /// placeholder name ("p_ln_weight"); "" for the nodes the importer made.
  std::vector<std::string> nodeName;
  /// ParamId i is archive->tensors[i]; per parameter, the placeholders that read it.
  std::vector<std::vector<std::string>> placeholders;
  /// Per Graph node: for a node the importer made to functionalize an in-place write (a scatter
  /// giving the base its new value, a view's inverse, a view replayed on a newer value), the
  /// Graph node of the program's in-place op it stands for; kNone for every other node.
  std::vector<NodeId> standsFor;
  /// The values functionalization gave a storage's root: after the program's in-place node
  /// `write` (a Graph node with a location), the program's tensor `base` holds this value;
  /// `aliases` are the program's other names for (views of) the same storage.
  struct BaseAfterWrite {
    NodeId write = kNone;
    std::string base;
    std::vector<std::string> aliases;
  };
  std::map<ValueId, BaseAfterWrite> baseAfterWrite;
};

/// Reads the archive (readExportArchive: one clear line for what is not a readable 2.9+ .pt2)
/// and imports its program. Input specs come from the archive's example inputs (integers get
/// the range [min, max + 1) of the example), or from `options.inputs`, which must match the
/// program's static sizes. Throws foldnorm::Error for every user-caused problem.
ImportedModel importExport(const std::string& path, const ImportOptions& options = {});

/// Whether the file at `path` is a torch.export archive (by content; false when unreadable).
bool isExportFile(const std::string& path);

}  // namespace foldnorm
