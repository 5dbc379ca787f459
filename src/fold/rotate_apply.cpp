// Executing a stage plan (rotate_internal.h) on a module whose forward has the planned graph's
// node order: the float32 fold (what is saved) or the float64 plan of the verification.
//
// Each tensor a planned node input reads is edited in float64 (scale an axis by g, add W b,
// rotate an axis' fibers by Q) and rounded once to the stored dtype. The reads of one tensor are
// grouped by their edits: one group (or none left unedited) writes the slot; every other group
// gets an attribute of its own on the root module, foldnorm_rotated_<path>, and its reads are
// redirected there (an untie: a tied LM head whose embedding is rotated as a writer).
#include <torch/csrc/jit/ir/ir.h>
#include <torch/csrc/jit/passes/dead_code_elimination.h>

#include <set>

#include "rotate_internal.h"

namespace foldnorm::rotate_detail {
namespace {

using Use = std::pair<std::size_t, std::size_t>;  // (node position, input)

int64_t axisOf(const at::Tensor& t, int64_t axis) { return axis < 0 ? axis + t.dim() : axis; }

std::string sanitized(const std::string& prefix, const std::string& path) {
  std::string s = prefix;
  for (char c : path) s += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  return s;
}

/// The identity of the tensor a slot holds: tied slots (one storage, one view) are one tensor.
struct TensorId {
  const void* storage;
  int64_t offset;
  std::vector<int64_t> sizes, strides;
  const jit::Node* constant;
  bool operator<(const TensorId& o) const {
    return std::tie(storage, offset, sizes, strides, constant) < std::tie(o.storage, o.offset, o.sizes, o.strides, o.constant);
  }
};

TensorId idOf(const Slot& s) {
  const auto& t = s.tensor;
  const void* storage = t.has_storage() ? static_cast<const void*>(t.storage().unsafeGetStorageImpl())
                                        : static_cast<const void*>(t.unsafeGetTensorImpl());
  return {storage, t.storage_offset(),
          t.sizes().vec(), t.strides().vec(), s.constant};
}

}  // namespace

void applyStage(jit::Module& module, const std::shared_ptr<jit::Graph>& graph, const StagePlan& plan,
                std::optional<at::ScalarType> storeAs, std::vector<std::string>* untied) {
  at::NoGradGuard noGrad;
  std::vector<jit::Node*> nodes(graph->nodes().begin(), graph->nodes().end());
  if (nodes.size() != plan.kinds.size()) throw std::logic_error("rotate: the graph does not match the planned one");
  for (std::size_t i = 0; i < nodes.size(); ++i)
    if (nodes[i]->kind() != plan.kinds[i])
      throw std::logic_error("rotate: node " + std::to_string(i) + " differs from the planned graph");

  std::map<Use, std::vector<const TensorEdit*>> chains;
  for (const auto& e : plan.edits) chains[{e.node, e.input}].push_back(&e);
  std::map<Use, NewBias> created;  // new biases: zeros of their width, in their weight's dtype
  for (const auto& norm : plan.norms)
    for (const auto& nb : norm.newBiases) created[{nb.node, nb.input}] = nb;

  // What each planned input reads before any edit (an AddProduct reads its weight as it was).
  std::map<Use, at::Tensor> before;
  auto readBefore = [&](const Use& u) -> at::Tensor {
    auto it = created.find(u);
    if (it != created.end()) {
      auto weight = slotOf(module, nodes[it->second.weightNode]->input(it->second.weightInput));
      return at::zeros({it->second.width}, weight.value().tensor.options());
    }
    auto slot = slotOf(module, nodes[u.first]->input(u.second));
    if (!slot) throw std::logic_error("rotate: a planned input reads no parameter");
    return slot->tensor;
  };
  for (const auto& e : plan.edits) {
    before[{e.node, e.input}] = readBefore({e.node, e.input});
    if (e.kind == TensorEdit::AddProduct) before[{e.weightNode, e.weightInput}] = readBefore({e.weightNode, e.weightInput});
  }
  auto readOf = [&](const Use& u) {
    auto it = before.find(u);
    return it != before.end() ? it->second : readBefore(u);  // an unedited new bias: zeros
  };
  auto edited = [&](const Use& u) {
    const auto original = readOf(u);
    auto x = original.detach().to(at::kDouble);
    static const std::vector<const TensorEdit*> kNone;  // a new bias whose only edit a test knob left out
    const auto chain = chains.find(u);
    for (const auto* e : chain == chains.end() ? kNone : chain->second) {
      const auto axis = axisOf(x, e->axis);
      switch (e->kind) {
        case TensorEdit::Scale: {
          std::vector<int64_t> shape(static_cast<std::size_t>(x.dim()), 1);
          shape[static_cast<std::size_t>(axis)] = -1;
          x = x * e->factor.view(shape);
          break;
        }
        case TensorEdit::AddProduct: {
          auto w = readOf({e->weightNode, e->weightInput}).detach().to(at::kDouble);
          x = x + at::tensordot(w, e->factor, {axisOf(w, e->axis)}, {0});
          break;
        }
        case TensorEdit::Rotate:
          x = at::movedim(x, axis, -1).matmul(e->factor.t()).movedim(-1, axis).contiguous();
          break;
      }
    }
    return x.to(storeAs.value_or(original.scalar_type()));
  };
  auto keyOf = [&](const Use& u) {
    std::string key;
    auto it = chains.find(u);
    if (it != chains.end())
      for (const auto* e : it->second) key += e->key + ";";
    return key;
  };
  auto* self = graph->inputs().at(0);
  auto newAttribute = [&](const std::string& prefix, const std::string& path, const at::Tensor& value) {
    auto name = sanitized(prefix, path);
    while (module.hasattr(name)) name += "_";
    module.register_parameter(name, value, /*is_buffer=*/false);
    auto* get = graph->createGetAttr(self, name);
    get->output()->setType(c10::TensorType::get());
    get->insertAfter(graph->param_node());
    return get->output();
  };

  // Every read of a parameter by a node, grouped by the tensor it reads.
  std::map<TensorId, std::vector<std::pair<Use, Slot>>> reads;
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    const auto kind = nodes[i]->kind();
    if (kind == c10::aten::size || kind == c10::aten::dim || kind == c10::prim::device || kind == c10::prim::dtype)
      continue;  // reads only what no edit changes
    for (std::size_t j = 0; j < nodes[i]->inputs().size(); ++j) {
      if (created.count({i, j})) continue;
      auto* p = nodes[i]->input(j)->node();
      if (p->kind() != c10::prim::GetAttr && p->kind() != c10::prim::Constant) continue;
      if (auto slot = slotOf(module, nodes[i]->input(j))) reads[idOf(*slot)].push_back({{i, j}, *slot});
    }
  }
  for (const auto& [use, nb] : created) {
    const auto weightPath = slotOf(module, nodes[nb.weightNode]->input(nb.weightInput)).value().path;
    auto* bias = newAttribute("foldnorm_absorbed_bias_", weightPath, edited(use));
    auto* reader = nodes[use.first];
    if (use.second != kBiasAfterInput) {
      reader->replaceInput(use.second, bias);
      continue;
    }
    // A matmul has no bias input: y + bias after it, read by all of y's readers.
    jit::WithInsertPoint guard(reader->next());
    auto* sum = graph->insert(c10::aten::add, {reader->output(), bias});
    sum->node()->setSourceRange(reader->sourceRange());
    sum->setType(reader->output()->type());
    reader->output()->replaceAllUsesAfterNodeWith(sum->node(), sum);
  }
  for (auto& [id, uses] : reads) {  // NOLINT: slots are set through copies of their module handles
    (void)id;
    std::map<std::string, std::vector<std::pair<Use, Slot>>> byKey;
    for (const auto& u : uses) byKey[keyOf(u.first)].push_back(u);
    if (byKey.size() == 1 && byKey.begin()->first.empty()) continue;
    // The slot keeps the unedited reads' tensor, else takes the largest group's.
    std::string slotKey = byKey.begin()->first;
    if (!slotKey.empty())
      for (const auto& [key, group] : byKey)
        if (group.size() > byKey.at(slotKey).size()) slotKey = key;
    for (const auto& [key, group] : byKey) {
      if (key.empty()) continue;
      auto value = edited(group.front().first);
      if (key == slotKey) {
        std::set<std::pair<const void*, std::string>> done;
        for (const auto& [use, slot] : group) {
          if (slot.constant) slot.constant->t_(c10::attr::value, value);
          else if (done.insert({slot.owner._ivalue().get(), slot.name}).second) jit::Module(slot.owner).setattr(slot.name, value);
        }
        continue;
      }
      auto* fresh = newAttribute("foldnorm_rotated_", group.front().second.path, value);
      for (const auto& [use, slot] : group) nodes[use.first]->replaceInput(use.second, fresh);
      if (untied) untied->push_back(group.front().second.path);
    }
  }

