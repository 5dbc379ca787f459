// Retargeting copies of a traced module (see include/foldnorm/torch/model_surgery.h).
#include "foldnorm/torch/model_surgery.h"

#include <torch/csrc/jit/serialization/import.h>

#include <map>
#include <sstream>
#include <tuple>

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

void retargetSlots(const jit::Module& m, const RetargetOptions& to, std::map<ViewKey, at::Tensor>& memo) {
  auto object = m._ivalue();
  for (std::size_t i = 0; i < object->slots().size(); ++i) {
    const auto value = object->getSlot(i);
    if (value.isTensor()) {
      const auto t = value.toTensor();
      if (!t.defined()) continue;
      auto key = viewKey(t);
      auto it = memo.find(key);
      if (it == memo.end()) {
        auto converted = t.detach().to(to.device, targetType(t, to));
        converted.set_requires_grad(t.requires_grad() && converted.is_floating_point());
        it = memo.emplace(std::move(key), converted).first;
      }
      object->setSlot(i, it->second);
    } else if (value.isObject() && value.toObject()->type()->is_module()) {
      retargetSlots(jit::Module(value.toObject()), to, memo);
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

}  // namespace

void retargetAttributes(const jit::Module& module, const RetargetOptions& to) {
  std::map<ViewKey, at::Tensor> memo;
  retargetSlots(module, to, memo);
}

int retargetGraph(const std::shared_ptr<jit::Graph>& graph, const RetargetOptions& to) {
  int rewritten = 0;
  std::vector<jit::Node*> constants;  // collected first: rewriting inserts new constants
  for (auto* n : graph->nodes())
    if (n->kind() == c10::prim::Constant && n->outputs().size() == 1 && n->hasAttribute(c10::attr::value))
      constants.push_back(n);
  for (auto* n : constants) {
    auto* out = n->output();
    const auto kind = out->type()->kind();
    if (kind == c10::TypeKind::TensorType) {
      const auto t = n->t(c10::attr::value);
      auto converted = t.to(to.device, targetType(t, to));
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

jit::Module loadModule(const std::string& bytes) {
  std::istringstream is(bytes);
  return jit::load(is, c10::Device(c10::kCPU));
}

}  // namespace foldnorm
