// The registry: every family's rules in documentation order, the lookup by op, and
// docs/rules.md generated from it.
#include <map>
#include <sstream>

#include "rule_helpers.h"

namespace foldnorm {
namespace {

std::vector<Rule> makeRegistry() {
  std::vector<Rule> r;
  // Order matters twice: docs/rules.md lists rules in it, and rules sharing an op are tried in
  // it (a leaf's narrower pattern before the general rule of the same op).
  rules::addLeafRules(r);
  rules::addScaledLeafRules(r);  // before preserving's scale: the same ops
  rules::addPreservingRules(r);
  rules::addAxisRules(r);
  rules::addAxisSumRules(r);
  rules::addAxisSpatialRules(r);
  rules::addScatterRules(r);  // functional writes (the .pt2 importer's functionalized in-place ops)
  rules::addAbsorberRules(r);
  rules::addShapeOnlyRules(r);
  rules::addBreakerRules(r);
  return r;
}

const std::map<std::string, std::vector<std::size_t>>& rulesByOp() {
  static const auto map = [] {
    std::map<std::string, std::vector<std::size_t>> m;
    const auto& reg = ruleRegistry();
    for (std::size_t i = 0; i < reg.size(); ++i)
      for (const auto& op : reg[i].ops) m[op].push_back(i);
    return m;
  }();
  return map;
}

}  // namespace

const std::vector<Rule>& ruleRegistry() {
  static const std::vector<Rule> registry = makeRegistry();
  return registry;
}

const Rule& ruleFor(const Graph& graph, NodeId node) {
  const auto& byOp = rulesByOp();
  auto it = byOp.find(graph.node(node).kind);
  if (it == byOp.end()) return fallbackRule();
  for (auto i : it->second)
    if (ruleRegistry()[i].appliesTo(graph, node)) return ruleRegistry()[i];
  return fallbackRule();
}

std::string rulesMarkdown() {
  std::ostringstream os;
  os << "# Mean-zero rules\n\n"
     << "Generated from the rule registry (`src/analysis/rules/`, one file per family) by "
        "`foldnorm rules`;\na test fails when this file and the registry disagree.\n\n"
     << "Each rule says how an op transforms the two facts of the analysis: whether its output\n"
     << "can be made mean-zero (and along which axes), and what a constant shift arriving at one\n"
     << "of its inputs (from a centered leaf) does: absorbed, passed on, ignored, or seen\n"
     << "(unsafe). See docs/design.md for the lattice and the solver.\n\n";
  const RuleFamily order[] = {RuleFamily::Leaf, RuleFamily::Preserving, RuleFamily::Axis,
                              RuleFamily::Absorber, RuleFamily::ShapeOnly, RuleFamily::Breaker};
  for (auto family : order) {
    os << "## " << toString(family) << "\n\n| rule | ops | rationale |\n|---|---|---|\n";
    for (const auto& rule : ruleRegistry()) {
      if (rule.family != family) continue;
      std::string ops;
      for (const auto& o : rule.ops) ops += (ops.empty() ? "" : ", ") + ("`" + o + "`");
      os << "| " << rule.name << " | " << ops << " | " << rule.rationale << " |\n";
    }
    if (family == RuleFamily::Breaker) {
      const auto& f = fallbackRule();
      os << "| " << f.name << " | (any other op) | " << f.rationale << " |\n";
    }
    os << "\n";
  }
  return os.str();
}

}  // namespace foldnorm
