// The program importer on hand-written ExportedPrograms (schema 8.17 JSON, as torch 2.11 writes
// it) in synthetic archives: arguments bound by the op schema with defaults filled, unknown ops
// named by the analysis, in-place ops, writes through views, higher-order ops.
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>

#include <nlohmann/json.hpp>

#include "export_test_helpers.h"
#include "foldnorm/analysis/analysis.h"
#include "foldnorm/common/error.h"
#include "foldnorm/import/export.h"
#include "helpers.h"

using namespace foldnorm;
using nlohmann::json;

namespace {

json tensorArg(const std::string& name) { return {{"as_tensor", {{"name", name}}}}; }
json named(const std::string& name, json arg) { return {{"name", name}, {"arg", std::move(arg)}, {"kind", 1}}; }
json meta(std::vector<int64_t> sizes) {
  json s = json::array(), st = json::array();
  int64_t stride = 1;
  std::vector<int64_t> strides(sizes.size());
  for (std::size_t d = sizes.size(); d-- > 0;) strides[d] = stride, stride *= sizes[d];
  for (std::size_t d = 0; d < sizes.size(); ++d) s.push_back({{"as_int", sizes[d]}}), st.push_back({{"as_int", strides[d]}});
  return {{"dtype", 7}, {"sizes", s}, {"strides", st}, {"storage_offset", {{"as_int", 0}}}, {"requires_grad", false},
          {"device", {{"type", "cpu"}, {"index", nullptr}}}, {"layout", 7}};
}
json node(const std::string& name, const std::string& target, json inputs, std::vector<std::string> outputs) {
  json outs = json::array();
  for (const auto& o : outputs) outs.push_back(tensorArg(o));
  return {{"target", target}, {"inputs", std::move(inputs)}, {"outputs", outs},
          {"metadata", {{"nn_module_stack", "L__self__,,M;L__self__ln,ln,torch.nn.LayerNorm"}}}, {"name", name}};
}

using Shapes = std::map<std::string, std::vector<int64_t>>;

/// A program over a user input x [2, 4] and an LN's weight and bias [4] (placeholders p_ln_weight,
/// p_ln_bias): `nodes` in order, returning `output`; every tensor [2, 4] unless in `shapes`.
std::string program(const json& nodes, const std::string& output, const std::vector<std::string>& tensors,
                    const Shapes& shapes) {
  json tv = {{"x", meta({2, 4})}, {"p_ln_weight", meta({4})}, {"p_ln_bias", meta({4})}};
  for (const auto& t : tensors) tv[t] = meta(shapes.count(t) ? shapes.at(t) : std::vector<int64_t>{2, 4});
  json graph = {{"inputs", {tensorArg("p_ln_weight"), tensorArg("p_ln_bias"), tensorArg("x")}},
                {"outputs", {tensorArg(output)}}, {"nodes", nodes}, {"tensor_values", tv},
                {"sym_int_values", json::object()}, {"sym_bool_values", json::object()},
                {"sym_float_values", json::object()}, {"custom_obj_values", json::object()},
                {"is_single_tensor_return", false}};
  json signature = {
      {"input_specs",
       {{{"parameter", {{"arg", {{"name", "p_ln_weight"}}}, {"parameter_name", "ln.weight"}}}},
        {{"parameter", {{"arg", {{"name", "p_ln_bias"}}}, {"parameter_name", "ln.bias"}}}},
        {{"user_input", {{"arg", tensorArg("x")}}}}}},
      {"output_specs", {{{"user_output", {{"arg", tensorArg(output)}}}}}}};
  json p = {{"graph_module", {{"graph", graph}, {"signature", signature}, {"module_call_graph", json::array()}}},
            {"schema_version", {{"major", 8}, {"minor", 17}}}, {"torch_version", "2.11.0"},
            {"verifiers", {"TRAINING"}}, {"opset_version", {{"aten", 10}}}};
  return p.dump();
}

std::string weights() {
  auto entry = [](const char* file) {
    return json{{"path_name", file}, {"is_param", true}, {"use_pickle", false}, {"tensor_meta", meta({4})}};
  };
  return json{{"ln.weight", entry("weight_0")}, {"ln.bias", entry("weight_1")}}.dump();
}

ImportedModel importProgram(const test::ScratchDir& dir, const json& nodes, const std::string& output,
                            const std::vector<std::string>& tensors, const Shapes& shapes = {}) {
  static int counter = 0;
  auto path = (dir.path / ("p" + std::to_string(counter++) + ".pt2")).string();
  auto records = test::minimalRecords(program(nodes, output, tensors, shapes), weights());
  const std::vector<float> w{1.5f, 0.5f, 2.0f, 1.0f}, b{0.1f, -0.2f, 0.3f, 0.0f};
  records.push_back({"data/weights/weight_0", std::string(reinterpret_cast<const char*>(w.data()), 16)});
  records.push_back({"data/weights/weight_1", std::string(reinterpret_cast<const char*>(b.data()), 16)});
  test::writeArchive(path, records);
  return importModel(path);
}

json layerNorm(const std::string& input) {
  // eps and cudnn_enable omitted: the schema's defaults (1e-5, true) fill them.
  return node("layer_norm", "torch.ops.aten.layer_norm.default",
              {named("input", tensorArg(input)), named("normalized_shape", {{"as_ints", {4}}}),
               named("weight", tensorArg("p_ln_weight")), named("bias", tensorArg("p_ln_bias"))},
              {"layer_norm"});
}

}  // namespace

