// The rule table as a test: one row per registry rule (and the fallback), each a small IR
// snippet, the value it tags, the mean-zero fact the rule must give that value and what the
// rule does with a shift arriving at one input. A mean-zero claim is also checked in float64:
// the snippet runs with the fact's leaves centered and the tagged value's mean along the
// claimed axes must vanish. A second test fails when a registry rule has no row.
#include <catch2/catch.hpp>

#include <optional>
#include <set>
#include <sstream>

#include "foldnorm/analysis/rules.h"
#include "rule_oracle.h"

using namespace foldnorm;
using foldnorm::test::Analyzed;
using foldnorm::test::analyzeIr;

namespace {

// Inputs and parameters every row may use. %y = linear(%x, %w, %b) is [2,3,8] and mean-zero
// along axis 2 once w and b are centered; %u is an arbitrary [2,3,8] input.
const char* kPrelude =
    "graph(%x : Tensor, %u : Tensor, %img : Tensor, %ids : Tensor, %w : Tensor, %b : Tensor,\n"
    "      %emb : Tensor, %cw : Tensor, %pw : Tensor, %qkv_w : Tensor, %qkv_b : Tensor,\n"
    "      %ln_w : Tensor, %ln_b : Tensor, %pos : Tensor):\n"
    "  %none : NoneType = prim::Constant()\n"
    "  %zero : int = prim::Constant[value=0]()\n"
    "  %one : int = prim::Constant[value=1]()\n"
    "  %two : int = prim::Constant[value=2]()\n"
    "  %m1 : int = prim::Constant[value=-1]()\n"
    "  %f : bool = prim::Constant[value=0]()\n"
    "  %t : bool = prim::Constant[value=1]()\n"
    "  %eps : float = prim::Constant[value=1.0000000000000001e-05]()\n"
    "  %last : int[] = prim::Constant[value=[-1]]()\n"
    "  %y : Tensor = aten::linear(%x, %w, %b)\n";

IrModel rowModel(const std::string& body, const std::string& returned) {
  auto spec = [](const char* s) { return parseInputSpec(s); };
  return {std::string(kPrelude) + body + "  return (%" + returned + ")\n",
          {spec("2x3x4"), spec("2x3x8"), spec("1x3x4x4"), spec("2x3:int64[0,10)")},
          {{"w", spec("8x4")}, {"b", spec("8")}, {"emb", spec("10x8")}, {"cw", spec("8x3x1x1")},
           {"pw", spec("8x8")}, {"qkv_w", spec("24x8")}, {"qkv_b", spec("24")}, {"ln_w", spec("8")},
           {"ln_b", spec("8")}, {"pos", spec("1x8x4x4")}}};
}

/// The tagged value: "h" (the value the snippet returns), "name" (a graph input), "op:kind"
/// (output 0 of the first node of that kind), "param:path" (the parameter's read) or "return"
/// (the graph's return node, which has no output). Debug names of node outputs do not survive
/// the import, so the snippet's own names cannot be used for them.
struct Tagged {
  NodeId node = kNone;
  ValueId value = kNone;
};

Tagged findTagged(const Analyzed& a, const std::string& tag) {
  const auto& g = a.model.graph;
  if (tag == "return") return {g.returnNode(), kNone};
  if (tag == "h") {
    auto v = g.modelOutputs().at(0);
    return {g.value(v).producer, v};
  }
  if (tag.rfind("param:", 0) == 0) {
    for (const auto& p : g.parameters())
      if (p.path == tag.substr(6)) return {g.value(p.reads.at(0)).producer, p.reads.at(0)};
    FAIL("no parameter " << tag);
  }
  if (tag.rfind("op:", 0) == 0) {
    for (const auto& n : g.nodes())
      if (n.kind == tag.substr(3)) return {n.id, n.outputs.at(0)};
    FAIL("no node " << tag);
  }
  for (auto v : g.modelInputs())
    if (g.value(v).name == tag) return {g.value(v).producer, v};
  FAIL("no graph input named " << tag);
  return {};
}

std::string factorText(const std::optional<AxisFactor>& f) {  // " f(axis,size,stride)"
  if (!f) return "";
  return " f(" + std::to_string(f->axis) + "," + std::to_string(f->size) + "," + std::to_string(f->stride) + ")";
}

std::string describe(const MeanZeroFact& f) {
  switch (f.state) {
    case MeanZeroFact::State::Unknown: return "none";
    case MeanZeroFact::State::MeanZero: return "mean-zero " + toString(f.axes) + factorText(f.factor);
    case MeanZeroFact::State::Broken: return "broken";
  }
  return "?";
}

std::string describe(const ShiftOutcome& o) {
  switch (o.kind) {
    case ShiftOutcome::Kind::Absorbed: return "absorbed";
    case ShiftOutcome::Kind::Ignored: return "ignored";
    case ShiftOutcome::Kind::Unsafe: return "unsafe";
    case ShiftOutcome::Kind::Passed:
      if (o.outputs.empty()) return "passed -";
      for (const auto& [v, f] : o.factors)
        if (v == o.outputs[0].first) return "passed " + toString(o.outputs[0].second) + factorText(f);
      return "passed " + toString(o.outputs[0].second);
  }
  return "?";
}

AxisSet parseAxes(const std::string& s) {  // "{0,2}", optionally followed by " f(...)"
  AxisSet out;
  std::istringstream is(s.substr(1, s.find('}') - 1));
  for (std::string item; std::getline(is, item, ',');) out.insert(std::stoll(item));
  return out;
}

std::optional<AxisFactor> parseFactor(const std::string& s) {  // "{} f(axis,size,stride)"
  auto at = s.find("f(");
  if (at == std::string::npos) return std::nullopt;
  AxisFactor f;
  char comma = 0;
  std::istringstream is(s.substr(at + 2));
  is >> f.axis >> comma >> f.size >> comma >> f.stride;
  return f;
}

/// The float64 claim of a fact with a factor: axis `a` of length n viewed as [n/(s*k), s, k],
/// the mean taken over the factor's digit and the other mean-zero axes.
double factoredRelativeMean(const at::Tensor& t, const AxisSet& axes, const AxisFactor& f) {
  std::vector<int64_t> shape(t.sizes().begin(), t.sizes().end());
  std::vector<int64_t> split;
  AxisSet dims;
  for (int64_t a = 0; a < int64_t(shape.size()); ++a) {
    if (a == f.axis) {
      split.insert(split.end(), {shape[a] / (f.size * f.stride), f.size, f.stride});
      dims.insert(int64_t(split.size()) - 2);
      continue;
    }
    split.push_back(shape[a]);
    if (axes.contains(a)) dims.insert(int64_t(split.size()) - 1);
  }
  return test::relativeMean(t.reshape(split), dims);
}

// Boolean masks from the arbitrary input %u: %rows selects whole rows, %elems single elements.
const std::string kRowMasks =
    "  %c0 : float = prim::Constant[value=0.]()\n"
    "  %usum : Tensor = aten::sum(%u, %last, %t, %none)\n"
    "  %rows : Tensor = aten::gt(%usum, %c0)\n"
    "  %elems : Tensor = aten::gt(%u, %c0)\n";

// A convolution output [1,8,4,4], mean-zero along its channels once cw and b are centered.
const std::string kConv =
    "  %cs : int[] = prim::Constant[value=[1, 1]]()\n  %cp : int[] = prim::Constant[value=[0, 0]]()\n"
    "  %cv : Tensor = aten::conv2d(%img, %cw, %b, %cs, %cp, %cs, %one)\n";

// %y transposed to [2,8,3] (mean-zero along axis 1) and the shape that merges that axis into the first.
const std::string kMerged =
    "  %yt : Tensor = aten::transpose(%y, %one, %two)\n  %s16 : int[] = prim::Constant[value=[16, 3]]()\n";

// im2col/col2im arguments: a 2x2 kernel, dilation and stride 1, no padding.
const std::string kPatches =
    "  %k : int[] = prim::Constant[value=[2, 2]]()\n  %d1 : int[] = prim::Constant[value=[1, 1]]()\n"
    "  %p0 : int[] = prim::Constant[value=[0, 0]]()\n";

// Row indices into the table emb [10,8]: %sel [3] (from the ids), %i1 [3,1], %ie [3,8] (%i1
// expanded: constant along axis 1).
const std::string kRowIndex =
    "  %sel : Tensor = aten::select(%ids, %zero, %zero)\n  %i1 : Tensor = aten::unsqueeze(%sel, %one)\n"
    "  %s38 : int[] = prim::Constant[value=[3, 8]]()\n  %ie : Tensor = aten::expand(%i1, %s38, %f)\n";
// Zero indices (in range along the 8 features too): %iz [3,8], %sz [3].
const std::string kZeroIndex =
    "  %iz : Tensor = aten::zeros_like(%ie, %none, %none, %none, %none, %none)\n"
    "  %sz : Tensor = aten::zeros_like(%sel, %none, %none, %none, %none, %none)\n";

struct Row {
  std::string rule;
  std::string body;      // IR lines after the prelude
  std::string tag;       // the value the rule produces (see Tagged)
  std::string fact;      // "mean-zero {axes}" | "broken" | "none"
  int shiftSlot;         // the input a shift arrives at ...
  std::string shiftAxes; // ... constant along these axes of that input
  std::string shift;     // "passed {axes}" (first output) | "absorbed" | "ignored" | "unsafe"
};

// clang-format off
const std::vector<Row>& rows() {
  static const std::vector<Row> table = {
    // ---- leaf ----
    {"linear", "  %h : Tensor = aten::linear(%x, %w, %b)\n", "h", "mean-zero {2}", 0, "{2}", "unsafe"},
    {"addmm", "  %s : int[] = prim::Constant[value=[6, 4]]()\n  %x2 : Tensor = aten::view(%x, %s)\n"
              "  %wt : Tensor = aten::t(%w)\n  %h : Tensor = aten::addmm(%b, %x2, %wt, %one, %one)\n",
     "h", "mean-zero {1}", 1, "{1}", "unsafe"},
    {"matmul-parameter", "  %wt : Tensor = aten::t(%w)\n  %h : Tensor = aten::matmul(%x, %wt)\n",
     "h", "mean-zero {2}", 0, "{2}", "unsafe"},
    {"convolution", "  %s : int[] = prim::Constant[value=[1, 1]]()\n  %p : int[] = prim::Constant[value=[0, 0]]()\n"
                    "  %h : Tensor = aten::conv2d(%img, %cw, %b, %s, %p, %s, %one)\n",
     "h", "mean-zero {1}", 0, "{1}", "unsafe"},
    {"convolution", "  %s : int[] = prim::Constant[value=[1, 1]]()\n  %same : str = prim::Constant[value=\"same\"]()\n"
                    "  %h : Tensor = aten::_convolution_mode(%img, %cw, %b, %s, %same, %s, %one)\n",
     "h", "mean-zero {1}", 0, "{1}", "unsafe"},
    {"multi-head-attention",
     "  %e : int = prim::Constant[value=8]()\n"
     "  %h : Tensor, %hw : Tensor = aten::_native_multi_head_attention(%u, %u, %u, %e, %two, %qkv_w, %qkv_b, %pw, %b, %none, %f, %t, %none)\n",
     "h", "mean-zero {2}", 0, "{2}", "unsafe"},
    {"embedding", "  %h : Tensor = aten::embedding(%emb, %ids, %m1, %f, %f)\n", "h", "mean-zero {2}", 0, "{2}", "unsafe"},
    {"parameter", "  %h : Tensor = aten::add(%emb, %emb, %one)\n", "param:emb", "mean-zero {1}", 0, "{1}", "ignored"},
    {"mean-subtraction", "  %mu : Tensor = aten::mean(%u, %last, %t, %none)\n  %h : Tensor = aten::sub(%u, %mu, %one)\n",
     "h", "mean-zero {2}", 0, "{2}", "passed {2}"},
    // scaled leaf (issue 14): gamma * (W h + b), gamma per channel, in either operand order and
    // through eval dropout; a conv's channel scale reshaped to [C,1,1]. The float64 check runs
    // with the scaled map centered; a shift from upstream meets the per-feature product (seen).
    {"scaled-leaf", "  %p : float = prim::Constant[value=0.1]()\n  %yd : Tensor = aten::dropout(%y, %p, %f)\n"
                    "  %h : Tensor = aten::mul(%ln_w, %yd)\n", "h", "mean-zero {2}", 1, "{2}", "unsafe"},
    {"scaled-leaf", kConv + "  %gs : int[] = prim::Constant[value=[8, 1, 1]]()\n"
                    "  %g : Tensor = aten::reshape(%ln_w, %gs)\n  %h : Tensor = aten::mul(%cv, %g)\n",
     "h", "mean-zero {1}", 0, "{1}", "unsafe"},
    // The bias as its own op (issue 14): gamma * ((W h) + b) with a linear or matmul without bias,
    // or a conv without bias and b reshaped to [C,1,1]; b is centered with the scale, as the
    // op's own bias would be (the float64 check runs with both scaled-centered).
    {"scaled-leaf", "  %yn : Tensor = aten::linear(%x, %w, %none)\n  %yb : Tensor = aten::add(%yn, %b, %one)\n"
                    "  %h : Tensor = aten::mul(%yb, %ln_w)\n", "h", "mean-zero {2}", 0, "{2}", "unsafe"},
    {"scaled-leaf", "  %wt : Tensor = aten::t(%w)\n  %ym : Tensor = aten::matmul(%x, %wt)\n"
                    "  %yb : Tensor = aten::add(%b, %ym, %one)\n  %h : Tensor = aten::mul(%ln_w, %yb)\n",
     "h", "mean-zero {2}", 1, "{2}", "unsafe"},
    {"scaled-leaf", "  %cs : int[] = prim::Constant[value=[1, 1]]()\n  %cp : int[] = prim::Constant[value=[0, 0]]()\n"
                    "  %cn : Tensor = aten::conv2d(%img, %cw, %none, %cs, %cp, %cs, %one)\n"
                    "  %gs : int[] = prim::Constant[value=[8, 1, 1]]()\n  %bc : Tensor = aten::reshape(%b, %gs)\n"
                    "  %cb : Tensor = aten::add(%cn, %bc, %one)\n  %g : Tensor = aten::reshape(%ln_w, %gs)\n"
                    "  %h : Tensor = aten::mul(%cb, %g)\n", "h", "mean-zero {1}", 0, "{1}", "unsafe"},
    // ---- preserving ----
    // b [8] is a parameter leaf along its axis 0 = axis 2 of the sum; its shift is constant along
    // the axes it is broadcast over too.
    {"add-sub", "  %h : Tensor = aten::add(%y, %b, %one)\n", "h", "mean-zero {2}", 1, "{0}", "passed {0,1,2}"},
    // A position table [1,8,4,4] (a parameter leaf along its last axis) added to the conv output
    // [1,8,4,4], mean-zero along the channels: the table is centered along the channels instead
    // (PiT's pos_embed), so the sum is mean-zero along them alone.
    {"add-sub", kConv + "  %h : Tensor = aten::add(%cv, %pos, %one)\n", "h", "mean-zero {1}", 1, "{1}", "passed {1}"},
    // Scale, then bias: (W h) * gamma + b. The product is a scaled leaf (W scaled-centered), b a
    // parameter leaf (plainly centered): the sum is mean-zero along the channels.
    {"add-sub", "  %yn : Tensor = aten::linear(%x, %w, %none)\n  %ys : Tensor = aten::mul(%yn, %ln_w)\n"
                "  %h : Tensor = aten::add(%ys, %b, %one)\n", "h", "mean-zero {2}", 0, "{2}", "passed {2}"},
    {"scale", "  %c : float = prim::Constant[value=0.5]()\n  %h : Tensor = aten::mul(%y, %c)\n",
     "h", "mean-zero {2}", 0, "{2}", "passed {2}"},
    {"identity", "  %h : Tensor = aten::neg(%y)\n", "h", "mean-zero {2}", 0, "{2}", "passed {2}"},
    // p = 0 is the identity even with the training flag left True (torchvision 0.14's Swin);
    // training False is the identity too; p > 0 in training draws a random mask, which also
    // makes a shift vary from element to element.
    {"dropout", "  %p : float = prim::Constant[value=0.]()\n  %h : Tensor = aten::dropout(%y, %p, %t)\n",
     "h", "mean-zero {2}", 0, "{2}", "passed {2}"},
    {"dropout", "  %p : float = prim::Constant[value=0.5]()\n  %h : Tensor = aten::feature_alpha_dropout(%y, %p, %f)\n",
     "h", "mean-zero {2}", 0, "{2}", "passed {2}"},
    {"dropout", "  %p : float = prim::Constant[value=0.5]()\n  %h : Tensor = aten::dropout(%y, %p, %t)\n",
     "h", "broken", 0, "{2}", "unsafe"},
    // Whole rows zeroed (ESM's token dropout, padding): rows stay mean-zero, a row's shift
    // becomes 0 or stays. %rows is [2,3,1] (constant along axis 2), %elems [2,3,8].
    {"row-mask", kRowMasks + "  %h : Tensor = aten::masked_fill(%y, %rows, %c0)\n", "h", "mean-zero {2}", 0, "{2}", "passed {2}"},
    {"row-mask", kRowMasks + "  %h : Tensor = aten::where(%rows, %c0, %y)\n", "h", "mean-zero {2}", 2, "{2}", "passed {2}"},
    {"row-mask", kRowMasks + "  %h : Tensor = aten::where(%rows, %y, %c0)\n", "h", "mean-zero {2}", 1, "{1,2}", "passed {2}"},
    {"row-mask", kRowMasks + "  %h : Tensor = aten::masked_fill(%y, %elems, %c0)\n", "h", "broken", 0, "{2}", "passed {}"},
    {"row-mask", kRowMasks + "  %c1 : float = prim::Constant[value=1.]()\n  %h : Tensor = aten::masked_fill(%y, %rows, %c1)\n",
     "h", "broken", 1, "{2}", "unsafe"},
    // addcmul: y + y * s with s [2,3,1] (a per-row scale from u) keeps y's zero mean; times the
    // per-feature ln_w [8] it breaks.
    {"addcmul", "  %s : Tensor = aten::mean(%u, %last, %t, %none)\n  %h : Tensor = aten::addcmul(%y, %y, %s, %one)\n",
     "h", "mean-zero {2}", 1, "{2}", "passed {2}"},
    {"addcmul", "  %h : Tensor = aten::addcmul(%y, %ln_w, %y, %one)\n", "h", "broken", 2, "{2}", "unsafe"},
    {"addcmul", "  %s : Tensor = aten::mean(%u, %last, %t, %none)\n  %h : Tensor = aten::addcmul(%y, %y, %s, %one)\n",
     "h", "mean-zero {2}", 0, "{1}", "passed {1}"},
    // ---- axis ----
    {"view", "  %s : int[] = prim::Constant[value=[6, 8]]()\n  %h : Tensor = aten::view(%y, %s)\n",
     "h", "mean-zero {1}", 0, "{2}", "passed {1}"},
    {"permute", "  %p : int[] = prim::Constant[value=[0, 2, 1]]()\n  %h : Tensor = aten::permute(%y, %p)\n",
     "h", "mean-zero {1}", 0, "{2}", "passed {1}"},
    // Merged and split axes (MobileViT's unfold): %yt [2,8,3] is mean-zero along axis 1; as
    // [16,3] that axis is the factor (i / 1) % 8 of axis 0, a shift constant along it too; the
    // factor moves with a transpose and becomes a whole axis again when split out.
    {"view", kMerged + "  %h : Tensor = aten::reshape(%yt, %s16)\n", "h", "mean-zero {0} f(0,8,1)", 0, "{1}", "passed {} f(0,8,1)"},
    {"permute", kMerged + "  %m : Tensor = aten::reshape(%yt, %s16)\n  %h : Tensor = aten::transpose(%m, %zero, %one)\n",
     "h", "mean-zero {1} f(1,8,1)", 0, "{} f(0,8,1)", "passed {} f(1,8,1)"},
    {"view", kMerged + "  %m : Tensor = aten::reshape(%yt, %s16)\n  %s2 : int[] = prim::Constant[value=[2, 8, 3]]()\n"
             "  %h : Tensor = aten::reshape(%m, %s2)\n", "h", "mean-zero {1}", 0, "{} f(0,8,1)", "passed {1}"},
    // Split across two dims ([2,8,3] -> [4,12]: each row holds half of the 8): no factor, the
    // coarse group of both.
    {"view", kMerged + "  %s4 : int[] = prim::Constant[value=[4, 12]]()\n  %h : Tensor = aten::reshape(%yt, %s4)\n",
     "h", "mean-zero {0,1}", 0, "{1}", "passed {}"},
    {"expand", "  %s : int[] = prim::Constant[value=[2, 2, 3, 8]]()\n  %h : Tensor = aten::expand(%y, %s, %f)\n",
     "h", "mean-zero {3}", 0, "{2}", "passed {0,3}"},
    {"slice", "  %h : Tensor = aten::select(%y, %one, %zero)\n", "h", "mean-zero {1}", 0, "{2}", "passed {1}"},
    {"index", "  %z : Tensor = aten::zeros_like(%ids, %none, %none, %none, %none, %none)\n"
              "  %l : Tensor?[] = prim::ListConstruct(%z)\n  %h : Tensor = aten::index(%y, %l)\n",
     "h", "mean-zero {3}", 0, "{2}", "passed {3}"},
    {"list", "  %l : Tensor[] = prim::ListConstruct(%y, %y)\n  %h : Tensor, %h2 : Tensor = prim::ListUnpack(%l)\n",
     "h", "mean-zero {2}", 0, "{2}", "passed {2}"},
    // Parts shifted by different amounts: constant along the cat axis no more.
    {"cat", "  %l : Tensor[] = prim::ListConstruct(%y, %y)\n  %h : Tensor = aten::cat(%l, %m1)\n",
     "h", "mean-zero {2}", 0, "{2}", "passed {}"},
    {"pad", "  %p : int[] = prim::Constant[value=[0, 0, 0, 2]]()\n  %z0 : float = prim::Constant[value=0.]()\n"
            "  %h : Tensor = aten::constant_pad_nd(%y, %p, %z0)\n", "h", "mean-zero {2}", 0, "{1,2}", "passed {2}"},
    {"roll-flip", "  %d : int[] = prim::Constant[value=[1]]()\n  %h : Tensor = aten::flip(%y, %d)\n",
     "h", "mean-zero {2}", 0, "{2}", "passed {2}"},
    // ---- functional writes (a .pt2's in-place writes, functionalized by the importer) ----
    // y[:, 0:2] = y[:, 0:2] along the non-mean-zero axis 1 keeps rows; along axis 2 it mixes them.
    {"scatter", "  %s : Tensor = aten::slice(%y, %one, %zero, %two, %one)\n"
                "  %h : Tensor = aten::slice_scatter(%y, %s, %one, %zero, %two, %one)\n", "h", "mean-zero {2}", 0, "{2}", "passed {2}"},
    {"scatter", "  %s : Tensor = aten::slice(%y, %two, %zero, %two, %one)\n"
                "  %h : Tensor = aten::slice_scatter(%y, %s, %two, %zero, %two, %one)\n", "h", "broken", 1, "{1,2}", "passed {1}"},
    // the whole dim replaced: src alone (u's values are all overwritten)
    {"scatter", "  %h : Tensor = aten::slice_scatter(%u, %y, %one, %none, %none, %one)\n", "h", "mean-zero {2}", 0, "{2}", "ignored"},
    {"scatter", "  %r : Tensor = aten::select(%y, %one, %zero)\n  %h : Tensor = aten::select_scatter(%y, %r, %one, %two)\n",
     "h", "mean-zero {2}", 1, "{1}", "passed {2}"},
    {"scatter", "  %r : Tensor = aten::select(%y, %one, %zero)\n  %h : Tensor = aten::select_scatter(%u, %r, %one, %two)\n",
     "h", "broken", 0, "{0,1,2}", "passed {0,2}"},
    // the diagonal of axes 0 and 1 ([8, 2]: the features, then the diagonal) replaced by mean-zero rows
    {"scatter", "  %r : Tensor = aten::select(%y, %one, %zero)\n  %dg : Tensor = aten::t(%r)\n"
                "  %h : Tensor = aten::diagonal_scatter(%y, %dg, %zero, %zero, %one)\n", "h", "mean-zero {2}", 1, "{0}", "passed {2}"},
    {"copy", "  %h : Tensor = aten::copy(%u, %y, %f)\n", "h", "mean-zero {2}", 1, "{2}", "passed {2}"},
    {"copy", "  %d : int[] = prim::Constant[value=[1]]()\n  %m : Tensor = aten::mean(%y, %d, %t, %none)\n"
             "  %h : Tensor = aten::copy(%u, %m, %f)\n", "h", "mean-zero {2}", 1, "{2}", "passed {1,2}"},
    {"fill", "  %c : float = prim::Constant[value=0.5]()\n  %h : Tensor = aten::fill(%y, %c)\n", "h", "broken", 1, "{}", "passed {0,1,2}"},
    {"fill", "  %h : Tensor = aten::zero(%y)\n", "h", "broken", 0, "{2}", "ignored"},
    {"indexed-write", kRowIndex + kZeroIndex + "  %c : float = prim::Constant[value=0.5]()\n"
                      "  %h : Tensor = aten::index_fill(%y, %one, %sz, %c)\n", "h", "broken", 0, "{2}", "unsafe"},
    {"reduce", "  %d : int[] = prim::Constant[value=[1]]()\n  %h : Tensor = aten::mean(%y, %d, %f, %none)\n",
     "h", "mean-zero {1}", 0, "{2}", "passed {1}"},
    // a dims list built in the graph from a size (x.shape[1] - 2 traced as aten::size) reads the
    // recorded shape
    {"reduce", "  %d1 : int = aten::size(%y, %one)\n  %d2 : int = aten::sub(%d1, %two)\n"
               "  %dl : int[] = prim::ListConstruct(%d2)\n  %h : Tensor = aten::mean(%y, %dl, %f, %none)\n",
     "h", "mean-zero {1}", 0, "{2}", "passed {1}"},
    // cumsum/diff along the tokens (axis 1) keep the zero mean along the features; along the
    // features they break it, and a shift constant along the scan does not stay constant.
    {"scan", "  %h : Tensor = aten::cumsum(%y, %one, %none)\n", "h", "mean-zero {2}", 0, "{1,2}", "passed {2}"},
    {"scan", "  %h : Tensor = aten::cumsum(%y, %two, %none)\n", "h", "broken", 0, "{2}", "passed {}"},
    {"scan", "  %h : Tensor = aten::diff(%y, %one, %one, %none, %none)\n", "h", "mean-zero {2}", 0, "{2}", "passed {2}"},
    {"attention-weighted-sum",
     "  %ut : Tensor = aten::transpose(%u, %one, %two)\n  %s : Tensor = aten::matmul(%u, %ut)\n"
     "  %pr : Tensor = aten::softmax(%s, %m1, %none)\n  %h : Tensor = aten::matmul(%pr, %y)\n",
     "h", "mean-zero {2}", 1, "{2}", "passed {2}"},
    {"scaled-dot-product-attention",
     "  %dp : float = prim::Constant[value=0.]()\n"
     "  %h : Tensor = aten::scaled_dot_product_attention(%u, %u, %y, %none, %dp, %f, %none, %f)\n",
     "h", "mean-zero {2}", 2, "{2}", "passed {2}"},
    // einsum: with a parameter a linear map (leaf); of computed tensors a weighted sum
    {"einsum-parameter", "  %eq : str = prim::Constant[value=\"bij,kj->bik\"]()\n  %l : Tensor[] = prim::ListConstruct(%x, %w)\n"
                         "  %h : Tensor = aten::einsum(%eq, %l, %none)\n", "h", "mean-zero {2}", 1, "{2}", "unsafe"},
    {"einsum", "  %ut : Tensor = aten::transpose(%u, %one, %two)\n  %s : Tensor = aten::matmul(%u, %ut)\n"
               "  %pr : Tensor = aten::softmax(%s, %m1, %none)\n  %eq : str = prim::Constant[value=\"bqk,bkd->bqd\"]()\n"
               "  %l : Tensor[] = prim::ListConstruct(%pr, %y)\n  %h : Tensor = aten::einsum(%eq, %l, %none)\n",
     "h", "mean-zero {2}", 1, "{2}", "unsafe"},
    // ---- axis, spatial: %cv = conv2d(img) is [1,8,4,4], mean-zero along the channels ----
    {"average-pool", kConv + "  %k : int[] = prim::Constant[value=[2, 2]]()\n  %p0 : int[] = prim::Constant[value=[0, 0]]()\n"
                     "  %h : Tensor = aten::avg_pool2d(%cv, %k, %k, %p0, %f, %t, %none)\n", "h", "mean-zero {1}", 0, "{1,2,3}", "passed {1}"},
    // global pooling (MaxViT's classifier): an output axis of size 1 is constant along itself
    {"average-pool", kConv + "  %k : int[] = prim::Constant[value=[1, 1]]()\n  %h : Tensor = aten::adaptive_avg_pool2d(%cv, %k)\n",
     "h", "mean-zero {1}", 0, "{1}", "passed {1,2,3}"},
    // pooling along the mean-zero axis itself breaks
    {"average-pool", "  %k : int[] = prim::Constant[value=[2]]()\n  %p0 : int[] = prim::Constant[value=[0]]()\n"
                     "  %h : Tensor = aten::avg_pool1d(%y, %k, %k, %p0, %f, %t)\n", "h", "broken", 0, "{2}", "passed {}"},
    // Shuffles as view -> permute -> view: space-to-depth merges the 8 channels with the 2x2
    // block into 32, the channel being the factor (i / 4) % 8; depth-to-space of all 8 channels
    // spreads each pixel's channel sum over a block (coarse: all three axes); after
    // space-to-depth it splits the channels out again whole.
    {"shuffle", kConv + "  %h : Tensor = aten::pixel_unshuffle(%cv, %two)\n", "h", "mean-zero {1} f(1,8,4)", 0, "{1,2,3}", "passed {1,2,3}"},
    {"shuffle", kConv + "  %h : Tensor = aten::pixel_unshuffle(%cv, %two)\n", "h", "mean-zero {1} f(1,8,4)", 0, "{1}", "passed {} f(1,8,4)"},
    // repeat_interleave by one count keeps the zero mean along every axis (along the repeated
    // one too: a row repeated r times sums to r * 0); by per-element counts, not along that axis.
    {"repeat-interleave", "  %h : Tensor = aten::repeat_interleave(%y, %two, %two, %none)\n", "h", "mean-zero {2}", 0, "{2}", "passed {2}"},
    {"repeat-interleave", "  %h : Tensor = aten::repeat_interleave(%y, %two, %one, %none)\n", "h", "mean-zero {2}", 0, "{1,2}", "passed {1,2}"},
    {"repeat-interleave", "  %s8 : int[] = prim::Constant[value=[8]]()\n  %l : int = prim::Constant[value=4]()\n"
                          "  %rc : Tensor = aten::ones(%s8, %l, %none, %none, %none)\n"
                          "  %h : Tensor = aten::repeat_interleave(%y, %rc, %two, %none)\n", "h", "broken", 0, "{2}", "passed {2}"},
    {"shuffle", kConv + "  %h : Tensor = aten::pixel_shuffle(%cv, %two)\n", "h", "mean-zero {1,2,3}", 0, "{1}", "passed {1} f(2,2,1)"},
    {"shuffle", kConv + "  %pu : Tensor = aten::pixel_unshuffle(%cv, %two)\n  %h : Tensor = aten::pixel_shuffle(%pu, %two)\n",
     "h", "mean-zero {1}", 0, "{} f(1,8,4)", "passed {1}"},
    {"shuffle", kConv + "  %h : Tensor = aten::channel_shuffle(%cv, %two)\n", "h", "mean-zero {1}", 0, "{1}", "passed {1}"},
    {"shuffle", kConv + "  %h : Tensor = aten::native_channel_shuffle(%cv, %two)\n", "h", "mean-zero {1}", 0, "{2,3}", "passed {2,3}"},
    // unfold (im2col, [1,8,4,4] -> [1,32,9]): entry c*4 + k is channel c of one pixel; fold
    // (col2im) of those patches sums them back per channel, so the channels stay mean-zero ...
    {"unfold", kConv + kPatches + "  %h : Tensor = aten::im2col(%cv, %k, %d1, %p0, %d1)\n", "h", "mean-zero {1} f(1,8,4)", 0, "{1}", "unsafe"},
    {"fold", kConv + kPatches + "  %col : Tensor = aten::im2col(%cv, %k, %d1, %p0, %d1)\n"
             "  %sz : int[] = prim::Constant[value=[4, 4]]()\n  %h : Tensor = aten::col2im(%col, %sz, %k, %d1, %p0, %d1)\n",
     "h", "mean-zero {1}", 0, "{} f(1,8,4)", "passed {1}"},
    // ... but a [1,8,16] mean-zero over the whole patch axis (K = 4, C = 2) folds into channels
    // that need not be: other entries of the patch land on other pixels.
    {"fold", kConv + kPatches + "  %s816 : int[] = prim::Constant[value=[1, 8, 16]]()\n  %v : Tensor = aten::view(%cv, %s816)\n"
             "  %sz : int[] = prim::Constant[value=[5, 5]]()\n  %h : Tensor = aten::col2im(%v, %sz, %k, %d1, %p0, %d1)\n",
     "h", "broken", 0, "{0,1}", "passed {0,1}"},
    // gather/take_along_dim of a table (emb [10,8], a parameter leaf along its features): rows
    // picked along dim 0 with an index constant along the features stay centered; an index
    // varying along them, or gathering along them, breaks.
    {"gather", kRowIndex + "  %h : Tensor = aten::gather(%emb, %zero, %ie, %f)\n", "h", "mean-zero {1}", 0, "{1}", "passed {1}"},
    {"gather", kRowIndex + "  %h : Tensor = aten::take_along_dim(%emb, %i1, %zero)\n", "h", "mean-zero {1}", 0, "{0,1}", "passed {0,1}"},
    {"gather", kRowIndex + "  %h : Tensor = aten::gather(%emb, %zero, %ids, %f)\n", "h", "broken", 0, "{1}", "passed {}"},
    {"gather", kRowIndex + kZeroIndex + "  %h : Tensor = aten::gather(%emb, %one, %iz, %f)\n", "h", "broken", 0, "{1}", "passed {1}"},
    // ViT-MAE's index ids.unsqueeze(-1).repeat(1, 1, dim): a repeat of a size-1 axis copies that
    // entry, so it is constant along the features; a repeat that tiles varying entries is not.
    {"gather", kRowIndex + "  %r18 : int[] = prim::Constant[value=[1, 8]]()\n  %ir : Tensor = aten::repeat(%i1, %r18)\n"
     "  %h : Tensor = aten::gather(%emb, %zero, %ir, %f)\n", "h", "mean-zero {1}", 0, "{1}", "passed {1}"},
    {"gather", "  %it : Tensor = aten::t(%ids)\n  %r14 : int[] = prim::Constant[value=[1, 4]]()\n"
     "  %ir : Tensor = aten::repeat(%it, %r14)\n  %h : Tensor = aten::gather(%emb, %zero, %ir, %f)\n",
     "h", "broken", 0, "{1}", "passed {}"},
    // index_select of the table along dim 0 is the slice rule: whole rows
    {"slice", kRowIndex + "  %h : Tensor = aten::index_select(%emb, %zero, %sel)\n", "h", "mean-zero {1}", 0, "{1}", "passed {1}"},
    {"slice", kRowIndex + kZeroIndex + "  %h : Tensor = aten::index_select(%emb, %one, %sz)\n", "h", "broken", 0, "{1}", "passed {1}"},
    // baddbmm: softmax(u u^T) @ y + b, a weighted sum of mean-zero rows plus a centered bias
    {"baddbmm", "  %ut : Tensor = aten::transpose(%u, %one, %two)\n  %s : Tensor = aten::matmul(%u, %ut)\n"
                "  %pr : Tensor = aten::softmax(%s, %m1, %none)\n  %h : Tensor = aten::baddbmm(%b, %pr, %y, %one, %one)\n",
     "h", "mean-zero {2}", 2, "{2}", "passed {2}"},
    {"baddbmm", "  %ut : Tensor = aten::transpose(%u, %one, %two)\n  %s : Tensor = aten::matmul(%u, %ut)\n"
                "  %pr : Tensor = aten::softmax(%s, %m1, %none)\n  %h : Tensor = aten::baddbmm(%b, %pr, %y, %one, %one)\n",
     "h", "mean-zero {2}", 0, "{0}", "passed {0,1,2}"},
    // ---- absorber ----
    {"layer-norm", "  %s : int[] = prim::Constant[value=[8]]()\n"
                   "  %h : Tensor = aten::layer_norm(%y, %s, %ln_w, %ln_b, %eps, %f)\n", "h", "broken", 0, "{2}", "absorbed"},
    {"softmax", "  %h : Tensor = aten::softmax(%y, %m1, %none)\n", "h", "broken", 0, "{2}", "absorbed"},
    // export IR's LayerNorm: absorbs unless its mean output is used
    {"native-layer-norm", "  %s : int[] = prim::Constant[value=[8]]()\n"
                          "  %h : Tensor, %hm : Tensor, %hr : Tensor = aten::native_layer_norm(%y, %s, %ln_w, %ln_b, %eps)\n",
     "h", "broken", 0, "{2}", "absorbed"},
    {"native-layer-norm", "  %s : int[] = prim::Constant[value=[8]]()\n"
                          "  %h0 : Tensor, %hm : Tensor, %hr : Tensor = aten::native_layer_norm(%y, %s, %ln_w, %ln_b, %eps)\n"
                          "  %h : Tensor = aten::add(%h0, %hm, %one)\n", "op:aten::native_layer_norm", "broken", 0, "{2}", "unsafe"},
    {"group-norm", kConv + "  %h : Tensor = aten::group_norm(%cv, %one, %none, %none, %eps, %f)\n", "h", "broken", 0, "{1,2,3}", "absorbed"},
    {"group-norm", kConv + "  %h : Tensor = aten::group_norm(%cv, %two, %none, %none, %eps, %f)\n", "h", "broken", 0, "{1}", "unsafe"},
    // ---- shape-only ----
    {"shape-only", "  %h : Tensor = aten::zeros_like(%y, %none, %none, %none, %none, %none)\n", "h", "broken", 0, "{2}", "ignored"},
    // ---- breaker ----
    {"nonlinearity", "  %h : Tensor = aten::relu(%y)\n", "h", "broken", 0, "{2}", "unsafe"},
    {"nonlinearity", "  %yc : Tensor = aten::clone(%y, %none)\n  %h : Tensor = aten::silu_(%yc)\n", "h", "broken", 0, "{2}", "unsafe"},
    {"vector-norm", "  %o : float = prim::Constant[value=2.]()\n"
                    "  %h : Tensor = aten::linalg_vector_norm(%y, %o, %last, %t, %none)\n", "h", "broken", 0, "{2}", "unsafe"},
    {"comparison", "  %c0 : float = prim::Constant[value=0.]()\n  %h : Tensor = aten::ge(%y, %c0)\n", "h", "broken", 0, "{2}", "unsafe"},
    {"in-place-write", "  %yc : Tensor = aten::clone(%y, %none)\n  %h : Tensor = aten::zero_(%yc)\n", "h", "broken", 0, "{2}", "unsafe"},
    {"normalization", "  %s : int[] = prim::Constant[value=[8]]()\n  %h : Tensor = aten::rms_norm(%y, %s, %ln_w, %none)\n",
     "h", "broken", 0, "{2}", "unsafe"},
    {"creation", "  %s : int[] = prim::Constant[value=[3, 8]]()\n  %h0 : Tensor = aten::zeros(%s, %none, %none, %none, %none)\n"
                 "  %h : Tensor = aten::add(%y, %h0, %one)\n", "op:aten::zeros", "broken", 0, "{1}", "unsafe"},
    {"model-input", "  %h : Tensor = aten::add(%y, %u, %one)\n", "u", "broken", 0, "{2}", "ignored"},
    {"model-output", "", "return", "none", 0, "{2}", "unsafe"},
    {"unknown-op", "  %h : Tensor = aten::logcumsumexp(%y, %m1)\n", "h", "broken", 0, "{2}", "unsafe"},
    // ---- interpolation (issue 13: DINOv2's interpolated position table): per channel, weights
    // summing to one: the channel mean stays zero and a shift stays constant on every axis ----
    {"interpolate", kConv + "  %sz : int[] = prim::Constant[value=[7, 7]]()\n"
                    "  %h : Tensor = aten::upsample_bicubic2d(%cv, %sz, %f, %none, %none)\n", "h", "mean-zero {1}", 0, "{1,2,3}", "passed {1,2,3}"},
    {"interpolate", kConv + "  %sz : int[] = prim::Constant[value=[8, 8]]()\n"
                    "  %h : Tensor = aten::upsample_nearest2d(%cv, %sz, %none, %none)\n", "h", "mean-zero {1}", 0, "{1}", "passed {1}"},
    {"interpolate", kConv + "  %sz : int[] = prim::Constant[value=[6, 6]]()\n"
                    "  %h : Tensor = aten::_upsample_bilinear2d_aa(%cv, %sz, %f, %none, %none)\n", "h", "mean-zero {1}", 0, "{2,3}", "passed {2,3}"},
    // interpolating along the mean-zero axis itself breaks
    {"interpolate", "  %sz : int[] = prim::Constant[value=[5]]()\n  %h : Tensor = aten::upsample_linear1d(%y, %sz, %f, %none)\n",
     "h", "broken", 0, "{2}", "passed {2}"},
    // ---- bundles built in the graph (issue 13: XCiT's (x, (Hp, Wp)), Swin's (x, width, height)):
    // an element taken out is the element at that index ----
    {"list", "  %tp : (Tensor, Tensor) = prim::TupleConstruct(%u, %y)\n  %a : Tensor, %h : Tensor = prim::TupleUnpack(%tp)\n",
     "h", "mean-zero {2}", 0, "{2}", "passed {2}"},
    {"list", "  %tp : (Tensor, Tensor) = prim::TupleConstruct(%u, %y)\n  %h : Tensor, %a : Tensor = prim::TupleUnpack(%tp)\n",
     "h", "broken", 0, "{2}", "passed {2}"},
    {"list", "  %tp : (Tensor, Tensor) = prim::TupleConstruct(%u, %y)\n  %h : Tensor = prim::TupleIndex(%tp, %one)\n",
     "h", "mean-zero {2}", 0, "{2}", "passed {2}"},
    {"list", "  %l : Tensor[] = prim::ListConstruct(%u, %y)\n  %h : Tensor = aten::__getitem__(%l, %m1)\n",
     "h", "mean-zero {2}", 0, "{2}", "passed {2}"},
  };
  return table;
}
// clang-format on

}  // namespace

