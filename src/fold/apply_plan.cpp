// Executing the plan: centering (float64, cast back; a scaled centering reads its scale),
// untie as planned, and the inserted centerings (aten mean + sub at the planned values).
#include <torch/csrc/jit/passes/dead_code_elimination.h>

#include <functional>

#include "foldnorm/fold/fold_support.h"
#include "foldnorm/fold/model.h"
#include "fold_internal.h"

namespace foldnorm::fold_detail {

GraphTables tablesFor(const std::shared_ptr<jit::Graph>& graph, const TorchModel& reference) {
  GraphTables t;
  t.nodes.push_back(graph->param_node());
  for (auto* v : graph->inputs()) t.values.push_back(v);
  for (auto* n : graph->nodes()) {
    t.nodes.push_back(n);
    for (auto* v : n->outputs()) t.values.push_back(v);
  }
  t.nodes.push_back(graph->return_node());
  if (t.nodes.size() != reference.nodes.size() || t.values.size() != reference.values.size())
    throw std::logic_error("fold: the copy's graph does not match the analysed graph");
  for (std::size_t i = 0; i < t.nodes.size(); ++i)
    if (t.nodes[i]->kind() != reference.nodes[i]->kind())
      throw std::logic_error("fold: node " + std::to_string(i) + " differs between copies");
  return t;
}

namespace {

/// Owner module and attribute name of a dotted attribute path.
std::pair<jit::Module, std::string> ownerOf(jit::Module root, const std::string& path) {
  jit::Module cur = root;
  std::size_t start = 0;
  while (true) {
    auto dot = path.find('.', start);
    if (dot == std::string::npos) return {cur, path.substr(start)};
    cur = cur.attr(path.substr(start, dot - start)).toModule();
    start = dot + 1;
  }
}

std::string sanitized(const std::string& path) {
  std::string s = "foldnorm_centered_";
  for (char c : path) s += (std::isalnum(static_cast<unsigned char>(c)) ? c : '_');
  return s;
}

}  // namespace

/// Centering and untie on a fresh module `m` (forward inlined in place).
/// It executes the analysis' plan as it stands: the untie mode and the covered reads were
/// decided there (ParameterPlan); nothing is re-derived here.
void centerParameters(jit::Module& m, const std::shared_ptr<jit::Graph>& graph, GraphTables& tables,
                      const ImportedModel& model, const AnalysisResult& analysis, FoldReport* report,
                      std::vector<CenteredTensor>* centered) {
  const Graph& g = model.graph;
  at::NoGradGuard noGrad;
  ScaleLookup scaleOf = [&](ParamId p) {
    auto [owner, name] = ownerOf(m, g.parameter(p).path);
    return owner.attr(name).toTensor().detach();
  };
  auto redirectCoveredReads = [&](const ParameterPlan& plan, jit::Value* centeredValue) {
    for (const auto& [read, node] : plan.coveredReads)
      tables.nodes.at(g.node(node).origin)->replaceInputWith(tables.values.at(read), centeredValue);
  };

  for (const auto& plan : analysis.plan) {
    const auto& param = g.parameter(plan.param);
    if (param.isConstant) {
      auto* constant = tables.nodes.at(g.node(g.value(param.reads.at(0)).producer).origin);
      const auto before = constant->t(c10::attr::value);  // the original's: t_ below replaces, never writes
      auto value = centeredCopy(before, plan.actions, scaleOf);
      if (centered) centered->push_back({before, value, plan.actions, centeringScales(plan.actions, scaleOf)});
      if (plan.untieMode != UntieMode::RedirectReads) {
        constant->t_(c10::attr::value, value);
      } else {
        auto* copy = graph->create(c10::prim::Constant);
        copy->t_(c10::attr::value, value);
        copy->output()->inferTypeFrom(value);
        copy->insertBefore(constant);
        redirectCoveredReads(plan, copy->output());
      }
    } else {
      auto [owner, name] = ownerOf(m, param.path);
      auto original = owner.attr(name).toTensor();
      auto value = centeredCopy(original, plan.actions, scaleOf);
      value.set_requires_grad(original.requires_grad());
      if (centered)  // InPlace writes into the clone's copy: `original` then holds the centred values
        centered->push_back({model.torch->parameterTensors.at(plan.param),
                             plan.untieMode == UntieMode::InPlace ? original : value, plan.actions,
                             centeringScales(plan.actions, scaleOf)});
      switch (plan.untieMode) {
        case UntieMode::InPlace:
          original.detach().copy_(value);  // names sharing this storage are all centered
          break;
        case UntieMode::OwnAttribute:
          owner.setattr(name, value);      // this name gets the copy; the other names keep the original
          break;
        case UntieMode::RedirectReads: {
          // A new attribute on the root module (whose type is this model's alone).
          auto fresh = sanitized(param.path);
          while (m.hasattr(fresh)) fresh += "_";
          if (param.isBuffer) m.register_buffer(fresh, value);
          else m.register_parameter(fresh, value, false);
          auto* self = graph->inputs().at(0);
          auto* get = graph->createGetAttr(self, fresh);
          get->output()->setType(c10::TensorType::get());
          get->insertAfter(graph->param_node());
          redirectCoveredReads(plan, get->output());
          break;
        }
      }
    }
    if (report) {
      report->centered.push_back(param.path);
      if (plan.untie) {
        report->untied.push_back(param.path);
        report->untieBytes += plan.untieBytes;
      }
    }
  }
}

/// x - x.mean(axes, keepdim=True) at each inserted centering's value, read by all its readers.
/// aten mean + sub rather than an op of ours: the saved file needs nothing new to run it, and an
/// op of ours could save at most a quarter of it (docs/design.md "Beyond the paper": bench-norm's
/// centering variant against a copy, with the command).
/// The inserted nodes carry a source range in a file named kInsertedCenteringSource, so the saved
/// model says where they came from (its code and our importer's source locations show it).
void insertCenterings(const std::shared_ptr<jit::Graph>& graph, const GraphTables& tables, const ImportedModel& model,
                      const AnalysisResult& analysis, FoldReport* report) {
  static const std::string kText = "x - x.mean(axes, keepdim=True)  # inserted by foldnorm (docs/method.md section 8)";
  const jit::SourceRange range(std::make_shared<jit::Source>(kText, kInsertedCenteringSource, 1), 0, kText.size());
  for (const auto& ic : analysis.insertions) {
    if (!ic.inserted) continue;
    auto* v = tables.values.at(ic.value);
    auto* producer = v->node();
    jit::WithInsertPoint guard(producer->kind() == c10::prim::Param ? graph->block()->nodes().front()
                                                                    : producer->next());
    std::vector<int64_t> dims = ic.axes.axes();
    auto* mean = graph->insert(c10::aten::mean, {v, dims, true});
    auto* sub = graph->insert(c10::aten::sub, {v, mean});
    mean->node()->setSourceRange(range);
    sub->node()->setSourceRange(range);
    v->replaceAllUsesAfterNodeWith(sub->node(), sub);
    if (report) report->inserted.push_back(describeInsertion(model.graph, ic));
  }
}

void applyPlan(jit::Module& m, const std::shared_ptr<jit::Graph>& graph, const ImportedModel& model,
               const AnalysisResult& analysis, const FoldOptions& options, FoldReport* report,
               std::vector<CenteredTensor>* centered) {
  auto tables = tablesFor(graph, *model.torch);
  at::NoGradGuard noGrad;
  centerParameters(m, graph, tables, model, analysis, report, centered);
  // Before the LN rewrite: an insertion may follow an LN node, which the rewrite destroys.
  insertCenterings(graph, tables, model, analysis, report);
  const RmsOp rmsOp = rmsOpFor(model, options);
  replaceLayerNorms(graph, tables, model, analysis, rmsOp, report);
  // Fusion makes our op; the portable output (aten::rms_norm) stays unfused.
  if (options.fuseAddNorm && rmsOp == RmsOp::Foldnorm) fuseAddNorms(graph, tables, model, report);
  jit::EliminateDeadCode(graph);
}

}  // namespace foldnorm::fold_detail