TEST_CASE("a .pt2 program's arguments follow the op schema, omitted defaults filled as TorchScript has them") {
  test::ScratchDir dir;
  json nodes = {node("mean", "torch.ops.aten.mean.dim",
                     {named("self", tensorArg("x")), named("dim", {{"as_ints", {-1}}}), named("keepdim", {{"as_bool", true}})},
                     {"mean"}),
                node("sub", "torch.ops.aten.sub.Tensor", {named("self", tensorArg("x")), named("other", tensorArg("mean"))},
                     {"sub"}),
                layerNorm("sub")};
  const auto model = importProgram(dir, nodes, "layer_norm", {"mean", "sub", "layer_norm"});
  const auto& g = model.graph;
  NodeId ln = kNone;
  for (const auto& n : g.nodes())
    if (n.kind == "aten::layer_norm") ln = n.id;
  REQUIRE(ln != kNone);
  REQUIRE(g.node(ln).inputs.size() == 6);  // input, normalized_shape, weight, bias, eps, cudnn_enable
  REQUIRE(g.constantDouble(g.node(ln).inputs[4]).has_value());
  CHECK(*g.constantDouble(g.node(ln).inputs[4]) == Approx(1e-5));
  CHECK(g.constantBool(g.node(ln).inputs[5]).value_or(false));
  CHECK(g.constantIntList(g.node(ln).inputs[1]).value_or(std::vector<int64_t>{}) == std::vector<int64_t>{4});
  CHECK(g.node(ln).modulePath == "ln");
  CHECK(model.exported->nodeName[ln] == "layer_norm");
  CHECK(model.exported->nodeLocation[ln] == std::vector<std::size_t>{2});
  // mean.dim(self, dim, keepdim, *, dtype=None): the keyword-only default is filled too.
  for (const auto& n : g.nodes())
    if (n.kind == "aten::mean") CHECK(n.inputs.size() == 4);
  // x - x.mean(-1, keepdim=True) is mean-zero: the LN folds, nothing to center.
  const auto result = analyzeFoldability(g);
  REQUIRE(result.layerNorms.size() == 1);
  CHECK(result.layerNorms[0].foldable);
  CHECK(result.layerNorms[0].info.eps == Approx(1e-5));
  // The output depends on the input: the example spec is the input's recorded shape.
  REQUIRE(model.inputSpecs.size() == 1);
  CHECK(model.inputSpecs[0].shape == std::vector<int64_t>{2, 4});
}

TEST_CASE("an op LibTorch does not know is kept by name and breaks, as in TorchScript") {
  test::ScratchDir dir;
  json nodes = {node("mystery", "torch.ops.nowhere.mystery.default", {named("self", tensorArg("x"))}, {"mystery"}),
                layerNorm("mystery")};
  const auto model = importProgram(dir, nodes, "layer_norm", {"mystery", "layer_norm"});
  const auto result = analyzeFoldability(model.graph);
  REQUIRE(result.layerNorms.size() == 1);
  CHECK_FALSE(result.layerNorms[0].foldable);
  CHECK(result.layerNorms[0].reason == VerdictReason::Breaker);
  REQUIRE(result.layerNorms[0].breaker != kNone);
  CHECK(model.graph.node(result.layerNorms[0].breaker).kind == "nowhere::mystery");
}

