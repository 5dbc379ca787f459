// Fusing the residual add into the folded norm: after the LN -> foldnorm::rms_norm rewrite,
//
//   %s = aten::add(%a, %b, 1)                %a2, %b2 = broadcast_tensors([%a, %b])
//   ...                               ->     %y, %s = foldnorm::add_rms_norm(%a2, %b2, shape, w, bias, eps)
//   %y = foldnorm::rms_norm(%s, shape, w, bias, eps)
//
// add_rms_norm is bitwise equal to aten::add followed by foldnorm::rms_norm (src/ops), so the fold
// stays exact; it reads a and b once and writes both outputs once (4 passes instead of 5). The sum's
// other readers take its `sum` output. Conditions (otherwise the pair is left as it is):
//   - the functional aten::add.Tensor with alpha the constant 1 (in-place add_ is never touched:
//     its output aliases an input, and what else sees that memory is not ours to reorder);
//   - both operands tensors whose recorded shapes are equal and whose recorded dtypes are equal
//     and floating (a broadcasting add would make the fused op copy the small operand);
//   - nothing in the graph writes to the sum, the operands or the norm's parameters (AliasDb),
//     so computing the norm at the add's position reads the same values as at the norm's;
//   - the norm's other inputs (constants, the normalized-shape list, parameter reads) can be
//     moved to before the add.
// The recorded shapes are those of the example inputs only: a tensor that broadcast there as an
// equal shape (batch 1) may not at another batch size. So the operands always pass through
// aten::broadcast_tensors (views, no copy, when the shapes are equal): the fused node then gets
// equal shapes whatever the input, as aten::add would have broadcast them.
#include <torch/csrc/jit/ir/alias_analysis.h>
#include <torch/csrc/jit/ir/ir.h>

#include <algorithm>
#include <unordered_map>

#include "foldnorm/ops/rms_norm.h"
#include "fold_internal.h"

namespace foldnorm::fold_detail {
namespace {

bool isOne(jit::Value* v) {
  auto iv = jit::toIValue(v);
  if (!iv) return false;
  if (iv->isInt()) return iv->toInt() == 1;
  if (iv->isDouble()) return iv->toDouble() == 1.0;
  return false;
}

bool isFloatingDtype(const std::string& dtype) {
  return dtype == "float32" || dtype == "float64" || dtype == "bfloat16" || dtype == "float16";
}

// Can `v` be made available before `point` by moving the side-effect-free nodes that make it
// (constants, constant lists, attribute reads)? Moves them when it can.
bool hoistBefore(jit::Value* v, jit::Node* point) {
  jit::Node* n = v->node();
  if (n->kind() == c10::prim::Param || n->isBefore(point)) return true;
  const auto k = n->kind();
  if (k != c10::prim::Constant && k != c10::prim::ListConstruct && k != c10::prim::GetAttr) return false;
  for (auto* in : n->inputs())
    if (!hoistBefore(in, point)) return false;
  n->moveBefore(point);
  return true;
}

struct Pair {
  jit::Node* add;
  jit::Node* rms;
};

}  // namespace

void fuseAddNorms(const std::shared_ptr<jit::Graph>& graph, const GraphTables& tables, const ImportedModel& model,
                  FoldReport* report) {
  const auto rmsKind = c10::Symbol::fromQualString(ops::kRmsNormOp);
  const auto fusedKind = c10::Symbol::fromQualString(ops::kAddRmsNormOp);
  const Graph& g = model.graph;
  std::unordered_map<const jit::Value*, ValueId> ids;
  for (std::size_t i = 0; i < tables.values.size(); ++i) ids.emplace(tables.values[i], static_cast<ValueId>(i));
  auto recorded = [&](const jit::Value* v) -> const TensorInfo* {
    auto it = ids.find(v);
    if (it == ids.end()) return nullptr;
    const auto& value = g.value(it->second);
    return value.tensor ? &*value.tensor : nullptr;
  };

  for (auto* n : graph->nodes())
    if (n->kind() == c10::prim::SetAttr) return;  // attribute writes: reads may not be moved
  jit::AliasDb aliases(graph);
  std::vector<Pair> pairs;
  for (auto* rms : graph->nodes()) {
    if (rms->kind() != rmsKind) continue;
    auto* add = rms->input(0)->node();
    if (add->kind() != c10::aten::add ||
        !add->matches("aten::add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor") ||
        !isOne(add->input(2)))
      continue;
    // One fused node per add: a second norm reading the same sum takes the sum output.
    if (std::any_of(pairs.begin(), pairs.end(), [&](const Pair& p) { return p.add == add; })) continue;
    const TensorInfo* a = recorded(add->input(0));
    const TensorInfo* b = recorded(add->input(1));
    if (!a || !b || a->shape != b->shape || a->dtype != b->dtype || !isFloatingDtype(a->dtype)) continue;
    bool written = aliases.hasWriters(add->output()) || aliases.hasWriters(add->input(0)) ||
                   aliases.hasWriters(add->input(1));
    for (std::size_t i = 1; i < rms->inputs().size(); ++i) written = written || aliases.hasWriters(rms->input(i));
    if (written) continue;
    pairs.push_back({add, rms});
  }

  int fused = 0;
  for (const auto& [add, rms] : pairs) {
    bool movable = true;
    for (std::size_t i = 1; i < rms->inputs().size() && movable; ++i) movable = hoistBefore(rms->input(i), add);
    if (!movable) continue;
    jit::WithInsertPoint guard(add);
    auto* list = graph->insertNode(graph->createList(c10::TensorType::get(), {add->input(0), add->input(1)}));
    auto* broadcast = graph->insertNode(graph->create(c10::aten::broadcast_tensors, {list->output()}, 1));
    broadcast->output()->setType(c10::ListType::ofTensors());
    auto* operands = graph->insertNode(graph->createListUnpack(broadcast->output(), 2));
    auto* node = graph->insertNode(graph->create(
        fusedKind, {operands->output(0), operands->output(1), rms->input(1), rms->input(2), rms->input(3),
                    rms->input(4)},
        2));
    for (auto* x : {list, broadcast, operands, node}) x->setSourceRange(add->sourceRange());
    node->output(0)->setType(rms->output()->type());
    node->output(1)->setType(add->output()->type());
    rms->output()->replaceAllUsesWith(node->output(0));
    rms->destroy();
    add->output()->replaceAllUsesWith(node->output(1));
    add->destroy();
    ++fused;
  }
  if (report) report->fusedAddNorms = fused;
}

}  // namespace foldnorm::fold_detail
