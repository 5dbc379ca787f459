// The module-path pass (graph/module_paths.h) on graphs built by hand: no torch, no importer, as a
// second importer would call it.
#include <catch2/catch.hpp>

#include <map>

#include "foldnorm/graph/module_paths.h"

using namespace foldnorm;

namespace {

/// A graph being written node by node, with the evidence an importer would hand over.
struct GraphBuilder {
  Graph g;
  ModuleEvidence evidence;
  ValueId self = kNone;
  std::map<std::string, ParamId> params;

  GraphBuilder() {
    auto in = add("prim::Param", {}, kNone, {});
    g.setGraphInputNode(in);
    self = g.addOutput(in, "self", ValueKind::Module);
  }
  NodeId add(const std::string& kind, const std::vector<ValueId>& inputs, std::size_t site, const std::string& names) {
    auto id = g.addNode(kind);
    for (auto v : inputs) g.addInput(id, v);
    evidence.callStackPath.push_back(names);
    evidence.callSite.push_back(site);
    evidence.attributePath.emplace_back();
    return id;
  }
  /// An op with one tensor output, in call `site` (kNone: none) whose call-stack names are `names`.
  ValueId op(const std::string& kind, const std::vector<ValueId>& inputs, std::size_t site = kNone,
             const std::string& names = {}) {
    return g.addOutput(add(kind, inputs, site, names), kind + std::to_string(g.nodeCount()), ValueKind::Tensor);
  }
  /// A GetAttr reading attribute `path` (its last name) from the module value `from`.
  ValueId getattr(ValueId from, const std::string& path, bool parameter, std::size_t site = kNone,
                  const std::string& names = {}) {
    auto id = add("prim::GetAttr", {from}, site, names);
    evidence.attributePath[id] = path;
    auto v = g.addOutput(id, path, parameter ? ValueKind::Tensor : ValueKind::Module);
    if (!parameter) return v;
    if (!params.count(path)) {
      Parameter p;
      p.path = path;
      params[path] = g.addParameter(p);
    }
    g.value(v).param = params[path];
    g.parameter(params[path]).reads.push_back(v);
    return v;
  }
  /// A parameter read as a C++ trace has it: one GetAttr from self, no call stack.
  ValueId param(const std::string& path) { return getattr(self, path, true); }
  void finish(const std::vector<ValueId>& outputs) { g.setReturnNode(add("prim::Return", outputs, kNone, {})); }
  const std::string& pathOf(ValueId v) const { return g.node(g.value(v).producer).modulePath; }
};

}  // namespace

TEST_CASE("module paths without call stacks come from parameters and data neighbours", "[graph][module_paths]") {
  GraphBuilder b;
  auto x = b.g.addOutput(b.g.graphInputNode(), "x", ValueKind::Tensor);
  auto w = b.param("h.0.mlp.c_fc.weight");
  auto fc = b.op("aten::linear", {x, w});
  auto gelu = b.op("aten::gelu", {fc});
  auto proj = b.op("aten::linear", {gelu, b.param("h.0.mlp.c_proj.weight")});
  auto residual = b.op("aten::add", {proj, x});
  auto ln = b.op("aten::layer_norm", {residual, b.param("h.1.ln_1.weight")});
  b.finish({ln});
  inferModulePaths(b.g, b.evidence);

  CHECK(b.pathOf(fc) == "h.0.mlp.c_fc");  // reads c_fc's weight
  CHECK(b.pathOf(w) == "h.0.mlp.c_fc");   // the weight's GetAttr: its module
  // Between c_fc and c_proj: the deepest module they share.
  CHECK(b.pathOf(gelu) == "h.0.mlp");
  // Block 0's residual add feeds block 1's LN: computed by its producer's block, no higher than
  // the producer's grandparent (h.0.mlp.c_proj -> h.0), not the block list "h".
  CHECK(b.pathOf(residual) == "h.0");
  CHECK(b.pathOf(ln) == "h.1.ln_1");
}

