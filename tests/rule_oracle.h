// The float64 oracle of the rule tests: run an IR model in float64 with some parameters
// centered and read one intermediate value, so a rule's claim "this value is mean-zero along
// these axes once these leaves are centered" is checked by arithmetic, not only by the analysis.
#pragma once

#include <torch/csrc/jit/api/function_impl.h>
#include <torch/torch.h>

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "foldnorm/torch/torch_model.h"
#include "helpers.h"

namespace foldnorm::test {

/// `t` (in float64) with its mean along each action's axis removed within each group: what
/// the fold does to a parameter, without the cast back. A scaled action (docs/method.md section 7)
/// subtracts mean_k(s_k x[k]) / s_c instead, s = scaleOf(action.scale).
inline at::Tensor centered64(at::Tensor t, const std::vector<CenterAction>& actions,
                             const std::function<at::Tensor(ParamId)>& scaleOf = {}) {
  auto x = t.detach().to(at::kDouble);
  for (const auto& a : actions) {
    auto n = x.size(a.axis);
    if (a.scale != kNone) {
      auto s = scaleOf(a.scale).detach().to(at::kDouble).reshape({-1});
      auto moved = x.movedim(a.axis, -1);
      x = (moved - (moved * s).mean(-1, /*keepdim=*/true) / s).movedim(-1, a.axis);
      continue;
    }
    auto moved = x.movedim(a.axis, -1).contiguous();
    auto grouped = moved.reshape({-1, a.groups, n / a.groups});
    grouped = grouped - grouped.mean(-1, /*keepdim=*/true);
    x = grouped.reshape(moved.sizes()).movedim(-1, a.axis);
  }
  return x;
}

/// Every action of the leaves `leafIds`, grouped by parameter.
inline std::map<ParamId, std::vector<CenterAction>> actionsOf(const AnalysisResult& r,
                                                              const std::vector<LeafId>& leafIds) {
  std::map<ParamId, std::vector<CenterAction>> out;
  for (auto l : leafIds)
    for (const auto& a : r.leaves.at(l).actions) {
      auto& list = out[a.param];
      if (std::find(list.begin(), list.end(), a) == list.end()) list.push_back(a);
    }
  return out;
}

/// The value `target` of the analysed IR model, computed in float64 on the example inputs with
/// the parameters of `leafIds` centered (a fresh copy of the model: `a` is not changed).
inline at::Tensor value64(const Analyzed& a, ValueId target, const std::vector<LeafId>& leafIds) {
  namespace jit = torch::jit;
  at::NoGradGuard noGrad;
  const auto& tm = *a.model.torch;
  auto copy = tm.graph->copy();
  std::vector<jit::Value*> values(copy->inputs().begin(), copy->inputs().end());  // ValueId order
  for (auto* n : copy->nodes())
    for (auto* v : n->outputs()) values.push_back(v);
  if (values.size() != tm.values.size()) throw std::logic_error("oracle: graph copy does not match");
  while (!copy->outputs().empty()) copy->eraseOutput(0);
  copy->registerOutput(values.at(target));

  jit::Module m = tm.makeCopy();
  copy->inputs().at(0)->setType(m.type());  // the copy's own class (an IR model's type is per build)
  auto actions = actionsOf(a.result, leafIds);
  auto ownerOf = [&](std::string name) {
    jit::Module owner = m;
    for (auto dot = name.find('.'); dot != std::string::npos; dot = name.find('.')) {
      owner = owner.attr(name.substr(0, dot)).toModule();
      name = name.substr(dot + 1);
    }
    return std::make_pair(owner, name);
  };
  // Scales are read, never centered: their values are the same before and after the loop.
  auto scaleOf = [&](ParamId p) {
    auto [owner, name] = ownerOf(a.model.graph.parameter(p).path);
    return owner.attr(name).toTensor();
  };
  for (const auto& p : a.model.graph.parameters()) {
    if (p.isConstant) continue;
    auto [owner, name] = ownerOf(p.path);
    auto t = owner.attr(name).toTensor();
    auto it = actions.find(p.id);
    owner.setattr(name, it == actions.end() ? t.to(at::kDouble) : centered64(t, it->second, scaleOf));
  }
  std::vector<c10::IValue> stack{m._ivalue()};
  for (const auto& in : tm.exampleInputs) stack.emplace_back(in.is_floating_point() ? in.to(at::kDouble) : in);
  jit::GraphFunction fn("oracle", copy, nullptr);
  return fn(stack).toTensor();
}

/// max |mean of `t` along `axes`| relative to max |t|: ~1e-16 when `t` is mean-zero along them.
inline double relativeMean(const at::Tensor& t, const AxisSet& axes) {
  std::vector<int64_t> dims = axes.axes();
  auto scale = t.abs().max().item<double>();
  if (scale == 0) return 0;
  return t.mean(dims, /*keepdim=*/true).abs().max().item<double>() / scale;
}

}  // namespace foldnorm::test
