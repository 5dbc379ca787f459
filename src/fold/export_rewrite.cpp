// The .pt2 rewrite of the program's nodes: inserted centerings and LayerNorm -> RMSNorm (see
// export_internal.h).
#include <stdexcept>

#include "export_internal.h"
#include "foldnorm/common/error.h"
#include "foldnorm/fold/fold_support.h"
#include "foldnorm/import/export.h"

namespace foldnorm::export_fold {
namespace {

/// Row-major strides of `sizes` (serialized SymInts); a stride over a symbolic size keeps the
/// one `like` has there (metadata only: torch.export.load re-derives what it runs from kernels).
json contiguousStrides(const json& sizes, const json& like) {
  json strides = json::array();
  int64_t step = 1;
  bool symbolic = false;
  for (std::size_t i = sizes.size(); i-- > 0;) {
    strides.insert(strides.begin(), symbolic ? like.at(i) : json{{"as_int", step}});
    if (sizes[i].contains("as_int")) step *= sizes[i]["as_int"].get<int64_t>();
    else symbolic = true;
  }
  return strides;
}

/// Renames every read of `from` after node `first - 1` in `graph` (its nodes, and its outputs when
/// it is a subgraph) to `to`; throws when one of them writes into it (the insertion would then
/// change what the in-place op writes into).
void redirectLaterReads(json& graph, std::size_t first, bool isSubgraph, const std::string& from,
                        const std::string& to, const std::string& where) {
  auto& nodes = graph.at("nodes");
  for (std::size_t i = first; i < nodes.size(); ++i) {
    bool reads = false;
    for (auto& in : nodes[i].at("inputs")) reads = readsTensor(in.at("arg"), from) || reads;
    if (!reads) continue;
    if (mutatesArgument(nodes[i]) && nodes[i].at("target") != "torch.ops.higher_order.wrap_with_set_grad_enabled")
      throw Error("cannot insert a centering after " + where + ": node '" + nodes[i].value("name", "") +
                  "' writes into it in place");
    for (auto& in : nodes[i].at("inputs")) renameTensor(in.at("arg"), from, to);
  }
  for (auto& out : graph.at("outputs")) {
    if (!readsTensor(out, from)) continue;
    // The program's own outputs never read an insertion point (the shift walk stops there).
    if (!isSubgraph) throw std::logic_error("fold: the inserted centering after " + where + " is a program output");
    renameTensor(out, from, to);
  }
}

/// An insertion after a write through a view renames the later reads of the base; a later read
/// of another name for its storage (a view made before the write) would still read the
/// uncentered storage, which the analysis took to be centered.
void checkNoAliasReadLater(const json& graph, std::size_t first, const ExportModel::BaseAfterWrite& written,
                           const std::string& where) {
  const auto& nodes = graph.at("nodes");
  for (const auto& alias : written.aliases)
    for (std::size_t i = first; i < nodes.size(); ++i)
      for (const auto& in : nodes[i].at("inputs"))
        if (readsTensor(in.at("arg"), alias))
          throw Error("cannot insert a centering at " + where + ": node '" + nodes[i].value("name", "") +
                      "' reads '" + alias + "', a view of '" + written.base + "' made before the write, which the "
                      "inserted centering would not reach");
}

}  // namespace

void insertCenterings(ProgramEdit& edit, const AnalysisResult& analysis, FoldReport* report) {
  const Graph& g = edit.model.graph;
  for (const auto& ic : analysis.insertions) {
    if (!ic.inserted) continue;
    const auto& v = g.value(ic.value);
    const auto where = describeInsertion(g, ic);
    const NodeId producer = v.producer;
    // A base's value after a write through a view (functionalization) is the program's base
    // tensor right after the in-place node.
    const auto& afterWrite = edit.model.exported->baseAfterWrite;
    const auto written = afterWrite.find(ic.value);
    const bool atFront = written == afterWrite.end() && !edit.hasLocation(producer);  // an input
    Location loc = atFront ? Location{} : edit.location(written != afterWrite.end() ? written->second.write : producer);
    if (!atFront && written == afterWrite.end() && mutatesArgument(edit.node(loc)))
      throw Error("cannot insert a centering after " + g.describeNode(producer) + ": an in-place op's result");
    json& holder = atFront ? edit.graph() : edit.graphHolding(loc);
    const auto x = written != afterWrite.end() ? written->second.base : v.name;
    if (written != afterWrite.end()) checkNoAliasReadLater(holder, loc.back() + 1, written->second, where);
    if (!holder.at("tensor_values").contains(x)) {
      if (written != afterWrite.end())
        throw Error("cannot insert a centering at " + where + ": the written tensor '" + x +
                    "' is not a tensor of the subgraph holding the write");
      throw std::logic_error("fold: the insertion point '" + x + "' is not a tensor of the program");
    }
    const json meta = holder.at("tensor_values").at(x);
    const auto meanName = edit.names.fresh(x + "_mean"), centered = edit.names.fresh(x + "_centered");
    redirectLaterReads(holder, atFront ? 0 : loc.back() + 1, loc.size() > 1, x, centered, g.describeNode(producer));

    auto dims = json::array();
    json meanMeta = meta;
    for (auto axis : ic.axes.axes()) {
      dims.push_back(axis);
      meanMeta["sizes"][static_cast<std::size_t>(axis)] = {{"as_int", 1}};
    }
    meanMeta["strides"] = contiguousStrides(meanMeta.at("sizes"), meta.at("strides"));
    meanMeta["storage_offset"] = {{"as_int", 0}};
    holder["tensor_values"][meanName] = meanMeta;
    holder["tensor_values"][centered] = meta;
    // Module stack and stack trace of the node it follows, so the program says where it sits.
    json like = atFront ? json{{"metadata", json::object()}} : edit.node(loc);
    std::vector<json> nodes{
        newNode(like, "torch.ops.aten.mean.dim",
                {positional("self", tensorArg(x)), positional("dim", {{"as_ints", dims}}),
                 positional("keepdim", {{"as_bool", true}})},
                {meanName}),
        newNode(like, "torch.ops.aten.sub.Tensor", {positional("self", tensorArg(x)), positional("other", tensorArg(meanName))},
                {centered})};
    if (atFront) edit.insertAtFront(nodes);
    else edit.insertAfter(loc, nodes);
    if (report) report->inserted.push_back(where);
  }
}

void replaceLayerNorms(ProgramEdit& edit, const AnalysisResult& analysis, RmsOp rmsOp, FoldReport* report) {
  const Graph& g = edit.model.graph;
  for (const auto& verdict : analysis.layerNorms) {
    if (!verdict.foldable) {
      if (report) reportKept(*report, verdict);
      continue;
    }
    const auto& loc = edit.location(verdict.info.node);
    auto& holder = edit.graphHolding(loc);
    const json& ln = edit.node(loc);
    const auto target = ln.at("target").get<std::string>();
    const bool native = target == "torch.ops.aten.native_layer_norm.default";
    if (!native && target != "torch.ops.aten.layer_norm.default")
      throw std::logic_error("fold: node " + g.describeNode(verdict.info.node) + " is " + target + ", not a LayerNorm");
    const auto& outs = ln.at("outputs");
    if (native) {
      // Only the normalized output may be used: mean and rstd have no RMSNorm counterpart.
      for (std::size_t k = 1; k < outs.size(); ++k) {
        const auto name = outs[k].at("as_tensor").at("name").get<std::string>();
        bool used = false;
        for (const auto& n : holder.at("nodes"))
          for (const auto& in : n.at("inputs")) used = used || readsTensor(in.at("arg"), name);
        for (const auto& o : holder.at("outputs")) used = used || readsTensor(o, name);
        if (used)
          throw Error("cannot fold the LayerNorm at " + verdict.info.modulePath + ": its mean/rstd output '" + name +
                      "' is used by the program");
      }
    }
    const auto out = outs.at(0).at("as_tensor").at("name").get<std::string>();
    const json none = {{"as_none", true}};
    const json* weight = namedInput(ln, "weight");
    const json* bias = namedInput(ln, "bias");
    const json* eps = namedInput(ln, "eps");
    json w = weight ? *weight : none;
    json b = bias ? *bias : none;
    json e = eps ? *eps : json{{"as_float", 1e-5}};  // layer_norm's default; rms_norm's would be dtype eps
    json input = *namedInput(ln, "input"), shape = *namedInput(ln, "normalized_shape");
    std::vector<json> repl;
    if (rmsOp == RmsOp::Foldnorm) {
      repl.push_back(newNode(ln, "torch.ops.foldnorm.rms_norm.default",
                             {positional("input", input), positional("normalized_shape", shape), positional("weight", w),
                              positional("bias", b), positional("eps", e)}, {out}));
      edit.foldedNorms.push_back(loc);
    } else {
      const bool hasBias = b.contains("as_tensor");
      auto rmsOut = hasBias ? edit.names.fresh(out + "_rms") : out;
      if (hasBias) holder["tensor_values"][rmsOut] = holder.at("tensor_values").at(out);
      repl.push_back(newNode(ln, "torch.ops.aten.rms_norm.default",
                             {positional("input", input), positional("normalized_shape", shape), positional("weight", w),
                              positional("eps", e)}, {rmsOut}));
      if (hasBias)
        repl.push_back(newNode(ln, "torch.ops.aten.add.Tensor",
                               {positional("self", tensorArg(rmsOut)), positional("other", b)}, {out}));
    }
    if (native)  // its unused outputs are gone: drop their metadata too
      for (std::size_t k = 1; k < outs.size(); ++k) holder["tensor_values"].erase(outs[k].at("as_tensor").at("name").get<std::string>());
    edit.replace(loc, std::move(repl));
    if (report) report->folded.push_back(verdict.info.modulePath);
  }
}

}  // namespace foldnorm::export_fold
