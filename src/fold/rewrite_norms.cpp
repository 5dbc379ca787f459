// Executing the plan's LayerNorm part: each foldable LN node becomes foldnorm::rms_norm with the
// same input, normalized shape, weight, bias and eps (the input is mean-zero by the plan), or,
// for a portable model (RmsOp::Aten), aten::rms_norm(input, normalized_shape, weight, eps)
// followed by aten::add(out, bias) where the LN has a bias: ATen's op has no bias argument.
#include <torch/csrc/jit/ir/ir.h>

#include "foldnorm/common/setting_error.h"
#include "foldnorm/ops/rms_norm.h"
#include "fold_internal.h"

namespace foldnorm {

const char* toString(RmsOp op) {
  switch (op) {
    case RmsOp::Foldnorm: return "foldnorm";
    case RmsOp::Aten: return "aten";
  }
  return "?";
}

RmsOp parseRmsOp(const std::string& name) {
  if (name == kRmsOpNames[0]) return RmsOp::Foldnorm;
  if (name == kRmsOpNames[1]) return RmsOp::Aten;
  throw SettingError("rms_op", "rms_op must be 'foldnorm' or 'aten', not '" + name + "'");
}

}  // namespace foldnorm

namespace foldnorm::fold_detail {
namespace {

jit::Value* ourRmsNorm(const std::shared_ptr<jit::Graph>& graph, jit::Node* ln) {
  const auto rmsKind = c10::Symbol::fromQualString(ops::kRmsNormOp);
  auto* rms = graph->create(rmsKind, {ln->input(0), ln->input(1), ln->input(2), ln->input(3), ln->input(4)}, 1);
  rms->insertBefore(ln);
  rms->setSourceRange(ln->sourceRange());
  rms->output()->setType(ln->output()->type());
  return rms->output();
}

jit::Value* atenRmsNorm(const std::shared_ptr<jit::Graph>& graph, jit::Node* ln) {
  jit::WithInsertPoint guard(ln);
  // Graph::insert matches the schema (and adds the defaults), so the nodes run as emitted.
  auto* out = graph->insert(c10::aten::rms_norm, {ln->input(0), ln->input(1), ln->input(2), ln->input(4)});
  out->node()->setSourceRange(ln->sourceRange());
  if (!ln->input(3)->mustBeNone()) {
    out = graph->insert(c10::aten::add, {out, ln->input(3)});
    out->node()->setSourceRange(ln->sourceRange());
  }
  out->setType(ln->output()->type());
  return out;
}

}  // namespace

void replaceLayerNorms(const std::shared_ptr<jit::Graph>& graph, const GraphTables& tables,
                       const ImportedModel& model, const AnalysisResult& analysis, RmsOp rmsOp,
                       FoldReport* report) {
  const Graph& g = model.graph;
  if (report) report->rmsOp = rmsOp;
  for (const auto& verdict : analysis.layerNorms) {
    if (!verdict.foldable) {
      if (report) {
        report->kept.push_back(verdict.info.modulePath);
        report->keptReasons.push_back(verdict.explanation);
      }
      continue;
    }
    auto* ln = tables.nodes.at(g.node(verdict.info.node).origin);
    auto* replacement = rmsOp == RmsOp::Aten ? atenRmsNorm(graph, ln) : ourRmsNorm(graph, ln);
    ln->output()->replaceAllUsesWith(replacement);
    ln->destroy();
    if (report) report->folded.push_back(verdict.info.modulePath);
  }
}

}  // namespace foldnorm::fold_detail
