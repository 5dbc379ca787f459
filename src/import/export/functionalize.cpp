// Functionalization of the program's in-place writes (see import/export.h): our Graph is a
// dataflow graph, so a write into a tensor is a new value, and a write through a view is a new
// value of the view's base, as torch's functionalization writes it (FunctionalInverses.cpp:
// slice -> slice_scatter, select -> select_scatter, diagonal -> diagonal_scatter, as_strided ->
// as_strided_scatter, a reshape or a permutation -> its inverse, alias-like views -> the value
// itself). Each tensor value belongs to a storage as a chain of views from the storage's root;
// a write bumps the storage's version, and a later read of a value of an older version (the
// base, another view of it) reads its chain replayed on the newest root value.
#include <ATen/TensorUtils.h>

#include <numeric>

#include "export_steps.h"
#include "foldnorm/common/error.h"
#include "foldnorm/import/export.h"
#include "program.h"

namespace foldnorm::export_detail {
namespace {

using nlohmann::json;

bool isOneOf(const std::string& kind, std::initializer_list<const char*> kinds) {
  for (const char* k : kinds)
    if (kind == k) return true;
  return false;
}

/// Views whose inverse is a reshape back to the base's sizes (they keep every element).
bool isReshape(const std::string& kind) {
  return isOneOf(kind, {"aten::view", "aten::_unsafe_view", "aten::_reshape_alias", "aten::reshape", "aten::flatten",
                        "aten::unflatten", "aten::unsqueeze", "aten::squeeze", "aten::view_as", "aten::reshape_as"});
}

/// Views that are their input (same sizes, strides and values).
bool isIdentity(const std::string& kind) {
  return isOneOf(kind, {"aten::alias", "aten::detach", "aten::contiguous", "aten::to", "aten::lift_fresh",
                        "aten::type_as"});
}

/// Composite ops whose result is a view of their input only sometimes (torch decides by the
/// input's layout and dtype): contiguous, to, reshape and flatten return a copy otherwise.
bool mayCopy(const std::string& kind) {
  return isOneOf(kind, {"aten::contiguous", "aten::to", "aten::type_as", "aten::reshape", "aten::flatten",
                        "aten::reshape_as"});
}

/// Why a write through a view made by `kind` cannot be written back into its base; "" when it can.
std::string noInverseFor(const std::string& kind) {
  if (isOneOf(kind, {"aten::slice", "aten::select", "aten::narrow", "aten::diagonal", "aten::as_strided",
                     "aten::permute", "aten::transpose", "aten::swapaxes", "aten::swapdims", "aten::t"}) ||
      isReshape(kind) || isIdentity(kind))
    return {};
  if (isOneOf(kind, {"aten::expand", "aten::expand_as", "aten::broadcast_to"}))
    return "a view made by " + kind + ", whose elements share memory";
  return "a view made by " + kind + ", which foldnorm does not write back into its base";
}

const json* metaOf(const json& graph, const std::string& name) {
  if (!graph.contains("tensor_values") || !graph["tensor_values"].contains(name)) return nullptr;
  return &graph["tensor_values"][name];
}

bool contiguousLayout(const TensorShape& s) {
  int64_t step = 1;
  for (std::size_t d = s.sizes.size(); d-- > 0;) {
    if (s.sizes[d] != 1 && s.strides[d] != step) return false;
    step *= s.sizes[d];
  }
  return true;
}

}  // namespace

NodeId ProgramImporter::syntheticNode(const std::string& kind, NodeId standsFor) {
  auto id = addNode(kind, {}, {}, nullptr);
  model_.standsFor[id] = standsFor;
  if (standsFor != kNone) g_.node(id).sourceLocation = g_.node(standsFor).sourceLocation;
  return id;
}

ProgramImporter::Alias& ProgramImporter::aliasOf(ValueId v) {
  auto it = alias_.find(v);
  if (it != alias_.end()) return it->second;
  storages_.push_back({v, 0, g_.value(v).name, kNone, {}});
  return alias_[v] = Alias{storages_.size() - 1, {}, 0, kNone};
}

ValueId ProgramImporter::replay(const ViewStep& step, ValueId base, const std::string& name, NodeId standsFor) {
  const auto inputs = g_.node(step.node).inputs;  // copies: adding nodes moves the node table
  const auto info = g_.value(g_.node(step.node).outputs.at(0)).tensor;
  auto id = syntheticNode(step.kind, standsFor);
  g_.addInput(id, base);
  for (std::size_t i = 1; i < inputs.size(); ++i) g_.addInput(id, inputs[i]);
  auto out = g_.addOutput(id, name, ValueKind::Tensor, "Tensor");
  g_.value(out).tensor = info;
  return out;
}

ValueId ProgramImporter::current(ValueId v, const std::string& name, const std::string& where) {
  auto it = alias_.find(v);
  if (it == alias_.end()) return v;
  const Alias a = it->second;
  const Storage s = storages_[a.storage];
  if (a.version == s.version) return v;
  if (!s.poisoned.empty())
    throw Error("unsupported program: " + where + " reads '" + name + "' after " + s.poisoned +
                "; foldnorm cannot say what its storage holds then");
  const std::string writer = model_.nodeName[s.lastWrite];  // a copy: replaying adds nodes
  ValueId b = s.current;
  for (std::size_t i = 0; i < a.chain.size(); ++i) {
    if (!a.chain[i].replayable)
      throw Error("unsupported program: " + where + " reads '" + name + "' after node '" + writer +
                  "' wrote into its storage, and '" + name + "' is an element of " + a.chain[i].kind +
                  "'s results, which foldnorm does not replay on the new value");
    const auto prev = b;
    b = replay(a.chain[i], b, name + "@" + writer, s.lastWrite);
    alias_[b] = Alias{a.storage, std::vector<ViewStep>(a.chain.begin(), a.chain.begin() + i + 1), s.version, prev};
  }
  return b;
}

void ProgramImporter::viewCreated(NodeId id, ValueId view, ValueId base, const json& n, const json& graph,
                                  const std::string& baseArgName, const std::string& where) {
  const auto kind = g_.node(id).kind;
  ViewStep step{id, kind, true, noInverseFor(kind)};
  std::string baseName;
  for (const auto& in : n.at("inputs"))
    if (in.value("name", std::string{}) == baseArgName && in.at("arg").contains("as_tensor"))
      baseName = in["arg"]["as_tensor"].value("name", std::string{});
  const json* inMeta = metaOf(graph, baseName);
  const json* outMeta = metaOf(graph, g_.value(view).name);
  if (mayCopy(kind)) {
    if (!inMeta || !outMeta) {
      // Unknown whether it copied: neither written back through nor replayed.
      step.replayable = false;
      step.noInverse = "a result of " + kind + " whose layout the program does not record (a view or a copy)";
    } else {
      const auto in = tensorShape(*inMeta, where), out = tensorShape(*outMeta, where);
      bool aliases;
      if (isReshape(kind)) {
        aliases = at::detail::computeStride(in.sizes, in.strides, out.sizes).has_value();
      } else {
        // contiguous / to return their input exactly when nothing changes (and to is not asked to copy).
        aliases = in.sizes == out.sizes && in.strides == out.strides && in.offset == out.offset && in.dtype == out.dtype;
        if (kind == "aten::to")
          for (const auto& arg : n.at("inputs"))
            if (arg.value("name", std::string{}) == "copy") aliases = aliases && !arg["arg"].value("as_bool", false);
      }
      if (!aliases) return;  // a copy: a storage of its own
    }
  }
  auto& a = aliasOf(base);
  if (kind == "aten::as_strided" && step.noInverse.empty()) {
    // as_strided's sizes and strides address the storage, not the base: written back only as the
    // storage itself (the root, laid out contiguously from offset 0).
    bool root = a.chain.empty() && inMeta;
    if (root) {
      const auto in = tensorShape(*inMeta, where);
      root = in.offset == 0 && contiguousLayout(in);
    }
    if (!root) step.noInverse = "an as_strided view of a tensor that is not its storage laid out from offset 0";
  }
  Alias made{a.storage, a.chain, a.version, base};
  made.chain.push_back(step);
  alias_[view] = std::move(made);
}

std::optional<ValueId> ProgramImporter::writeBack(const ViewStep& step, ValueId base, ValueId src, NodeId write,
                                                  std::string& why) {
  if (!step.noInverse.empty()) {
    why = step.noInverse;
    return std::nullopt;
  }
  const auto& kind = step.kind;
  if (isIdentity(kind)) return src;
  const auto viewInputs = g_.node(step.node).inputs;
  const auto baseInfo = g_.value(base).tensor;
  const auto name = g_.value(base).name + "@" + model_.nodeName[write];
  std::string scatter;
  std::vector<ValueId> inputs;
  if (kind == "aten::slice" || kind == "aten::select" || kind == "aten::diagonal" || kind == "aten::as_strided") {
    scatter = kind + "_scatter";
    inputs = {base, src};
    inputs.insert(inputs.end(), viewInputs.begin() + 1, viewInputs.end());
  } else if (kind == "aten::narrow") {
    auto start = g_.constantInt(viewInputs.at(2)), length = g_.constantInt(viewInputs.at(3));
    if (!start || !length) {
      why = "a narrow whose start or length is not a constant";
      return std::nullopt;
    }
    scatter = "aten::slice_scatter";
    inputs = {base, src, viewInputs.at(1), viewInputs.at(2),
              constant(ConstantValue{*start + *length}, ValueKind::Int, "int"), constant(ConstantValue{int64_t{1}}, ValueKind::Int, "int")};
  } else if (isReshape(kind)) {
    if (!baseInfo) {
      why = "a reshape of a tensor whose shape the program does not record";
      return std::nullopt;
    }
    scatter = "aten::reshape";
    inputs = {src, constant(ConstantValue{baseInfo->shape}, ValueKind::IntList, "int[]")};
  } else if (kind == "aten::permute") {
    auto dims = g_.constantIntList(viewInputs.at(1));
    if (!dims) {
      why = "a permute whose dims are not constants";
      return std::nullopt;
    }
    const auto rank = static_cast<int64_t>(dims->size());
    std::vector<int64_t> inverse(dims->size());
    for (int64_t i = 0; i < rank; ++i) inverse.at(static_cast<std::size_t>(((*dims)[i] % rank + rank) % rank)) = i;
    scatter = "aten::permute";
    inputs = {src, constant(ConstantValue{inverse}, ValueKind::IntList, "int[]")};
  } else {  // transpose, swapaxes, swapdims, t: their own inverse
    scatter = kind;
    inputs = {src};
    inputs.insert(inputs.end(), viewInputs.begin() + 1, viewInputs.end());
  }
  auto id = syntheticNode(scatter, write);
  for (auto v : inputs) g_.addInput(id, v);
  auto out = g_.addOutput(id, name, ValueKind::Tensor, "Tensor");
  g_.value(out).tensor = baseInfo;
  return out;
}

void ProgramImporter::inPlaceWrite(NodeId id, ValueId self, ValueId result, bool metadataOnly, const std::string& where) {
  const Alias a = aliasOf(self);
  // The program keeps reading the mutated tensor by its old names: those reads see the result.
  for (auto& entry : scope_)
    if (entry.second == self) entry.second = result;
  if (metadataOnly) {  // unsqueeze_, transpose_, ...: a new view of the same storage, nothing written
    const auto kind = g_.node(id).kind;
    Alias made = a;
    made.chain.push_back(ViewStep{id, kind, true, noInverseFor(kind)});
    made.parent = self;
    alias_[result] = std::move(made);
    return;
  }
  const auto k = a.chain.size();
  const auto storage = a.storage;
  const auto version = storages_[storage].version;
  std::string why = storages_[storage].poisoned;
  // The bases along the chain at this version: the parents the view was made from, or the
  // chain replayed on the root's value when one of them is of an older version.
  std::vector<ValueId> bases(k, kNone);
  bool fromParents = true;
  for (ValueId p = a.parent, i = k; i-- > 0; p = fromParents ? alias_.at(p).parent : kNone) {
    fromParents = fromParents && p != kNone && alias_.count(p) && alias_.at(p).version == version &&
                  alias_.at(p).chain.size() == i;
    bases[i] = p;
  }
  for (std::size_t i = 0; !fromParents && why.empty() && i < k; ++i) {
    if (i > 0 && !a.chain[i - 1].replayable) why = "an element of " + a.chain[i - 1].kind + "'s results";
    else bases[i] = i == 0 ? storages_[storage].current
                           : replay(a.chain[i - 1], bases[i - 1], storages_[storage].name + "@view", id);
  }
  ValueId value = result;
  for (std::size_t i = k; why.empty() && i-- > 0;) {
    auto back = writeBack(a.chain[i], bases[i], value, id, why);
    if (back) value = *back;
  }
  auto& s = storages_[storage];
  ++s.version;
  s.lastWrite = id;
  if (!why.empty()) {
    if (s.poisoned.empty()) s.poisoned = where + " wrote into a view of it (" + why + ")";
  } else {
    s.current = value;
    alias_[value] = Alias{storage, {}, s.version, kNone};
    if (k > 0) {
      ExportModel::BaseAfterWrite after{id, s.name, {}};
      for (const auto& [name, v] : scope_)
        if (name != s.name && alias_.count(v) && alias_.at(v).storage == storage) after.aliases.push_back(name);
      model_.baseAfterWrite[value] = std::move(after);
    }
  }
  alias_[result] = Alias{storage, a.chain, s.version, kNone};  // its bases are replayed when needed
}

}  // namespace foldnorm::export_detail
