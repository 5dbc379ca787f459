// The program importer on hand-written ExportedPrograms (schema 8.17 JSON, as torch 2.11 writes
// it) in synthetic archives: arguments bound by the op schema with defaults filled, unknown ops
// named by the analysis, in-place ops, writes through views, higher-order ops.
#include <catch2/catch.hpp>

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

/// A program over a user input x [2, 4] and an LN's weight and bias [4] (placeholders p_ln_weight,
/// p_ln_bias): `nodes` in order, returning `output`; every tensor [2, 4] unless in `shapes`.
std::string program(const json& nodes, const std::string& output, const std::vector<std::string>& tensors) {
  json tv = {{"x", meta({2, 4})}, {"p_ln_weight", meta({4})}, {"p_ln_bias", meta({4})}};
  for (const auto& t : tensors) tv[t] = meta({2, 4});
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
                            const std::vector<std::string>& tensors) {
  static int counter = 0;
  auto path = (dir.path / ("p" + std::to_string(counter++) + ".pt2")).string();
  auto records = test::minimalRecords(program(nodes, output, tensors), weights());
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

TEST_CASE("in-place ops: later reads of the mutated tensor see the result, and writes through views are refused") {
  test::ScratchDir dir;
  // y = x.clone(); y.add_(x); ln(y): the LN reads add_'s result, not the clone.
  json inPlace = {node("clone", "torch.ops.aten.clone.default", {named("self", tensorArg("x"))}, {"clone"}),
                  node("add_", "torch.ops.aten.add_.Tensor", {named("self", tensorArg("clone")), named("other", tensorArg("x"))},
                       {"add_"}),
                  layerNorm("clone")};
  const auto model = importProgram(dir, inPlace, "layer_norm", {"clone", "add_", "layer_norm"});
  for (const auto& n : model.graph.nodes())
    if (n.kind == "aten::layer_norm") CHECK(model.graph.node(model.graph.value(n.inputs[0]).producer).kind == "aten::add_");

  // v = x.view(2, 4); v.add_(1); ln(x): x changed through its view.
  json throughView = {
      node("view", "torch.ops.aten.view.default", {named("self", tensorArg("x")), named("size", {{"as_ints", {2, 4}}})},
           {"view"}),
      node("add_", "torch.ops.aten.add_.Scalar", {named("self", tensorArg("view")), named("other", {{"as_int", 1}})},
           {"add_"}),
      layerNorm("x")};
  CHECK_THROWS_WITH(importProgram(dir, throughView, "layer_norm", {"view", "add_", "layer_norm"}),
                    Catch::Contains("reads 'x' after node 'add_' (torch.ops.aten.add_.Scalar) wrote into a view of it"));
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