TEST_CASE("with containers in containers every call is named by the module it ran on, not by its call-stack names",
          "[graph][module_paths]") {
  // SegFormer's shape: block[i][j] (a ModuleList of ModuleLists) and layer_norm[i] (a ModuleList
  // of LNs). Call stacks skip the lists, so block.0.0, block.1.0 and layer_norm.0 are all "0".
  GraphBuilder b;
  auto x = b.g.addOutput(b.g.graphInputNode(), "x", ValueKind::Tensor);
  auto list = b.getattr(b.self, "block", false);
  enum Site : std::size_t { kBlock00, kLn00, kBlock10, kLn10, kAct10, kFinal0 };
  // block[0][0]: calls its ln1 (reads a weight).
  auto b00 = b.getattr(b.getattr(list, "block.0", false), "block.0.0", false);
  auto ln00mod = b.getattr(b00, "block.0.0.ln1", false, kBlock00, "0");
  auto ln00 = b.op("aten::layer_norm", {x, b.getattr(ln00mod, "block.0.0.ln1.weight", true, kLn00, "0.ln1")},
                   kLn00, "0.ln1");
  // block[1][0]: the same names; its ln1, then a parameter-free activation module (reads nothing).
  auto b10 = b.getattr(b.getattr(list, "block.1", false), "block.1.0", false);
  auto ln10mod = b.getattr(b10, "block.1.0.ln1", false, kBlock10, "0");
  auto ln10 = b.op("aten::layer_norm", {ln00, b.getattr(ln10mod, "block.1.0.ln1.weight", true, kLn10, "0.ln1")},
                   kLn10, "0.ln1");
  auto residual = b.op("aten::add", {ln10, ln00}, kBlock10, "0");  // block[1][0]'s own op
  auto act = b.op("aten::gelu", {residual}, kAct10, "0.act");
  // layer_norm[0]: a call named "0" too.
  auto final0mod = b.getattr(b.getattr(b.self, "layer_norm", false), "layer_norm.0", false);
  auto final0 = b.op("aten::layer_norm", {act, b.getattr(final0mod, "layer_norm.0.weight", true, kFinal0, "0")},
                     kFinal0, "0");
  b.finish({final0});
  inferModulePaths(b.g, b.evidence);

  // An LN with a weight: its weight's module, each a different one.
  CHECK(b.pathOf(ln00) == "block.0.0.ln1");
  CHECK(b.pathOf(ln10) == "block.1.0.ln1");
  CHECK(b.pathOf(final0) == "layer_norm.0");  // not block.0 ("named after its container")
  // A parameter-free op of a call: the module that call ran on.
  CHECK(b.pathOf(residual) == "block.1.0");
  // A call that reads nothing: its nearest learned parent call (block.1.0, not block.0.0) and
  // the rest of its names.
  CHECK(b.pathOf(act) == "block.1.0.act");
  // GetAttr nodes: what they read.
  CHECK(b.pathOf(ln10mod) == "block.1.0.ln1");
  CHECK(b.pathOf(b10) == "block.1.0");
}

TEST_CASE("a call whose constants the tracer hoisted to the top still finds its parent call", "[graph][module_paths]") {
  // BERT's encoder.layer[0].attention.output.dropout: the dropout module reads no attribute, and
  // its only other node, the constant p, sits in the constant pool at the top of the graph, before
  // any module's GetAttr. Scanning for the parent from there found none and kept the call-stack
  // names, which skip the ModuleList ("0.output.dropout"): the scan starts at the dropout op.
  GraphBuilder b;
  auto x = b.g.addOutput(b.g.graphInputNode(), "x", ValueKind::Tensor);
  enum Site : std::size_t { kOut, kDense, kDrop };
  auto p = b.op("prim::Constant", {}, kDrop, "0.output.dropout");
  auto outmod = b.getattr(b.getattr(b.getattr(b.self, "layer", false), "layer.0", false), "layer.0.output", false);
  auto densemod = b.getattr(outmod, "layer.0.output.dense", false, kOut, "0.output");
  auto dense = b.op("aten::linear", {x, b.getattr(densemod, "layer.0.output.dense.weight", true, kDense, "0.output.dense")},
                    kDense, "0.output.dense");
  auto drop = b.op("aten::dropout", {dense, p}, kDrop, "0.output.dropout");
  b.finish({drop});
  inferModulePaths(b.g, b.evidence);
  CHECK(b.pathOf(dense) == "layer.0.output.dense");
  CHECK(b.pathOf(drop) == "layer.0.output.dropout");
}

TEST_CASE("the module-path pass refuses evidence that does not match the graph", "[graph][module_paths]") {
  GraphBuilder b;
  b.finish({});
  b.evidence.callSite.pop_back();
  CHECK_THROWS_AS(inferModulePaths(b.g, b.evidence), std::invalid_argument);
}

TEST_CASE("module prefixes", "[graph][module_paths]") {
  CHECK(commonModulePrefix("a.b.c", "a.b.d") == "a.b");
  CHECK(commonModulePrefix("a.b", "a.b.c") == "a.b");
  CHECK(commonModulePrefix("a.bc", "a.b") == "a");  // whole names only
  CHECK(commonModulePrefix("x", "y").empty());
  CHECK(parentModule("a.b.c") == "a.b");
  CHECK(parentModule("a").empty());
}
