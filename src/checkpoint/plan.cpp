// The pattern plan: parsing and its check against a checkpoint (include/foldnorm/checkpoint/plan.h).
#include "foldnorm/checkpoint/plan.h"

#include <algorithm>
#include <fstream>
#include <map>
#include <set>

#include "foldnorm/common/error.h"

namespace foldnorm::checkpoint {

std::string instantiate(const std::string& pattern, int layer) {
  std::string out = pattern;
  for (auto pos = out.find("{i}"); pos != std::string::npos; pos = out.find("{i}", pos))
    out.replace(pos, 3, std::to_string(layer));
  return out;
}

namespace {

bool perLayer(const std::string& pattern) { return pattern.find("{i}") != std::string::npos; }

std::string joinNames(const std::vector<std::string>& names) {
  std::string out;
  for (std::size_t i = 0; i < names.size() && i < 4; ++i) out += (i ? ", " : "") + names[i];
  if (names.size() > 4) out += " and " + std::to_string(names.size() - 4) + " more";
  return out;
}

}  // namespace

CheckpointPlan parsePlan(const nlohmann::json& j, const std::string& where) {
  CheckpointPlan p;
  p.raw = j;
  if (!j.is_object() || j.value("schema", std::string()) != kPlanSchema)
    throw Error(where + " is not a foldnorm checkpoint plan (schema " + kPlanSchema + ")");
  // What a checkpoint cannot take tensor by tensor: named, so the user knows which LNs they cost.
  std::vector<std::string> refused;
  for (const auto& s : j.value("scale_absorptions", nlohmann::json::array()))
    refused.push_back("scale absorption " + s.value("description", s.dump()));
  for (const auto& s : j.value("inserted_centerings", nlohmann::json::array()))
    refused.push_back("inserted centering " + s.value("description", s.dump()));
  try {
    p.architecture = j.value("architecture", std::string());
    if (j.contains("layers") && j["layers"].is_object()) {
      p.layerPrefix = j["layers"].value("prefix", std::string());
      p.layerCountKey = j["layers"].value("count_key", std::string());
    }
    p.baseModelPrefix = j.value("base_model_prefix", std::string());
    for (const auto& c : j.at("center")) {
      CenterPattern cp;
      cp.pattern = c.at("pattern").get<std::string>();
      cp.rank = c.at("rank").get<int>();
      cp.optional = c.value("optional", false);
      for (const auto& a : c.at("center")) {
        if (a.contains("scale") && !a["scale"].is_null())
          refused.push_back("scaled centering of " + cp.pattern + " by " + a["scale"].dump());
        cp.center.emplace_back(a.at("axis").get<int>(), a.value("groups", 1));
      }
      if (cp.center.empty()) throw Error("");
      for (auto [axis, groups] : cp.center)
        if (axis < 0 || axis >= cp.rank || groups < 1)
          throw Error(where + ": " + cp.pattern + " is centered along axis " + std::to_string(axis) + " in " +
                      std::to_string(groups) + " group(s), which its rank " + std::to_string(cp.rank) + " does not have");
      if (perLayer(cp.pattern) && p.layerPrefix.empty())
        throw Error(where + ": " + cp.pattern + " is per layer but the plan names no layer prefix");
      p.center.push_back(std::move(cp));
    }
    for (const auto& u : j.value("untie", nlohmann::json::array()))
      p.untie.push_back({u.at("name").get<std::string>(), u.at("copy_of").get<std::string>()});
    for (const auto& n : j.value("rms_norms", nlohmann::json::array()))
      p.rmsNorms.push_back({n.at("module").get<std::string>(), n.value("has_weight", true), n.value("has_bias", true)});
  } catch (const Error& e) {
    if (std::string(e.what()).empty()) throw Error(where + ": a center entry has no (axis, groups)");
    throw;
  } catch (const nlohmann::json::exception& e) {
    throw Error(where + ": malformed plan (" + std::string(e.what()) + ")");
  }
  if (!refused.empty())
    throw Error("the plan has steps a checkpoint cannot take tensor by tensor (they need another tensor's values "
                "or a change to the model's code): " + joinNames(refused));
  return p;
}

CheckpointPlan readPlan(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw Error("cannot read the plan " + path);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw Error(path + " is not JSON (" + std::string(e.what()) + ")");
  }
  return parsePlan(j, path);
}

