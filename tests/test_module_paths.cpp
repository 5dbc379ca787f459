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
    auto in = add("prim::Param", {}, {});
    g.setGraphInputNode(in);
    self = g.addOutput(in, "self", ValueKind::Module);
  }
  NodeId add(const std::string& kind, const std::vector<ValueId>& inputs, const std::string& callStack) {
    auto id = g.addNode(kind);
    for (auto v : inputs) g.addInput(id, v);
    evidence.callStackPath.push_back(callStack);
    evidence.attributePath.emplace_back();
    return id;
  }
  /// An op with one tensor output.
  ValueId op(const std::string& kind, const std::vector<ValueId>& inputs, const std::string& callStack = {}) {
    return g.addOutput(add(kind, inputs, callStack), kind + std::to_string(g.nodeCount()), ValueKind::Tensor);
  }
  /// A parameter read: GetAttr from self (its chain folded into one node), as a trace has it.
  ValueId param(const std::string& path, const std::string& callStack = {}) {
    auto id = add("prim::GetAttr", {self}, callStack);
    evidence.attributePath[id] = path;
    auto v = g.addOutput(id, path, ValueKind::Tensor);
    if (!params.count(path)) {
      Parameter p;
      p.path = path;
      params[path] = g.addParameter(p);
    }
    g.value(v).param = params[path];
    g.parameter(params[path]).reads.push_back(v);
    return v;
  }
  void finish(const std::vector<ValueId>& outputs) {
    auto ret = add("prim::Return", outputs, {});
    g.setReturnNode(ret);
  }
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

TEST_CASE("call-stack paths are renamed to attribute paths learned from the parameters read",
          "[graph][module_paths]") {
  GraphBuilder b;
  auto x = b.g.addOutput(b.g.graphInputNode(), "x", ValueKind::Tensor);
  // Call stacks skip the ModuleList "h": "transformer.0.ln_1" is transformer.h.0.ln_1.
  auto ln = b.op("aten::layer_norm", {x, b.param("transformer.h.0.ln_1.weight", "transformer.0.ln_1")},
                 "transformer.0.ln_1");
  auto act = b.op("aten::gelu", {ln}, "transformer.0.act");  // no parameter: renamed by its prefix
  auto top = b.op("aten::relu", {act});                      // no call stack: the root module
  b.finish({top});
  inferModulePaths(b.g, b.evidence);

  CHECK(b.pathOf(ln) == "transformer.h.0.ln_1");
  CHECK(b.pathOf(act) == "transformer.h.0.act");
  CHECK(b.pathOf(top).empty());
}

TEST_CASE("the module-path pass refuses evidence that does not match the graph", "[graph][module_paths]") {
  GraphBuilder b;
  b.finish({});
  b.evidence.callStackPath.pop_back();
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
