// Retargeting copies of a traced module (torch/model_surgery.h): what the fold's float64 check and
// the bench's bfloat16 copies rely on.
#include <catch2/catch.hpp>

#include <torch/csrc/jit/api/function_impl.h>
#include <torch/csrc/jit/ir/irparser.h>

#include "foldnorm/torch/model_surgery.h"

using namespace foldnorm;
namespace jit = torch::jit;

namespace {

std::shared_ptr<jit::Graph> parse(const std::string& ir) {
  auto graph = std::make_shared<jit::Graph>();
  jit::parseIR(ir, graph.get());
  return graph;
}

std::vector<c10::IValue> run(const std::shared_ptr<jit::Graph>& graph, const std::vector<c10::IValue>& inputs) {
  jit::GraphFunction fn("surgery_test", graph->copy(), nullptr);
  jit::Stack stack(inputs.begin(), inputs.end());
  fn.run(stack);
  return stack.at(0).toTupleRef().elements().vec();
}

}  // namespace

TEST_CASE("retargeting rewrites every dtype use of a shared float32 code, and only dtype uses",
          "[surgery]") {
  // One constant 6 (float32's code) with four uses: three dtype arguments and one plain int. Walking
  // the live use list while replacing inputs skips every other use (the bench's old copy did).
  auto graph = parse(R"IR(
graph(%x : Tensor):
  %six : int = prim::Constant[value=6]()
  %no : bool = prim::Constant[value=0]()
  %none : NoneType = prim::Constant()
  %a : Tensor = aten::to(%x, %six, %no, %no, %none)
  %b : Tensor = aten::to(%x, %six, %no, %no, %none)
  %c : Tensor = aten::to(%x, %six, %no, %no, %none)
  %n : int = aten::add(%six, %six)
  %out : (Tensor, Tensor, Tensor, int) = prim::TupleConstruct(%a, %b, %c, %n)
  return (%out)
)IR");
  const auto x = at::randn({3}, at::kDouble);
  for (const auto& v : run(graph, {x})) {
    if (v.isTensor()) CHECK(v.toTensor().scalar_type() == at::kFloat);  // before: rounded to float32
  }

  CHECK(retargetGraph(graph, {at::kDouble, c10::kCPU}) == 3);
  const auto out = run(graph, {x});
  for (int i = 0; i < 3; ++i) {
    INFO("aten::to number " << i);
    CHECK(out[i].toTensor().scalar_type() == at::kDouble);
    CHECK(out[i].toTensor().equal(x));  // no float32 rounding left
  }
  CHECK(out[3].toInt() == 12);  // the same 6 as a plain int stayed 6
  // Retargeting again finds nothing left to rewrite.
  CHECK(retargetGraph(graph, {at::kDouble, c10::kCPU}) == 0);
}

TEST_CASE("a float32 target keeps a trace's float16 and bfloat16 steps, a float64 target replaces them",
          "[surgery]") {
  const std::string ir = R"IR(
graph(%x : Tensor):
  %half : int = prim::Constant[value=5]()
  %no : bool = prim::Constant[value=0]()
  %none : NoneType = prim::Constant()
  %a : Tensor = aten::to(%x, %half, %no, %no, %none)
  %out : (Tensor) = prim::TupleConstruct(%a)
  return (%out)
)IR";
  auto keep = parse(ir);
  CHECK(retargetGraph(keep, {at::kBFloat16, c10::kCPU}) == 0);
  auto widen = parse(ir);
  CHECK(retargetGraph(widen, {at::kDouble, c10::kCPU}) == 1);
  CHECK(run(widen, {at::randn({2})})[0].toTensor().scalar_type() == at::kDouble);
}

TEST_CASE("retargeting attributes keeps tied tensors tied and distinct views of one storage distinct",
          "[surgery]") {
  jit::Module m("__torch__.foldnorm.SurgeryTest");
  jit::Module sub("__torch__.foldnorm.SurgeryTestSub");
  const auto base = at::randn({8});
  const auto low = base.narrow(0, 0, 4), high = base.narrow(0, 4, 4);  // same sizes and strides
  m.register_parameter("low", low, false);
  m.register_parameter("high", high, false);
  sub.register_parameter("tied", low, false);  // `low` under a second name
  sub.register_buffer("steps", at::arange(3));
  m.register_module("sub", sub);

  retargetAttributes(m, {at::kDouble, c10::kCPU});
  const auto newLow = m.attr("low").toTensor(), newHigh = m.attr("high").toTensor();
  const auto newTied = m.attr("sub").toModule().attr("tied").toTensor();
  CHECK(newLow.scalar_type() == at::kDouble);
  CHECK(newLow.equal(low.to(at::kDouble)));
  CHECK(newHigh.equal(high.to(at::kDouble)));  // not low's copy: another part of the storage
  CHECK(newTied.is_same(newLow));              // still one tensor under two names
  CHECK(m.attr("sub").toModule().attr("steps").toTensor().scalar_type() == at::kLong);
}

TEST_CASE("retargeting inputs converts floating inputs only", "[surgery]") {
  const auto out = retargetInputs({at::randn({2}), at::arange(2)}, {at::kBFloat16, c10::kCPU});
  CHECK(out[0].scalar_type() == at::kBFloat16);
  CHECK(out[1].scalar_type() == at::kLong);
  const auto moved = retargetInputs({at::randn({2}, at::kHalf)}, {std::nullopt, c10::kCPU});
  CHECK(moved[0].scalar_type() == at::kHalf);  // no dtype: only moved
}
