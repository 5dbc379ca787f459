// The torch.export importer's shared pieces (private to src/import/export/).
//
//   archive.cpp   the .pt2 zip: layout checks, JSON, weights/constants as tensors, example inputs
//   values.cpp    the schema's JSON encodings: TensorMeta, SymInt, enums -> our types
//   importer.cpp  ExportedProgram -> Graph (nodes in order, arguments bound by the op schema)
//   functionalize.cpp  in-place writes (through views too) as functional values
//   dispatch.cpp  importModel: .pt2 or TorchScript by content
#pragma once

#include <c10/core/ScalarType.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "foldnorm/graph/graph.h"

namespace foldnorm::export_detail {

/// dtype, sizes, strides and storage offset of a TensorMeta (symbolic sizes at their hint).
struct TensorShape {
  c10::ScalarType dtype = c10::ScalarType::Float;
  std::vector<int64_t> sizes, strides;
  int64_t offset = 0;
};
TensorShape tensorShape(const nlohmann::json& meta, const std::string& where);

/// The schema's ScalarType enum (torch/_export/serde/schema.py, not c10's numbering).
c10::ScalarType scalarType(int64_t schemaValue, const std::string& where);
/// c10's numbering of the schema's Layout and MemoryFormat enums (what a TorchScript constant holds).
int64_t layoutValue(int64_t schemaValue);
int64_t memoryFormatValue(int64_t schemaValue);

/// A SymInt ({"as_int": k} or {"as_expr": {"expr_str", "hint"}}): its value, the hint for a
/// symbol. Throws foldnorm::Error naming `where` when a symbol has no hint.
int64_t symIntValue(const nlohmann::json& symInt, const std::string& where);

/// "torch.ops.aten.linear.default" -> {"aten", "linear", "default"}; empty parts when the target
/// is not an op overload (builtins, "torch.sym_*", higher-order ops keep "higher_order").
struct OpTarget {
  std::string ns, name, overload;
  bool isOp() const { return !ns.empty(); }
  std::string kind() const { return ns + "::" + name; }
};
OpTarget parseTarget(const std::string& target);

}  // namespace foldnorm::export_detail
