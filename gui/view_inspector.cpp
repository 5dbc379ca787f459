// The inspector: for the selected node, its op, module, source, inputs and outputs with shapes,
// the mean-zero fact on each value, and the rule that applied with its rationale. For a
// LayerNorm, its verdict first: what to center, or what breaks it and where.
#include <sstream>

#include "app.h"
#include "foldnorm/analysis/rules.h"
#include "palette.h"

namespace foldnorm::gui {
namespace {

// Every line goes through here so --dump-state can say what the panel showed.
void line(UiState& ui, const std::string& text) {
  ImGui::TextWrapped("%s", text.c_str());
  ui.record.inspectorText.push_back(text);
}
void colouredLine(UiState& ui, const ImVec4& colour, const std::string& text) {
  ImGui::PushStyleColor(ImGuiCol_Text, colour);
  ImGui::TextWrapped("%s", text.c_str());
  ImGui::PopStyleColor();
  ui.record.inspectorText.push_back(text);
}
void heading(UiState& ui, const std::string& text) {
  ImGui::Spacing();
  ImGui::TextDisabled("%s", text.c_str());
  ImGui::Separator();
  ui.record.inspectorText.push_back(text);
}

std::string factText(const MeanZeroFact& fact) {
  std::ostringstream os;
  os << fact;
  return os.str();
}

std::string valueLine(const Graph& g, const AnalysisResult& r, ValueId v) {
  const Value& value = g.value(v);
  std::string text = "%" + value.name + "  ";
  if (value.tensor) text += g.describeTensor(v);
  else if (value.constant) text += formatConstant(*value.constant);
  else text += toString(value.kind);
  if (value.param != kNone) text += "  (parameter " + g.parameter(value.param).path + ")";
  if (value.kind == ValueKind::Tensor && v < r.facts.size() &&
      r.facts[v].state != MeanZeroFact::State::Unknown) {
    text += "\n    " + factText(r.facts[v]);
  }
  return text;
}

// The node whose rule decided the verdict: the breaker, the consumer that sees a shift, or for a
// foldable (or shared-parameter) LN the LN itself, whose rule absorbs the centering.
NodeId decidingNode(const LayerNormVerdict& v) {
  if (v.breaker != kNone) return v.breaker;
  if (v.consumer != kNone) return v.consumer;
  return v.info.node;
}

// The card on top: one sentence in the verdict's colour, in a framed box, so the answer comes
// before the details.
void drawWhyCard(UiState& ui, const LayerNormVerdict& v) {
  const std::string& why = ui.highlight.ln == v.info.node && !ui.highlight.why.empty()
                               ? ui.highlight.why
                               : verdictSentence(v);
  const ImU32 bar = v.foldable ? palette::kLnFoldable : palette::kLnNotFoldable;
  ImGui::PushStyleColor(ImGuiCol_ChildBg, IM_COL32(24, 26, 31, 255));
  ImGui::PushStyleColor(ImGuiCol_Border, bar);
  const float wrap = ImGui::GetContentRegionAvail().x - 24;
  const float height = ImGui::CalcTextSize(why.c_str(), nullptr, false, wrap).y +
                       ImGui::GetTextLineHeightWithSpacing() + 20;
  ImGui::BeginChild("##why", ImVec2(0, height), true, ImGuiWindowFlags_NoScrollbar);
  ImGui::TextColored(v.foldable ? palette::kFoldableText : palette::kNotFoldableText, "%s",
                     v.foldable ? "FOLDS into RMSNorm" : "KEPT as LayerNorm");
  ImGui::PushTextWrapPos(ImGui::GetCursorPos().x + wrap);
  ImGui::TextUnformatted(why.c_str());
  ImGui::PopTextWrapPos();
  ImGui::EndChild();
  ImGui::PopStyleColor(2);
  ui.record.inspectorText.push_back("why: " + why);
}

void drawVerdict(App& app, const LayerNormVerdict& v) {
  UiState& ui = app.ui;
  const Graph& g = ui.model->imported().graph;
  const AnalysisResult& r = ui.model->analysis;
  heading(ui, "LayerNorm " + (v.info.modulePath.empty() ? std::string("(top level)") : v.info.modulePath));
  drawWhyCard(ui, v);

  const NodeId deciding = decidingNode(v);
  const Rule& rule = ruleFor(g, deciding);
  heading(ui, deciding == v.info.node ? "Rule" : "Rule at " + g.node(deciding).kind);
  line(ui, rule.name + " (" + toString(rule.family) + ")");
  colouredLine(ui, palette::kDimText, rule.rationale);

  heading(ui, "Details");
  colouredLine(ui, v.foldable ? palette::kFoldableText : palette::kNotFoldableText, verdictSentence(v));
  line(ui, "normalized shape " + formatShape(v.info.normalizedShape) + ", eps " +
               std::to_string(v.info.eps) + (v.info.hasWeight ? ", weight" : "") +
               (v.info.hasBias ? ", bias" : ""));
  if (!v.leaves.empty()) {
    line(ui, std::string(v.foldable ? "Leaves to center:" : "Leaves it would need:"));
    for (LeafId id : v.leaves) {
      if (id < r.leaves.size()) line(ui, "  " + describeLeaf(g, r.leaves[id]));
    }
  }
  if (v.breaker != kNone) line(ui, "Breaking node: " + g.describeNode(v.breaker));
  if (v.consumer != kNone) line(ui, "Sees the shift: " + g.describeNode(v.consumer));
  if (v.sharedParameter != kNone) {
    line(ui, "Shared parameter: " + g.parameter(v.sharedParameter).path);
  }
  if (!v.path.empty()) {
    const bool forward = v.reason == VerdictReason::UnsafeShift;
    line(ui, std::string(forward ? "Shift path: " : "Path: ") +
                 describePath(g, v.path, forward ? " -> " : " <- "));
  }
}

}  // namespace

void DrawInspector(App& app) {
  UiState& ui = app.ui;
  const char* hint = "Select a LayerNorm in the table or a node on the canvas.";
  if (!beginModelWindow(ui, "Inspector", &ui.showInspector, hint)) return;
  if (ui.selectedNode == kNone) {
    ImGui::TextDisabled("%s", hint);
    ImGui::End();
    return;
  }
  const Graph& g = ui.model->imported().graph;
  const AnalysisResult& r = ui.model->analysis;
  const NodeId n = ui.selectedNode;
  const Node& node = g.node(n);

  const LayerNormVerdict* verdict = r.verdictFor(n);
  if (verdict) drawVerdict(app, *verdict);

  heading(ui, "Node");
  line(ui, "op: " + node.kind);
  line(ui, "module: " + (node.modulePath.empty() ? std::string("(top level)") : node.modulePath));
  if (!node.sourceLocation.empty()) line(ui, "source: " + node.sourceLocation);
  const Role role = ui.highlight.role(n);
  if (role != Role::None) {
    colouredLine(ui, ImGui::ColorConvertU32ToFloat4(palette::roleColour(role)),
                 std::string("in the selection: ") + toString(role));
  }
  for (const Leaf& leaf : r.leaves) {
    if (leaf.node == n) {
      line(ui, std::string("leaf") + (r.centeredLeaves.count(leaf.id) ? " (centered by the fold)" : "") +
                   ": " + describeLeaf(g, leaf));
    }
  }

  heading(ui, "Inputs");
  for (std::size_t i = 0; i < node.inputs.size(); ++i) {
    line(ui, std::to_string(i) + ": " + valueLine(g, r, node.inputs[i]));
  }
  heading(ui, "Outputs");
  for (std::size_t i = 0; i < node.outputs.size(); ++i) {
    line(ui, std::to_string(i) + ": " + valueLine(g, r, node.outputs[i]));
  }

  if (!verdict) {  // an LN's own rule is in its card section already
    const Rule& rule = ruleFor(g, n);
    heading(ui, "Rule");
    line(ui, rule.name + " (" + toString(rule.family) + ")");
    line(ui, rule.rationale);
  }
  ImGui::End();
}

}  // namespace foldnorm::gui