TEST_CASE("the rule table: each rule's fact and shift outcome on a tagged IR snippet", "[analysis][rules][table]") {
  auto row = GENERATE(from_range(rows()));
  INFO(row.rule << "\n" << row.body);
  auto a = analyzeIr(rowModel(row.body, row.body.find("%h :") != std::string::npos ? "h" : "y"));
  const auto& g = a.model.graph;
  auto tagged = findTagged(a, row.tag);
  REQUIRE(tagged.node != kNone);
  const auto& rule = ruleFor(g, tagged.node);
  CHECK(rule.name == row.rule);

  if (tagged.value != kNone) {
    const auto& fact = a.result.facts.at(tagged.value);
    INFO(fact);
    CHECK(describe(fact) == row.fact);
    if (fact.isMeanZero()) {
      // The claim in float64: with the fact's leaves centered the value's mean along the axes
      // vanishes, and the value itself does not (nor is the check empty).
      auto value = test::value64(a, tagged.value, fact.leaves);
      CHECK(test::relativeMean(value, fact.axes) < 1e-12);
      if (fact.factor) CHECK(factoredRelativeMean(value, fact.axes, *fact.factor) < 1e-12);
      CHECK(value.abs().max().item<double>() > 1e-3);
    }
  } else {
    CHECK(row.fact == "none");
  }
  auto outcome = rule.shift(
      ShiftInput{g, tagged.node, std::size_t(row.shiftSlot), parseAxes(row.shiftAxes), parseFactor(row.shiftAxes)});
  CHECK(describe(outcome) == row.shift);
}

TEST_CASE("the rule table has a row for every registry rule and for the fallback", "[analysis][rules][table]") {
  std::set<std::string> covered;
  for (const auto& r : rows()) covered.insert(r.rule);
  for (const auto& rule : ruleRegistry()) {
    INFO(rule.name);
    CHECK(covered.count(rule.name) == 1);
  }
  CHECK(covered.count(fallbackRule().name) == 1);
}
