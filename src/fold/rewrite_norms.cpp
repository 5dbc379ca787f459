// Executing the plan's LayerNorm part: each foldable LN node becomes foldnorm::rms_norm with the
// same input, normalized shape, weight, bias and eps (the input is mean-zero by the plan).
#include "foldnorm/ops/rms_norm.h"
#include "fold_internal.h"

namespace foldnorm::fold_detail {

void replaceLayerNorms(const std::shared_ptr<jit::Graph>& graph, const GraphTables& tables,
                       const ImportedModel& model, const AnalysisResult& analysis, FoldReport* report) {
  const Graph& g = model.graph;
  const auto rmsKind = c10::Symbol::fromQualString(ops::kRmsNormOp);
  for (const auto& verdict : analysis.layerNorms) {
    if (!verdict.foldable) {
      if (report) {
        report->kept.push_back(verdict.info.modulePath);
        report->keptReasons.push_back(verdict.explanation);
      }
      continue;
    }
    auto* ln = tables.nodes.at(g.node(verdict.info.node).origin);
    auto* rms = graph->create(rmsKind, {ln->input(0), ln->input(1), ln->input(2), ln->input(3), ln->input(4)}, 1);
    rms->insertBefore(ln);
    rms->setSourceRange(ln->sourceRange());
    rms->output()->setType(ln->output()->type());
    ln->output()->replaceAllUsesWith(rms->output());
    ln->destroy();
    if (report) report->folded.push_back(verdict.info.modulePath);
  }
}

}  // namespace foldnorm::fold_detail
