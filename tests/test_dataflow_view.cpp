// The dataflow view: plumbing hidden, edges contracted through list/tuple bundles with the shape
// each one carries, parameters as notes, model inputs and (flattened) outputs as nodes.
#include <catch2/catch.hpp>

#include <algorithm>

#include "foldnorm/graph/dataflow_view.h"
#include "helpers.h"

using namespace foldnorm;

namespace {

InputSpec spec(const char* s) { return parseInputSpec(s); }

// x [2,3,4] -> fc (linear to 8) -> split into two [2,3,4] halves -> cat them back -> relu
// -> view to [-1, 8] with a size computed from x; outputs (viewed, first half).
const char* kSplitCatIr =
    "graph(%x : Tensor, %fc__weight : Tensor, %fc__bias : Tensor):\n"
    "  %y : Tensor = aten::linear(%x, %fc__weight, %fc__bias)\n"
    "  %four : int = prim::Constant[value=4]()\n"
    "  %m1 : int = prim::Constant[value=-1]()\n"
    "  %zero : int = prim::Constant[value=0]()\n"
    "  %parts : Tensor[] = aten::split(%y, %four, %m1)\n"
    "  %a : Tensor, %b : Tensor = prim::ListUnpack(%parts)\n"
    "  %list : Tensor[] = prim::ListConstruct(%b, %a)\n"
    "  %c : Tensor = aten::cat(%list, %m1)\n"
    "  %r : Tensor = aten::relu(%c)\n"
    "  %n : int = aten::size(%x, %zero)\n"
    "  %eight : int = prim::Constant[value=8]()\n"
    "  %three : int = prim::Constant[value=3]()\n"
    "  %rows : int = aten::mul(%n, %three)\n"
    "  %shape : int[] = prim::ListConstruct(%rows, %eight)\n"
    "  %v : Tensor = aten::view(%r, %shape)\n"
    "  %out : (Tensor, Tensor) = prim::TupleConstruct(%v, %a)\n"
    "  return (%out)\n";

struct Viewed {
  ImportedModel model;
  DataflowView view;

  ViewIndex find(const std::string& opKind) const {
    for (ViewIndex i = 0; i < view.nodes().size(); ++i)
      if (view.node(i).opKind == opKind || view.node(i).name == opKind) return i;
    FAIL("no view node " << opKind);
    return kNone;
  }
  std::vector<const ViewEdge*> edgesBetween(ViewIndex from, ViewIndex to) const {
    std::vector<const ViewEdge*> out;
    for (const auto& e : view.edges())
      if (e.from == from && e.to == to) out.push_back(&e);
    return out;
  }
  std::vector<std::string> kinds() const {
    std::vector<std::string> out;
    for (const auto& n : view.nodes()) out.push_back(n.kind == ViewNode::Kind::Op ? n.opKind : n.name);
    std::sort(out.begin(), out.end());
    return out;
  }
};

Viewed viewOf(const IrModel& ir, bool hidePlumbing = true) {
  Viewed v{importIrModel(ir), {}};
  DataflowViewOptions o;
  o.hidePlumbing = hidePlumbing;
  v.view = buildDataflowView(v.model.graph, o);
  return v;
}

IrModel splitCatModel() { return {kSplitCatIr, {spec("2x3x4")}, {{"fc__weight", spec("8x4")}, {"fc__bias", spec("8")}}}; }

}  // namespace

TEST_CASE("the dataflow view hides plumbing and keeps ops, inputs and flattened outputs", "[render][dataflow]") {
  auto v = viewOf(splitCatModel());
  // Shape arithmetic (size, mul on ints) and bundles are gone; the tuple output is two nodes.
  CHECK(v.kinds() == std::vector<std::string>{"aten::cat", "aten::linear", "aten::relu", "aten::split",
                                              "aten::view", "output 0.0", "output 0.1", "x"});
  for (const auto& n : v.view.nodes()) {
    if (n.kind != ViewNode::Kind::Op) continue;
    INFO(n.opKind);
    CHECK_FALSE(isPlumbing(v.model.graph.node(n.node)));
  }
}

