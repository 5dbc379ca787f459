// Editing a program JSON for the .pt2 fold: names, tensor metadata, renames, node locations and
// the final splice (see export_internal.h).
#include <ATen/core/dispatch/Dispatcher.h>

#include <algorithm>
#include <stdexcept>

#include "export_internal.h"
#include "foldnorm/common/error.h"
#include "foldnorm/import/export.h"
#include "foldnorm/interpreter/export_interpreter.h"

namespace foldnorm::export_fold {

const at::StorageImpl* storageOf(const at::Tensor& t) { return t.storage().unsafeGetStorageImpl(); }

at::Tensor flatStorage(const at::Tensor& t) {
  auto n = static_cast<int64_t>(t.storage().nbytes() / t.element_size());
  return at::empty({0}, t.options()).set_(t.storage(), 0, {n}, {1});
}

void Names::collect(const json& graph) {
  for (const char* table : {"tensor_values", "sym_int_values", "sym_bool_values", "sym_float_values"})
    if (graph.contains(table))
      for (const auto& [name, _] : graph.at(table).items()) used_.insert(name);
  for (const auto& node : graph.at("nodes")) {
    if (node.contains("name") && node.at("name").is_string()) used_.insert(node.at("name").get<std::string>());
    for (const auto& o : node.at("outputs"))
      if (o.contains("as_tensor")) used_.insert(o.at("as_tensor").at("name").get<std::string>());
    for (const auto& in : node.at("inputs"))
      if (in.at("arg").contains("as_graph")) collect(in.at("arg").at("as_graph").at("graph"));
  }
}

std::string Names::fresh(const std::string& base) {
  auto name = base;
  for (int i = 1; used_.count(name); ++i) name = base + "_" + std::to_string(i);
  used_.insert(name);
  return name;
}

std::string sanitized(const std::string& path) {
  std::string s;
  for (char c : path) s += (std::isalnum(static_cast<unsigned char>(c)) ? c : '_');
  return s;
}

json symInts(at::IntArrayRef v) {
  auto a = json::array();
  for (auto x : v) a.push_back({{"as_int", x}});
  return a;
}

json tensorMeta(const at::Tensor& t, bool requiresGrad, const json& device) {
  return {{"dtype", exportScalarTypeCode(t.scalar_type())}, {"sizes", symInts(t.sizes())},
          {"requires_grad", requiresGrad}, {"device", device},
          {"strides", symInts(t.strides())}, {"storage_offset", {{"as_int", t.storage_offset()}}},
          {"layout", 7}};
}

bool renameTensor(json& arg, const std::string& from, const std::string& to) {
  bool renamed = false;
  auto one = [&](json& t) {
    if (t.at("name") == from) {
      t["name"] = to;
      renamed = true;
    }
  };
  if (arg.contains("as_tensor")) one(arg["as_tensor"]);
  if (arg.contains("as_tensors"))
    for (auto& t : arg["as_tensors"]) one(t);
  if (arg.contains("as_optional_tensor") && arg["as_optional_tensor"].contains("as_tensor"))
    one(arg["as_optional_tensor"]["as_tensor"]);
  if (arg.contains("as_optional_tensors"))
    for (auto& t : arg["as_optional_tensors"])
      if (t.contains("as_tensor")) one(t["as_tensor"]);
  return renamed;
}

bool readsTensor(const json& arg, const std::string& name) {
  auto copy = arg;
  return renameTensor(copy, name, name + "\x01");
}

const json* namedInput(const json& node, const std::string& name) {
  for (const auto& in : node.at("inputs"))
    if (in.at("name") == name) return &in.at("arg");
  return nullptr;
}

json positional(const std::string& name, json arg) { return {{"name", name}, {"arg", std::move(arg)}, {"kind", 1}}; }

json tensorArg(const std::string& name) { return {{"as_tensor", {{"name", name}}}}; }

json newNode(const json& like, const std::string& target, json inputs, const std::vector<std::string>& outputs) {
  json meta = json::object();
  for (const char* key : {"stack_trace", "nn_module_stack"})
    if (like.at("metadata").contains(key)) meta[key] = like.at("metadata").at(key);
  auto outs = json::array();
  for (const auto& o : outputs) outs.push_back(tensorArg(o));
  return {{"target", target}, {"inputs", std::move(inputs)}, {"outputs", std::move(outs)},
          {"metadata", meta}, {"is_hop_single_tensor_return", nullptr}, {"name", outputs.at(0)}};
}

bool mutatesArgument(const json& node) {
  const auto target = node.at("target").get<std::string>();
  const std::string prefix = "torch.ops.";
  if (target.rfind(prefix, 0) != 0) return false;
  // torch.ops.<ns>.<name>.<overload>
  auto rest = target.substr(prefix.size());
  auto dot1 = rest.find('.'), dot2 = rest.rfind('.');
  if (dot1 == std::string::npos || dot2 == dot1) return false;
  const auto ns = rest.substr(0, dot1), name = rest.substr(dot1 + 1, dot2 - dot1 - 1), overload = rest.substr(dot2 + 1);
  if (ns == "higher_order") return true;  // what a subgraph does is not read here: assume the worst
  auto handle = c10::Dispatcher::singleton().findSchema(
      c10::OperatorName(ns + "::" + name, overload == "default" ? "" : overload));
  if (!handle) return true;
  for (const auto& a : handle->schema().arguments())
    if (a.alias_info() && a.alias_info()->isWrite()) return true;
  return false;
}

ProgramEdit::ProgramEdit(const ImportedModel& m, const json& p, const State& s)
    : model(m), program(p), state(s), names(p.at("graph_module").at("graph")) {}

bool ProgramEdit::hasLocation(NodeId id) const {
  const auto& locations = model.exported->nodeLocation;
  return id < locations.size() && !locations[id].empty();
}

const Location& ProgramEdit::location(NodeId id) const {
  const auto& standsFor = model.exported->standsFor;
  if (id < standsFor.size() && standsFor[id] != kNone)
    throw Error("the fold cannot edit " + model.graph.describeNode(id) + ": the importer made it to follow node '" +
                model.exported->nodeName[standsFor[id]] + "', which writes in place through a view, and the program "
                "has no node for it");
  if (!hasLocation(id))
    throw std::logic_error("fold: node " + model.graph.describeNode(id) + " is not a node of the program");
  return model.exported->nodeLocation[id];
}

json& ProgramEdit::graphHolding(const Location& loc) {
  json* g = &graph();
  for (std::size_t k = 0; k + 1 < loc.size(); ++k) {
    json* sub = nullptr;
    for (auto& in : g->at("nodes").at(loc[k]).at("inputs"))
      if (in.at("arg").contains("as_graph")) sub = &in["arg"]["as_graph"]["graph"];
    if (!sub) throw std::logic_error("fold: node location does not lead into a subgraph");
    g = sub;
  }
  return *g;
}

std::vector<json>* ProgramEdit::replacement(const Location& loc) {
  auto it = slots_.find(loc);
  return it != slots_.end() && it->second.self ? &*it->second.self : nullptr;
}

void ProgramEdit::insertAfter(const Location& loc, const std::vector<json>& nodes) {
  auto& after = slots_[loc].after;
  after.insert(after.end(), nodes.begin(), nodes.end());
}

void ProgramEdit::insertAtFront(const std::vector<json>& nodes) { front_.insert(front_.end(), nodes.begin(), nodes.end()); }

void ProgramEdit::splice() {
  // Deepest subgraphs first, so the locations of the graphs holding them stay valid; in each
  // graph from the last node back, so earlier indices stay valid.
  std::vector<Location> order;
  for (const auto& [loc, _] : slots_) order.push_back(loc);
  std::sort(order.begin(), order.end(),
            [](const auto& a, const auto& b) { return a.size() != b.size() ? a.size() > b.size() : a > b; });
  for (const auto& loc : order) {
    auto& nodes = graphHolding(loc).at("nodes");
    auto& slot = slots_.at(loc);
    std::vector<json> with = slot.self ? *slot.self : std::vector<json>{nodes.at(loc.back())};
    with.insert(with.end(), slot.after.begin(), slot.after.end());
    auto at = nodes.begin() + static_cast<std::ptrdiff_t>(loc.back());
    at = nodes.erase(at);
    for (auto n = with.rbegin(); n != with.rend(); ++n) at = nodes.insert(at, *n);
  }
  auto& top = graph().at("nodes");
  for (auto n = front_.rbegin(); n != front_.rend(); ++n) top.insert(top.begin(), *n);
  slots_.clear();
  front_.clear();
}

}  // namespace foldnorm::export_fold