TEST_CASE("in-place ops are their functional ops: later reads of the mutated tensor see the result") {
  test::ScratchDir dir;
  // y = x.clone(); y.add_(x); ln(y): the LN reads add_'s result (aten::add), not the clone.
  json inPlace = {node("clone", "torch.ops.aten.clone.default", {named("self", tensorArg("x"))}, {"clone"}),
                  node("add_", "torch.ops.aten.add_.Tensor", {named("self", tensorArg("clone")), named("other", tensorArg("x"))},
                       {"add_"}),
                  layerNorm("clone")};
  const auto model = importProgram(dir, inPlace, "layer_norm", {"clone", "add_", "layer_norm"});
  int lns = 0;
  for (const auto& n : model.graph.nodes())
    if (n.kind == "aten::layer_norm") {
      ++lns;
      CHECK(model.graph.node(model.graph.value(n.inputs[0]).producer).kind == "aten::add");
    }
  CHECK(lns == 1);
}

namespace {

json selectNode(const std::string& name, const std::string& self, int64_t dim, int64_t index) {
  return node(name, "torch.ops.aten.select.int",
              {named("self", tensorArg(self)), named("dim", {{"as_int", dim}}), named("index", {{"as_int", index}})}, {name});
}

/// The producer of input `slot` of the graph's only LayerNorm.
const Node& lnInputProducer(const ImportedModel& m, std::size_t slot = 0) {
  for (const auto& n : m.graph.nodes())
    if (n.kind == "aten::layer_norm") return m.graph.node(m.graph.value(n.inputs.at(slot)).producer);
  FAIL("no layer_norm");
  return m.graph.node(0);
}

const Node& producerOf(const ImportedModel& m, const Node& n, std::size_t slot) {
  return m.graph.node(m.graph.value(n.inputs.at(slot)).producer);
}

}  // namespace

TEST_CASE("a write through a view gives its base a new value: a scatter, read by the base and its older views") {
  test::ScratchDir dir;
  // c = x.clone(); other = c[1]; c[0] = x[1] (select + copy_); ln(c + other): both read the write.
  json nodes = {node("clone", "torch.ops.aten.clone.default", {named("self", tensorArg("x"))}, {"clone"}),
                selectNode("other", "clone", 0, 1), selectNode("sel", "clone", 0, 0), selectNode("row", "x", 0, 1),
                node("copy_", "torch.ops.aten.copy_.default", {named("self", tensorArg("sel")), named("src", tensorArg("row"))},
                     {"copy_"}),
                node("add", "torch.ops.aten.add.Tensor", {named("self", tensorArg("clone")), named("other", tensorArg("other"))},
                     {"add"}),
                layerNorm("add")};
  const Shapes rows = {{"other", {4}}, {"sel", {4}}, {"row", {4}}, {"copy_", {4}}};
  const auto m = importProgram(dir, nodes, "layer_norm", {"clone", "other", "sel", "row", "copy_", "add", "layer_norm"}, rows);
  const auto& add = lnInputProducer(m);
  REQUIRE(add.kind == "aten::add");
  const auto& scatter = producerOf(m, add, 0);
  REQUIRE(scatter.kind == "aten::select_scatter");
  CHECK(producerOf(m, scatter, 0).kind == "aten::clone");
  const auto& copy = producerOf(m, scatter, 1);
  CHECK(copy.kind == "aten::copy");  // copy_ functionalized: src broadcast into self
  CHECK(m.graph.constantInt(scatter.inputs.at(2)) == 0);
  CHECK(m.graph.constantInt(scatter.inputs.at(3)) == 0);
  // The view made before the write is replayed on the new value.
  const auto& replayed = producerOf(m, add, 1);
  CHECK(replayed.kind == "aten::select");
  CHECK(replayed.inputs.at(0) == scatter.outputs.at(0));
  CHECK(m.graph.constantInt(replayed.inputs.at(2)) == 1);
  // Both stand for the program's copy_ node, which the fold edits; the base's value is 'clone' after it.
  CHECK(m.exported->standsFor.at(scatter.id) == copy.id);
  CHECK(m.exported->standsFor.at(replayed.id) == copy.id);
  CHECK(m.exported->standsFor.at(copy.id) == kNone);
  const auto& after = m.exported->baseAfterWrite.at(scatter.outputs.at(0));
  CHECK(after.write == copy.id);
  CHECK(after.base == "clone");
  CHECK(std::find(after.aliases.begin(), after.aliases.end(), "other") != after.aliases.end());
  CHECK(std::find(after.aliases.begin(), after.aliases.end(), "row") == after.aliases.end());  // x's storage
}

