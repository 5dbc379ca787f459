// Retargeting copies of a traced module (see include/foldnorm/torch/model_surgery.h).
#include "foldnorm/torch/model_surgery.h"

#include <caffe2/serialize/read_adapter_interface.h>
#include <torch/csrc/jit/api/function_impl.h>
#include <torch/csrc/jit/serialization/import.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <functional>

#include <map>
#include <set>
#include <sstream>
#include <tuple>
#include <unordered_map>

#include <unistd.h>

namespace foldnorm {
namespace {

namespace jit = torch::jit;

at::ScalarType targetType(const at::Tensor& t, const RetargetOptions& to) {
  return t.is_floating_point() && to.dtype ? *to.dtype : t.scalar_type();
}

/// A storage view: tensors equal in all of it are one tensor under several names.
using ViewKey = std::tuple<const void*, int64_t, std::vector<int64_t>, std::vector<int64_t>>;

ViewKey viewKey(const at::Tensor& t) {
  const void* base = t.has_storage() ? static_cast<const void*>(t.storage().unsafeGetStorageImpl())
                                     : static_cast<const void*>(t.unsafeGetTensorImpl());
  return {base, t.has_storage() ? t.storage_offset() : 0, t.sizes().vec(), t.strides().vec()};
}

const void* storageOf(const at::Tensor& t) {
  return t.has_storage() ? static_cast<const void*>(t.storage().unsafeGetStorageImpl()) : nullptr;
}

/// `only`: the storages to convert (empty: all).
void retargetSlots(const jit::Module& m, const RetargetOptions& to, std::map<ViewKey, at::Tensor>& memo,
                   const std::set<const void*>& only) {
  auto object = m._ivalue();
  for (std::size_t i = 0; i < object->slots().size(); ++i) {
    const auto value = object->getSlot(i);
    if (value.isTensor()) {
      const auto t = value.toTensor();
      if (!t.defined()) continue;
      if (!only.empty() && !only.count(storageOf(t))) continue;
      auto key = viewKey(t);
      auto it = memo.find(key);
      if (it == memo.end()) {
        // A partial retarget (`only`) is for a clone that shares tensors with its original: a
        // tensor already in the target dtype is still copied, so writes never reach the original.
        auto converted = t.detach().to(to.moveTensors ? to.device : t.device(), targetType(t, to),
                                       /*non_blocking=*/false, /*copy=*/!only.empty());
        converted.set_requires_grad(t.requires_grad() && converted.is_floating_point());
        it = memo.emplace(std::move(key), converted).first;
      }
      object->setSlot(i, it->second);
    } else if (value.isObject() && value.toObject()->type()->is_module()) {
      retargetSlots(jit::Module(value.toObject()), to, memo, only);
    }
  }
}

/// Whether a dtype code baked into the trace is one the target replaces.
bool replacesDtypeCode(int64_t code, at::ScalarType target) {
  if (code == static_cast<int64_t>(target)) return false;
  if (code == static_cast<int64_t>(at::kFloat)) return true;
  return target == at::kDouble &&
         (code == static_cast<int64_t>(at::kHalf) || code == static_cast<int64_t>(at::kBFloat16));
}

/// Whether input `offset` of `user` is a dtype argument (named dtype, or of type ScalarType).
bool isDtypeArgument(const jit::Node* user, std::size_t offset) {
  const auto* schema = user->maybeSchema();
  if (!schema || offset >= schema->arguments().size()) return false;
  const auto& arg = schema->arguments()[offset];
  auto real = arg.real_type();
  if (auto opt = real->cast<c10::OptionalType>()) real = opt->getElementType();
  return arg.name() == "dtype" || real->kind() == c10::TypeKind::ScalarTypeType;
}

/// Whether input `offset` of `user` is a device argument (named device, or of type Device).
bool isDeviceArgument(const jit::Node* user, std::size_t offset) {
  const auto* schema = user->maybeSchema();
  if (!schema || offset >= schema->arguments().size()) return false;
  const auto& arg = schema->arguments()[offset];
  auto real = arg.real_type();
  if (auto opt = real->cast<c10::OptionalType>()) real = opt->getElementType();
  return real->kind() == c10::TypeKind::DeviceObjType;
}

}  // namespace

void retargetAttributes(const jit::Module& module, const RetargetOptions& to) {
  std::map<ViewKey, at::Tensor> memo;
  retargetSlots(module, to, memo, {});
}

namespace {

/// Throws if a tensor slot of `m` (recursively) lies in one of `storages`.
void checkNoneShared(const jit::Module& m, const std::set<const void*>& storages) {
  auto object = m._ivalue();
  for (std::size_t i = 0; i < object->slots().size(); ++i) {
    const auto value = object->getSlot(i);
    if (value.isTensor() && value.toTensor().defined() && storages.count(storageOf(value.toTensor())))
      throw std::logic_error("model surgery: a clone still shares a tensor it was to own (" +
                             object->type()->getAttributeName(i) + ")");
    if (value.isObject() && value.toObject()->type()->is_module()) checkNoneShared(jit::Module(value.toObject()), storages);
  }
}

}  // namespace

namespace {

/// Original module type -> the clone's, for every module of the two trees (same slots).
void pairTypes(const jit::Module& original, const jit::Module& clone,
               std::unordered_map<c10::TypePtr, c10::TypePtr>& remap) {
  remap.emplace(original.type(), clone.type());
  auto a = original._ivalue(), b = clone._ivalue();
  for (std::size_t i = 0; i < a->slots().size() && i < b->slots().size(); ++i) {
    const auto x = a->getSlot(i), y = b->getSlot(i);
    if (x.isObject() && x.toObject()->type()->is_module() && y.isObject())
      pairTypes(jit::Module(x.toObject()), jit::Module(y.toObject()), remap);
  }
}

/// Module::clone copies each type's methods as soon as its subtree is cloned, remapping the types
/// cloned so far: a method that names a type from a subtree cloned later keeps the original's.
/// Traces do that: transformers 4.41's Pegasus passes `decoder.embed_tokens` to the encoder's
/// forward as an argument, and the encoder is cloned first. The clone runs (the interpreter does
/// not check argument types), but its saved code passes the cloned module where the signature
/// names the original's type, and torch.jit.load refuses it (issue 31). This remaps every
/// method's graph and schema of the clone onto the clone's types, contained types included.
void remapClonedMethods(const jit::Module& original, const jit::Module& clone) {
  std::unordered_map<c10::TypePtr, c10::TypePtr> remap;
  pairTypes(original, clone, remap);
  std::function<c10::TypePtr(c10::TypePtr)> map = [&](c10::TypePtr t) -> c10::TypePtr {
    auto it = remap.find(t);
    if (it != remap.end()) return it->second;
    const auto contained = t->containedTypes();
    if (contained.empty()) return t;
    std::vector<c10::TypePtr> mapped;
    bool changed = false;
    for (const auto& c : contained) {
      mapped.push_back(map(c));
      changed = changed || mapped.back() != c;
    }
    return changed ? t->withContained(std::move(mapped)) : t;
  };
  std::set<const c10::ClassType*> seen;
  for (const auto& m : clone.modules()) {
    if (!seen.insert(m.type().get()).second) continue;
    for (auto* fn : m.type()->methods()) {
      auto* graphFn = dynamic_cast<jit::GraphFunction*>(fn);
      if (!graphFn) continue;
      auto schema = graphFn->getSchema().cloneWithRemappedTypes(map);
      graphFn->graph()->remapTypes(map);
      graphFn->setSchema(std::move(schema));
    }
  }
}

}  // namespace

jit::Module cloneSharing(const jit::Module& module, const std::vector<at::Tensor>& own, const RetargetOptions& to) {
  auto clone = module.clone(/*inplace=*/true);
  remapClonedMethods(module, clone);
  std::set<const void*> storages;
  for (const auto& t : own)
    if (t.defined() && storageOf(t)) storages.insert(storageOf(t));
  if (storages.empty()) return clone;
  std::map<ViewKey, at::Tensor> memo;
  retargetSlots(clone, to, memo, storages);
  checkNoneShared(clone, storages);
  return clone;
}

int retargetGraph(const std::shared_ptr<jit::Graph>& graph, const RetargetOptions& to) {
  int rewritten = 0;
  std::vector<jit::Node*> constants;  // collected first: rewriting inserts new constants
  for (auto* n : graph->nodes())
    if (n->kind() == c10::prim::Constant && n->outputs().size() == 1 &&
        (n->hasAttribute(c10::attr::value) || n->output()->type()->kind() == c10::TypeKind::NoneType))
      constants.push_back(n);
  for (auto* n : constants) {
    auto* out = n->output();
    const auto kind = out->type()->kind();
    if (kind == c10::TypeKind::NoneType) {
      // A factory op's `device=None` means the default device, the CPU: a trace made in C++ (or
      // of torch.arange(n) without a device) records None, not the device it ran on.
      if (to.device.is_cpu()) continue;
      const std::vector<jit::Use> uses = out->uses();
      for (const auto& use : uses) {
        if (!isDeviceArgument(use.user, use.offset)) continue;
        jit::WithInsertPoint guard(use.user);
        use.user->replaceInput(use.offset, graph->insertConstant(to.device));
        ++rewritten;
      }
    } else if (kind == c10::TypeKind::TensorType) {
      const auto t = n->t(c10::attr::value);
      auto converted = t.to(to.moveTensors ? to.device : t.device(), targetType(t, to));
      if (converted.scalar_type() == t.scalar_type() && converted.device() == t.device()) continue;
      n->t_(c10::attr::value, converted);
      out->inferTypeFrom(converted);
      ++rewritten;
    } else if (kind == c10::TypeKind::DeviceObjType) {
      if (n->s(c10::attr::value) == to.device.str()) continue;
      n->s_(c10::attr::value, to.device.str());
      ++rewritten;
    } else if (kind == c10::TypeKind::IntType && to.dtype && replacesDtypeCode(n->i(c10::attr::value), *to.dtype)) {
      // A copy of the use list: replaceInput removes the use from out->uses() while we walk it
      // (walking the live list skips every other use).
      const std::vector<jit::Use> uses = out->uses();
      for (const auto& use : uses) {
        if (!isDtypeArgument(use.user, use.offset)) continue;
        jit::WithInsertPoint guard(use.user);
        use.user->replaceInput(use.offset, graph->insertConstant(static_cast<int64_t>(*to.dtype)));
        ++rewritten;
      }
    }
  }
  return rewritten;
}

int retargetModule(const jit::Module& module, const RetargetOptions& to) {
  int rewritten = 0;
  std::set<const c10::ClassType*> seen;
  for (const auto& m : module.modules()) {
    if (!seen.insert(m.type().get()).second) continue;  // a type's methods serve all its instances
    for (auto* fn : m.type()->methods())
      if (auto* graphFn = dynamic_cast<jit::GraphFunction*>(fn)) rewritten += retargetGraph(graphFn->graph(), to);
  }
  retargetAttributes(module, to);
  return rewritten;
}

std::set<const void*> tensorStorages(const jit::Module& module) {
  std::set<const void*> out;
  std::function<void(const jit::Module&)> walk = [&](const jit::Module& m) {
    auto object = m._ivalue();
    for (std::size_t i = 0; i < object->slots().size(); ++i) {
      const auto value = object->getSlot(i);
      if (value.isTensor() && value.toTensor().defined() && storageOf(value.toTensor()))
        out.insert(storageOf(value.toTensor()));
      else if (value.isObject() && value.toObject()->type()->is_module())
        walk(jit::Module(value.toObject()));
    }
  };
  walk(module);
  return out;
}

int shareUnchanged(const jit::Module& clone, const jit::Module& original, const std::set<const void*>& keep) {
  at::NoGradGuard noGrad;
  int shared = 0;
  auto mine = clone._ivalue(), theirs = original._ivalue();
  const auto n = std::min(mine->slots().size(), theirs->slots().size());  // added slots come last
  for (std::size_t i = 0; i < n; ++i) {
    const auto value = mine->getSlot(i), before = theirs->getSlot(i);
    if (value.isObject() && before.isObject() && value.toObject()->type()->is_module()) {
      shared += shareUnchanged(jit::Module(value.toObject()), jit::Module(before.toObject()), keep);
      continue;
    }
    if (!value.isTensor() || !before.isTensor()) continue;
    const auto t = value.toTensor(), t0 = before.toTensor();
    if (!t.defined() || !t0.defined() || storageOf(t) == storageOf(t0) || keep.count(storageOf(t)) ||
        t.sizes() != t0.sizes() ||
        t.strides() != t0.strides() || t.device() != t0.device() || !t.is_floating_point() ||
        !t0.is_floating_point() || c10::promoteTypes(t.scalar_type(), t0.scalar_type()) != t.scalar_type())
      continue;
    // Equal once the original is converted to the clone's dtype (exact: it is no narrower).
    if (!t.equal(t0.to(t.scalar_type()))) continue;
    mine->setSlot(i, before);
    ++shared;
  }
  return shared;
}

std::shared_ptr<jit::Graph> convertedReads(const jit::Module& module, const std::shared_ptr<jit::Graph>& graph,
                                           const RetargetOptions& to, const ReadReplacement& replace) {
  auto copy = graph->copy();
  // Tensor constants as the graph holds them, before retargetGraph converts them: a replaced
  // one is looked up by its own tensor.
  std::vector<std::pair<jit::Node*, at::Tensor>> constants;
  if (replace)
    for (auto* n : copy->nodes())
      if (n->kind() == c10::prim::Constant && n->outputs().size() == 1 && n->hasAttribute(c10::attr::value) &&
          n->output()->type()->kind() == c10::TypeKind::TensorType)
        constants.emplace_back(n, n->t(c10::attr::value));
  // Before the conversions below are inserted: they pass dtype codes of their own.
  retargetGraph(copy, to);
  // At each use of `read`, the value `replace` gives for `tensor` (nothing when it gives none).
  auto replaced = [&](jit::Value* read, const at::Tensor& tensor) {
    if (!replace || read->uses().empty()) return false;
    const std::vector<jit::Use> uses = read->uses();  // a copy: replaceInput edits the live list
    for (const auto& use : uses) {
      jit::WithInsertPoint guard(use.user);
      auto* value = replace(*copy, tensor);
      if (!value) return false;
      use.user->replaceInput(use.offset, value);
    }
    return true;
  };
  for (auto& [node, tensor] : constants)
    if (replaced(node->output(), tensor)) node->destroy();
  // What each value of the copy holds when it is an attribute read from `self` (after inlining
  // every read is a prim::GetAttr chain from the first input).
  std::unordered_map<const jit::Value*, c10::IValue> held{{copy->inputs().at(0), c10::IValue(module._ivalue())}};
  std::vector<std::pair<jit::Value*, at::Tensor>> tensorReads;
  for (auto* n : copy->nodes()) {
    if (n->kind() != c10::prim::GetAttr) continue;
    auto it = held.find(n->input(0));
    if (it == held.end() || !it->second.isObject()) continue;
    auto value = it->second.toObject()->getAttr(n->s(c10::attr::name));
    if (value.isObject()) held.emplace(n->output(), value);
    else if (value.isTensor() && value.toTensor().defined()) tensorReads.emplace_back(n->output(), value.toTensor());
  }
  for (auto& [read, tensor] : tensorReads) {
    if (replaced(read, tensor)) continue;
    const auto type = targetType(tensor, to);
    if (type == tensor.scalar_type() && tensor.device() == to.device) continue;
    // One conversion right before each use, not one after the read: a traced graph may read
    // every attribute up front, and converted there all would live at once (a full copy).
    const std::vector<jit::Use> uses = read->uses();  // a copy: replaceInput edits the live list
    for (const auto& use : uses) {
      jit::WithInsertPoint guard(use.user);
      auto* value = copy->insert(c10::aten::to, {read, c10::IValue(to.device), c10::IValue(type)});
      use.user->replaceInput(use.offset, value);
    }
  }
  return copy;
}

std::vector<at::Tensor> retargetInputs(const std::vector<at::Tensor>& inputs, const RetargetOptions& to) {
  std::vector<at::Tensor> out;
  out.reserve(inputs.size());
  for (const auto& t : inputs) out.push_back(t.to(to.device, targetType(t, to)));
  return out;
}

std::string serializeModule(const jit::Module& module) {
  std::ostringstream os;
  module.save(os);
  return os.str();
}

namespace {

/// The zip reader's view of bytes held elsewhere (they must outlive the load).
class BytesReader : public caffe2::serialize::ReadAdapterInterface {
 public:
  explicit BytesReader(const std::string& bytes) : bytes_(bytes) {}
  size_t size() const override { return bytes_.size(); }
  size_t read(uint64_t pos, void* buf, size_t n, const char* what) const override {
    // Reading past the end fails as LibTorch's istream adapter does, in its words (the import
    // tells truncated archives apart by them).
    TORCH_CHECK(pos <= bytes_.size() && n <= bytes_.size() - pos, "istream reader failed: ", what, ".");
    std::memcpy(buf, bytes_.data() + pos, n);
    return n;
  }

 private:
  const std::string& bytes_;
};

}  // namespace

jit::Module copyThroughFile(const jit::Module& module) {
  const auto path = std::filesystem::temp_directory_path() /
                    ("foldnorm-copy-" + std::to_string(::getpid()) + "-" +
                     std::to_string(reinterpret_cast<std::uintptr_t>(&module)) + ".pt");
  struct Remove {
    std::filesystem::path p;
    ~Remove() {
      std::error_code ignored;
      std::filesystem::remove(p, ignored);
    }
  } remove{path};
  module.save(path.string());
  return jit::load(path.string(), c10::Device(c10::kCPU));
}

jit::Module loadModule(const std::string& bytes) {
  jit::ExtraFilesMap none;
  return loadModule(bytes, none, true);
}

jit::Module loadModule(const std::string& bytes, jit::ExtraFilesMap& extra, bool loadDebugFiles) {
  return jit::load(std::make_shared<BytesReader>(bytes), c10::Device(c10::kCPU), extra, loadDebugFiles);
}

}  // namespace foldnorm
