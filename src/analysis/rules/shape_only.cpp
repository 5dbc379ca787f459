// Shape-only rules: ops that read only shapes, dtypes or devices of their inputs.
#include "rule_helpers.h"

namespace foldnorm::rules {
namespace {

void shapeOnlyMz(MeanZeroContext& ctx) {
  for (std::size_t i = 0; i < ctx.node().outputs.size(); ++i)
    if (isTensor(ctx.graph(), ctx.node().outputs.at(i)))
      ctx.set(i, MeanZeroFact::broken(ctx.nodeId(), "a tensor computed from shapes or constants",
                                      ctx.rule()));
}

}  // namespace

void addShapeOnlyRules(std::vector<Rule>& rules) {
  FamilyTable t(rules, RuleFamily::ShapeOnly);
  // size/dim/numel/..., *_like and new_* creations, int/float conversions.
  //   mean-zero: tensor outputs are broken (computed from shapes or constants, not from values).
  //   shift:     ignored: a change of values never reaches them.
  t.add("shape-only",
        {"aten::size", "aten::dim", "prim::shape", "aten::numel", "prim::device", "prim::dtype",
         "prim::layout", "aten::len", "prim::NumToTensor", "aten::Int", "aten::Float",
         "aten::ScalarImplicit", "aten::zeros_like", "aten::ones_like", "aten::empty_like",
         "aten::full_like", "aten::new_zeros", "aten::new_ones", "aten::new_full", "aten::new_empty",
         "aten::floordiv", "aten::sym_size", "aten::is_floating_point"},
        "these read only shapes, dtypes or devices: a change of values never reaches them",
        shapeOnlyMz, ignoreShift);
}

}  // namespace foldnorm::rules