ResolvedPlan resolvePlan(const CheckpointPlan& plan, const CheckpointIndex& index, const nlohmann::json& config) {
  ResolvedPlan r;
  const auto& t = index.tensors;
  // Naming: a checkpoint saved from the base model (BLOOM's "h.0...", OPT's "decoder.layers...")
  // lacks the task model's prefix; patterns under the prefix then match without it.
  const std::string pre = plan.baseModelPrefix.empty() ? "" : plan.baseModelPrefix + ".";
  if (!pre.empty()) {
    bool any = std::any_of(t.begin(), t.end(), [&](const auto& kv) { return kv.first.rfind(pre, 0) == 0; });
    bool planUses = std::any_of(plan.center.begin(), plan.center.end(),
                                [&](const auto& c) { return c.pattern.rfind(pre, 0) == 0; });
    r.stripPrefix = planUses && !any;
  }
  auto local = [&](const std::string& name) {
    return r.stripPrefix && name.rfind(pre, 0) == 0 ? name.substr(pre.size()) : name;
  };
  // Layers: the indices present under the prefix, which must be 0..L-1.
  if (!plan.layerPrefix.empty()) {
    const std::string lp = local(plan.layerPrefix) + ".";
    std::set<int> present;
    for (const auto& [name, _] : t) {
      if (name.rfind(lp, 0) != 0) continue;
      const auto rest = name.substr(lp.size());
      const auto dot = rest.find('.');
      const auto digits = rest.substr(0, dot);
      if (digits.empty() || !std::all_of(digits.begin(), digits.end(), ::isdigit) || digits.size() > 6)
        throw Error("tensor " + name + " is under the layer list " + lp + "* but has no layer index");
      present.insert(std::stoi(digits));
    }
    if (present.empty()) throw Error("the checkpoint has no tensor under the plan's layer list " + lp + "{i}");
    r.layers = *present.rbegin() + 1;
    for (int i = 0; i < r.layers; ++i)
      if (!present.count(i)) throw Error("the checkpoint has no tensor of layer " + lp + std::to_string(i) +
                                         " (layers 0.." + std::to_string(r.layers - 1) + " are expected)");
    if (!plan.layerCountKey.empty() && config.contains(plan.layerCountKey) && config[plan.layerCountKey].is_number_integer() &&
        config[plan.layerCountKey].get<int>() != r.layers)
      throw Error("config.json says " + plan.layerCountKey + " = " + std::to_string(config[plan.layerCountKey].get<int>()) +
                  " but the checkpoint has layers " + lp + "0.." + std::to_string(r.layers - 1));
  }
  auto names = [&](const std::string& pattern) {
    std::vector<std::string> out;
    if (!perLayer(pattern)) out.push_back(pattern);
    else
      for (int i = 0; i < r.layers; ++i) out.push_back(instantiate(pattern, i));
    return out;
  };
  std::set<std::string> centered;
  for (const auto& c : plan.center)
    for (const auto& full : names(c.pattern)) {
      const auto name = local(full);
      auto it = t.find(name);
      if (it == t.end() && c.optional) continue;
      if (it == t.end()) throw Error("the plan centers " + name + " (pattern " + c.pattern + "), which the checkpoint does not have");
      const auto& e = it->second;
      if (static_cast<int>(e.shape.size()) != c.rank)
        throw Error("tensor " + name + " has rank " + std::to_string(e.shape.size()) + " in the checkpoint but the small capture's " +
                    c.pattern + " has rank " + std::to_string(c.rank));
      if (!isFloatDtype(e.dtype)) throw Error("tensor " + name + " is " + e.dtype + ": only BF16, F16, F32 and F64 tensors can be centered");
      for (auto [axis, groups] : c.center)
        if (e.shape[axis] % groups != 0)
          throw Error("tensor " + name + " has " + std::to_string(e.shape[axis]) + " entries along axis " + std::to_string(axis) +
                      ", which its " + std::to_string(groups) + " centering groups do not divide");
      if (!centered.insert(name).second) throw Error("the plan centers " + name + " twice");
      r.center.push_back({name, c.center});
      r.centerBytes += e.end - e.begin;
    }
  for (const auto& u : plan.untie) {
    const auto name = local(u.name), source = local(u.copyOf);
    if (!t.count(source)) throw Error("the plan unties " + name + " from " + source + ", which the checkpoint does not have");
    if (!centered.count(source)) throw Error("the plan unties " + name + " from " + source + ", which it does not center");
    if (t.count(name)) continue;  // saved untied already: it is copied as it is (the original)
    r.untie.emplace_back(name, source);
    r.untieBytes += t.at(source).end - t.at(source).begin;
  }
  for (const auto& n : plan.rmsNorms)
    for (const auto& module : names(n.module)) {
      const auto base = local(module);
      const char* part = n.hasWeight ? ".weight" : n.hasBias ? ".bias" : nullptr;
      if (part && !t.count(base + part))
        throw Error("the plan makes LayerNorm " + module + " an RMSNorm, but the checkpoint has no " + base + part);
      r.rmsNorms.push_back(module);
    }
  return r;
}

}  // namespace foldnorm::checkpoint