TEST_CASE("writes through chains of views are written back view by view, reshapes by their inverse") {
  test::ScratchDir dir;
  // c = x.clone(); c[:, 0:2][0].fill_(0.5); ln(c): slice_scatter(c, select_scatter(c[:, 0:2], fill, 0, 0), 1, 0, 2).
  json chain = {node("clone", "torch.ops.aten.clone.default", {named("self", tensorArg("x"))}, {"clone"}),
                node("slice", "torch.ops.aten.slice.Tensor",
                     {named("self", tensorArg("clone")), named("dim", {{"as_int", 1}}), named("start", {{"as_int", 0}}),
                      named("end", {{"as_int", 2}})},
                     {"slice"}),
                selectNode("sel", "slice", 0, 0),
                node("fill_", "torch.ops.aten.fill_.Scalar", {named("self", tensorArg("sel")), named("value", {{"as_float", 0.5}})},
                     {"fill_"}),
                layerNorm("clone")};
  const auto m = importProgram(dir, chain, "layer_norm", {"clone", "slice", "sel", "fill_", "layer_norm"},
                               {{"slice", {2, 2}}, {"sel", {2}}, {"fill_", {2}}});
  const auto& outer = lnInputProducer(m);
  REQUIRE(outer.kind == "aten::slice_scatter");
  CHECK(producerOf(m, outer, 0).kind == "aten::clone");
  const auto& inner = producerOf(m, outer, 1);
  REQUIRE(inner.kind == "aten::select_scatter");
  CHECK(producerOf(m, inner, 0).kind == "aten::slice");
  CHECK(producerOf(m, inner, 1).kind == "aten::fill");
  CHECK(m.graph.constantInt(outer.inputs.at(4)) == 2);  // end

  // v = x.view(2, 4); v.add_(1); ln(x): x's new value is the write reshaped back to x's sizes.
  json throughView = {
      node("view", "torch.ops.aten.view.default", {named("self", tensorArg("x")), named("size", {{"as_ints", {2, 4}}})},
           {"view"}),
      node("add_", "torch.ops.aten.add_.Scalar", {named("self", tensorArg("view")), named("other", {{"as_int", 1}})},
           {"add_"}),
      layerNorm("x")};
  const auto v = importProgram(dir, throughView, "layer_norm", {"view", "add_", "layer_norm"});
  const auto& reshape = lnInputProducer(v);
  REQUIRE(reshape.kind == "aten::reshape");
  CHECK(producerOf(v, reshape, 0).kind == "aten::add");
  CHECK(v.graph.constantIntList(reshape.inputs.at(1)) == std::vector<int64_t>{2, 4});
}

TEST_CASE("a write that cannot be written back is refused in one line when its storage is read later") {
  test::ScratchDir dir;
  // e = c[0].expand(2, 4); e.add_(1); ln(c): expand's elements share memory.
  json nodes = {node("clone", "torch.ops.aten.clone.default", {named("self", tensorArg("x"))}, {"clone"}),
                selectNode("sel", "clone", 0, 0),
                node("expand", "torch.ops.aten.expand.default", {named("self", tensorArg("sel")), named("size", {{"as_ints", {2, 4}}})},
                     {"expand"}),
                node("add_", "torch.ops.aten.add_.Scalar", {named("self", tensorArg("expand")), named("other", {{"as_int", 1}})},
                     {"add_"}),
                layerNorm("clone")};
  const std::vector<std::string> tensors{"clone", "sel", "expand", "add_", "layer_norm"};
  CHECK_THROWS_WITH(importProgram(dir, nodes, "layer_norm", tensors, {{"sel", {4}}}),
                    Catch::Contains("reads 'clone' after node 'add_' (torch.ops.aten.add_.Scalar) wrote into a view of it "
                                    "(a view made by aten::expand, whose elements share memory)"));
  // Read no more after the write: nothing to refuse.
  nodes.back() = layerNorm("add_");
  CHECK_NOTHROW(importProgram(dir, nodes, "layer_norm", tensors, {{"sel", {4}}}));
}

TEST_CASE("higher-order ops other than grad-mode and disabled-autocast wrappers are refused in one line") {
  test::ScratchDir dir;
  json cond = {{"target", "torch.ops.higher_order.cond"}, {"inputs", {named("", {{"as_bool", true}})}},
               {"outputs", {tensorArg("c")}}, {"metadata", json::object()}, {"name", "cond"}};
  CHECK_THROWS_WITH(importProgram(dir, {cond, layerNorm("c")}, "layer_norm", {"c", "layer_norm"}),
                    Catch::Contains("node 'cond' (torch.ops.higher_order.cond) is a higher-order op"));
  json unknownArg = {node("mean", "torch.ops.aten.mean.dim",
                          {named("self", tensorArg("x")), named("dims", {{"as_ints", {-1}}})}, {"mean"})};
  CHECK_THROWS_WITH(importProgram(dir, unknownArg, "mean", {"mean"}),
                    Catch::Contains("passes an argument 'dims' that its op's schema in this LibTorch lacks"));
}