TEST_CASE("dataflow edges are contracted through list and tuple bundles and carry shapes", "[render][dataflow]") {
  auto v = viewOf(splitCatModel());
  auto x = v.find("x"), linear = v.find("aten::linear"), split = v.find("aten::split"), cat = v.find("aten::cat"),
       relu = v.find("aten::relu"), view = v.find("aten::view");

  SECTION("input -> linear -> split carry the recorded shapes") {
    REQUIRE(v.edgesBetween(x, linear).size() == 1);
    CHECK(v.edgesBetween(x, linear)[0]->shape == "[2, 3, 4]");
    REQUIRE(v.edgesBetween(linear, split).size() == 1);
    CHECK(v.edgesBetween(linear, split)[0]->shape == "[2, 3, 8]");
  }
  SECTION("split -> ListUnpack -> ListConstruct -> cat becomes one edge per part, each [2, 3, 4]") {
    auto parts = v.edgesBetween(split, cat);
    REQUIRE(parts.size() == 2);
    for (const auto* e : parts) {
      CHECK(e->shape == "[2, 3, 4]");
      std::vector<std::string> through;
      for (auto n : e->through) through.push_back(v.model.graph.node(n).kind);
      CHECK(std::count(through.begin(), through.end(), "prim::ListConstruct") == 1);
      CHECK(std::count(through.begin(), through.end(), "prim::ListUnpack") == 1);
    }
  }
  SECTION("the shape computed from x by size/mul makes no edge into view: it carries no data") {
    auto in = v.view.inEdges(view);
    REQUIRE(in.size() == 1);
    CHECK(v.view.edge(in[0]).from == relu);
    CHECK(v.edgesBetween(x, view).empty());
  }
  SECTION("the tuple output is flattened: output 0.1 is the first split part") {
    auto second = v.find("output 0.1");
    auto in = v.view.inEdges(second);
    REQUIRE(in.size() == 1);
    CHECK(v.view.edge(in[0]).from == split);
    CHECK(v.view.node(second).shape == "[2, 3, 4]");
  }
  SECTION("topological order puts producers first") {
    auto order = v.view.topologicalOrder();
    auto pos = [&](ViewIndex i) { return std::find(order.begin(), order.end(), i) - order.begin(); };
    for (const auto& e : v.view.edges()) CHECK(pos(e.from) < pos(e.to));
  }
}

TEST_CASE("parameters are notes on the node that reads them, not nodes", "[render][dataflow]") {
  auto v = viewOf(splitCatModel());
  const auto& linear = v.view.node(v.find("aten::linear"));
  REQUIRE(linear.parameters.size() == 2);
  CHECK(linear.parameters[0].text() == "weight: fc.weight [8, 4]");
  CHECK(linear.parameters[1].text() == "bias: fc.bias [8]");
  CHECK(linear.modulePath == "fc");
  CHECK(linear.shape == "[2, 3, 8]");
  for (const auto& n : v.view.nodes()) CHECK(n.opKind != "prim::GetAttr");
}

TEST_CASE("the full view keeps every node and every use", "[render][dataflow]") {
  auto v = viewOf(splitCatModel(), /*hidePlumbing=*/false);
  const auto& g = v.model.graph;
  CHECK(v.view.nodes().size() == g.nodeCount());
  std::size_t uses = 0;
  for (const auto& n : g.nodes())
    for (auto in : n.inputs) uses += g.value(in).producer != kNone;
  CHECK(v.view.edges().size() == uses);
  auto kinds = v.kinds();
  CHECK(std::count(kinds.begin(), kinds.end(), "prim::ListConstruct") == 2);
}

TEST_CASE("an induced subview keeps only edges between kept nodes", "[render][dataflow]") {
  auto v = viewOf(splitCatModel());
  std::vector<bool> keep(v.view.nodes().size(), false);
  keep[v.find("aten::split")] = keep[v.find("aten::cat")] = keep[v.find("aten::view")] = true;
  auto sub = v.view.induced(keep);
  REQUIRE(sub.nodes().size() == 3);
  CHECK(sub.edges().size() == 2);  // the two split parts into cat; cat -> view went through relu
  for (const auto& e : sub.edges()) {
    CHECK(sub.node(e.from).opKind == "aten::split");
    CHECK(sub.node(e.to).opKind == "aten::cat");
  }
  CHECK(sub.indexOf(v.view.node(v.find("aten::cat")).node) != kNone);
  CHECK(sub.indexOf(v.view.node(v.find("aten::relu")).node) == kNone);
}