  // Inserted rotations: one attribute per stream holding Q, in the stored dtype (the model's: its
  // first floating parameter's). After a writer: linear(v, Q) = Q v per fiber, read by every
  // use of v; before a reader: matmul(v, Q) = Q^T v, the stream as it was.
  if (!plan.inserted.empty()) {
    at::ScalarType dtype = at::kFloat;
    for (const auto& p : module.parameters())
      if (p.is_floating_point()) {
        dtype = p.scalar_type();
        break;
      }
    std::map<std::size_t, jit::Value*> rotation;
    auto q = [&](std::size_t k) {
      auto it = rotation.find(k);
      if (it != rotation.end()) return it->second;
      return rotation[k] = newAttribute("foldnorm_stream_rotation_", std::to_string(k),
                                        plan.rotations.at(k).to(storeAs.value_or(dtype)));
    };
    auto nodeAt = [&](std::size_t i) { return i == kReturnNode ? graph->return_node() : nodes.at(i); };
    for (const auto& ins : plan.inserted) {
      if (ins.before) continue;
      auto* producer = nodeAt(ins.node);
      auto* v = producer->outputs().at(ins.slot);
      jit::WithInsertPoint guard(producer->next());
      auto* none = graph->insertConstant(c10::IValue());
      auto* rotated = graph->insert(c10::aten::linear, {v, q(ins.stream), none});
      rotated->node()->setSourceRange(producer->sourceRange());
      rotated->setType(v->type());
      v->replaceAllUsesAfterNodeWith(rotated->node(), rotated);
    }
    for (const auto& ins : plan.inserted) {
      if (!ins.before) continue;
      auto* reader = nodeAt(ins.node);
      jit::WithInsertPoint guard(reader);
      auto* back = graph->insert(c10::aten::matmul, {reader->input(ins.slot), q(ins.stream)});
      back->node()->setSourceRange(reader->sourceRange());
      back->setType(reader->input(ins.slot)->type());
      reader->replaceInput(ins.slot, back);
    }
  }

  // The absorbed norms lose their affine: aten::rms_norm without weight, runs in plain PyTorch.
  for (const auto& norm : plan.norms) {
    auto* n = nodes[norm.node];
    jit::WithInsertPoint guard(n);
    auto* none = graph->insertConstant(c10::IValue());
    auto* out = graph->insert(c10::aten::rms_norm, {n->input(0), n->input(1), none, n->input(4)});
    out->node()->setSourceRange(n->sourceRange());
    out->setType(n->output()->type());
    n->output()->replaceAllUsesWith(out);
    n->destroy();
  }
  jit::EliminateDeadCode(graph);
}

}  // namespace foldnorm::rotate_detail
