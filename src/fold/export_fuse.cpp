// Fusing the residual add into the folded norm of a .pt2, after LayerNorm -> foldnorm::rms_norm:
//
//   s = aten.add.Tensor(a, b)                      out, s = foldnorm.add_rms_norm(a, b, shape, w, bias, eps)
//   ...                                   ->       ...
//   out = foldnorm.rms_norm(s, shape, w, bias, eps)
//
// add_rms_norm is bitwise equal to aten.add followed by foldnorm::rms_norm (src/ops), so the fold
// stays exact; the fused node sits at the add's place and gives both outputs their old names,
// so the sum's other readers and the norm's readers read what they read before (torch.export.load
// turns the two outputs into getitem nodes, as for any multi-output op). The conditions of the
// TorchScript fusion (src/fold/fuse_add_norm.cpp), on the program:
//   - the functional aten.add.Tensor with alpha 1 (absent or the constant 1), in the norm's graph;
//   - both operands tensors whose recorded sizes are equal (symbolic sizes as the same
//     expression: equal at every input, so no broadcast is hidden) and whose dtypes are equal
//     and floating;
//   - no node between the add and the norm writes into anything (in-place, out=, or a
//     higher-order op, whose subgraph is not read here), so the norm reads at the add's place the
//     values it read at its own;
//   - the norm's other inputs (weight and bias: graph inputs or made before the add; shape and
//     eps: constants) are there at the add's place.
// Each add fuses with the first folded norm reading it; a second norm reads the sum output.
#include <set>

#include "export_internal.h"
#include "foldnorm/interpreter/export_interpreter.h"

namespace foldnorm::export_fold {
namespace {

bool isOne(const json* alpha) {
  if (!alpha) return true;
  if (alpha->contains("as_int")) return alpha->at("as_int").get<int64_t>() == 1;
  if (alpha->contains("as_float")) return alpha->at("as_float").get<double>() == 1.0;
  return false;
}

bool isFloatingCode(int64_t code) {
  for (auto t : {at::kFloat, at::kDouble, at::kHalf, at::kBFloat16})
    if (exportScalarTypeCode(t) == code) return true;
  return false;
}

std::string tensorName(const json* arg) {
  return arg && arg->contains("as_tensor") ? arg->at("as_tensor").at("name").get<std::string>() : std::string();
}

/// Whether tensor `name` exists before node `index` of `graph`: a graph input or an earlier output.
bool definedBefore(const json& graph, std::size_t index, const std::string& name) {
  for (const auto& in : graph.at("inputs"))
    if (tensorName(&in) == name) return true;
  const auto& nodes = graph.at("nodes");
  for (std::size_t i = 0; i < index; ++i)
    for (const auto& o : nodes[i].at("outputs"))
      if (tensorName(&o) == name) return true;
  return false;
}

}  // namespace

void fuseAddNorms(ProgramEdit& edit, FoldReport* report) {
  int fused = 0;
  std::set<Location> fusedAdds;
  for (const auto& normLoc : edit.foldedNorms) {
    auto* repl = edit.replacement(normLoc);
    if (!repl || repl->size() != 1 || repl->at(0).at("target") != "torch.ops.foldnorm.rms_norm.default") continue;
    const json rms = repl->at(0);
    const auto sum = tensorName(namedInput(rms, "input"));
    json& holder = edit.graphHolding(normLoc);
    const auto& nodes = holder.at("nodes");
    Location addLoc;
    for (std::size_t i = 0; i < normLoc.back() && addLoc.empty(); ++i)
      for (const auto& o : nodes[i].at("outputs"))
        if (tensorName(&o) == sum) {
          addLoc = Location(normLoc.begin(), normLoc.end() - 1);
          addLoc.push_back(i);
        }
    if (addLoc.empty() || fusedAdds.count(addLoc) || edit.replacement(addLoc)) continue;
    const json& add = nodes[addLoc.back()];
    if (add.at("target") != "torch.ops.aten.add.Tensor" || add.at("outputs").size() != 1 ||
        !isOne(namedInput(add, "alpha")))
      continue;
    const auto a = tensorName(namedInput(add, "self")), b = tensorName(namedInput(add, "other"));
    const auto& values = holder.at("tensor_values");
    if (a.empty() || b.empty() || !values.contains(a) || !values.contains(b)) continue;
    const auto &ma = values.at(a), &mb = values.at(b);
    if (ma.at("sizes") != mb.at("sizes") || ma.at("dtype") != mb.at("dtype") ||
        !isFloatingCode(ma.at("dtype").get<int64_t>()))
      continue;
    bool writes = false;
    for (std::size_t i = addLoc.back() + 1; i < normLoc.back() && !writes; ++i) writes = mutatesArgument(nodes[i]);
    if (writes) continue;
    bool available = namedInput(rms, "normalized_shape")->contains("as_ints") &&
                     namedInput(rms, "eps")->contains("as_float");
    for (const char* param : {"weight", "bias"}) {
      auto name = tensorName(namedInput(rms, param));
      available = available && (name.empty() || definedBefore(holder, addLoc.back(), name));
    }
    if (!available) continue;
    const auto out = rms.at("outputs").at(0).at("as_tensor").at("name").get<std::string>();
    json inputs = {positional("input", tensorArg(a)), positional("residual", tensorArg(b)),
                   positional("normalized_shape", *namedInput(rms, "normalized_shape")),
                   positional("weight", *namedInput(rms, "weight")), positional("bias", *namedInput(rms, "bias")),
                   positional("eps", *namedInput(rms, "eps"))};
    auto node = newNode(add, "torch.ops.foldnorm.add_rms_norm.default", std::move(inputs), {out, sum});
    // A name of its own: torch.export.load names the node by it and makes one getitem node per
    // output name, so it may be neither.
    node["name"] = edit.names.fresh("add_rms_norm");
    edit.replace(addLoc, {node});
    edit.replace(normLoc, {});
    fusedAdds.insert(addLoc);
    ++fused;
  }
  if (report) report->fusedAddNorms = fused;
}

}  // namespace foldnorm::export_fold
