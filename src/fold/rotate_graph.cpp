// Reading the graph for the absorb + rotate stage (rotate_internal.h): the parameter a value
// reads, every value's shape from one run, constant arguments, and the layout walk that finds a
// convolution writing the stream through reshapes and permutes (ViT's patch embedding).
#include <torch/csrc/jit/ir/constants.h>
#include <torch/csrc/jit/ir/ir.h>

#include <set>

#include "rotate_internal.h"

namespace foldnorm::rotate_detail {

std::string describeNode(const jit::Node* n) {
  std::string s = n->kind().toQualString();
  if (auto flc = n->sourceRange().file_line_col()) {
    const auto& [file, line, col] = *flc;
    s += " (" + file + ":" + std::to_string(line) + ")";
  }
  return s;
}

std::optional<Slot> slotOf(const jit::Module& root, const jit::Value* v) {
  auto* n = const_cast<jit::Node*>(v->node());  // a constant's node is where an edit writes
  if (n->kind() == c10::prim::Constant) {
    if (!n->hasAttribute(c10::attr::value) || n->kindOf(c10::attr::value) != jit::AttributeKind::t) return std::nullopt;
    Slot s;
    s.constant = n;
    s.tensor = n->t(c10::attr::value);
    s.path = "constant";
    return s;
  }
  std::vector<std::string> names;
  while (v->node()->kind() == c10::prim::GetAttr) {
    names.push_back(v->node()->s(c10::attr::name));
    v = v->node()->input(0);
  }
  if (names.empty() || v != v->owningGraph()->inputs().at(0)) return std::nullopt;
  jit::Module owner = root;
  std::string path;
  for (std::size_t i = names.size(); i-- > 1;) {
    auto sub = owner.attr(names[i]);
    if (!sub.isObject()) return std::nullopt;
    owner = jit::Module(sub.toObject());
    path += names[i] + ".";
  }
  auto iv = owner.attr(names[0]);
  if (!iv.isTensor()) return std::nullopt;
  return Slot{owner, names[0], path + names[0], iv.toTensor(), nullptr};
}

Shapes recordShapes(const jit::Module& module, const std::shared_ptr<jit::Graph>& graph,
                    const std::vector<at::Tensor>& inputs) {
  auto copy = graph->copy();
  auto collect = [](const std::shared_ptr<jit::Graph>& g) {
    std::vector<jit::Value*> out(g->inputs().begin(), g->inputs().end());
    for (auto* n : g->nodes())
      for (auto* v : n->outputs()) out.push_back(v);
    return out;
  };
  const auto original = collect(graph), copied = collect(copy);
  std::vector<jit::Value*> outs;
  std::vector<const jit::Value*> which;
  for (std::size_t i = 0; i < copied.size(); ++i)
    if (copied[i]->type()->kind() == c10::TypeKind::TensorType) {
      outs.push_back(copied[i]);
      which.push_back(original.at(i));
    }
  auto* tuple = copy->insertNode(copy->createTuple(outs));
  while (!copy->outputs().empty()) copy->eraseOutput(0);
  copy->registerOutput(tuple->output());
  auto values = runGraph(module, copy, inputs);
  if (values.size() != which.size()) throw std::logic_error("rotate: the shape run returned another number of values");
  Shapes shapes;
  for (std::size_t i = 0; i < values.size(); ++i)
    if (values[i].defined()) shapes[which[i]] = values[i].sizes().vec();
  return shapes;
}

bool isShapeOnly(const jit::Node* n) {
  // aten::numel is not an interned symbol in every torch (2.9's headers lack it): look it up by name
  static const std::set<c10::Symbol> kinds{c10::aten::size, c10::aten::dim, c10::prim::device, c10::prim::dtype,
                                           c10::Symbol::fromQualString("aten::numel"), c10::prim::layout};
  return kinds.count(n->kind()) > 0;
}

std::optional<int64_t> intArg(const jit::Node* n, std::size_t i) {
  auto iv = jit::toIValue(n->input(i));
  if (!iv || !iv->isInt()) return std::nullopt;
  return iv->toInt();
}

/// A constant int list, also one a trace builds with prim::ListConstruct of constants.
std::optional<std::vector<int64_t>> intList(const jit::Value* v) {
  if (auto iv = jit::toIValue(v); iv && iv->isIntList()) return iv->toIntVector();
  if (v->node()->kind() != c10::prim::ListConstruct) return std::nullopt;
  std::vector<int64_t> out;
  for (const auto* e : v->node()->inputs()) {
    auto iv = jit::toIValue(e);
    if (!iv || !iv->isInt()) return std::nullopt;
    out.push_back(iv->toInt());
  }
  return out;
}

bool isOne(const jit::Value* v) {
  auto iv = jit::toIValue(v);
  return iv && ((iv->isInt() && iv->toInt() == 1) || (iv->isDouble() && iv->toDouble() == 1.0));
}

bool isEvalDropout(const jit::Node* n) {
  if (n->kind() != c10::aten::dropout) return false;
  auto train = jit::toIValue(n->input(2));
  return train && train->isBool() && !train->toBool();
}

const jit::Node* convThroughLayout(const jit::Module& module, const Shapes& shapes, const jit::Value* v) {
  using namespace c10;
  auto shapeOf = [&](const jit::Value* x) -> const std::vector<int64_t>* {
    auto it = shapes.find(x);
    return it == shapes.end() ? nullptr : &it->second;
  };
  auto valueUses = [](const jit::Value* x) {
    std::size_t n = 0;
    for (const auto& u : x->uses()) n += isShapeOnly(u.user) ? 0 : 1;
    return n;
  };
  const jit::Value* cur = v;
  const auto* vs = shapeOf(v);
  if (!vs || vs->empty()) return nullptr;
  int64_t axis = static_cast<int64_t>(vs->size()) - 1;  // where the stream's axis is in `cur`
  for (int step = 0; step < 8; ++step) {
    const auto* p = cur->node();
    const auto k = p->kind();
    const bool convNd = k == aten::conv1d || k == aten::conv2d || k == aten::conv3d;
    if (k == aten::_convolution || convNd) {
      if (axis != 1 || !slotOf(module, p->input(1)) || !(isNone(p->input(2)) || slotOf(module, p->input(2))))
        return nullptr;
      if (k == aten::_convolution) {
        auto transposed = jit::toIValue(p->input(6));
        if (!transposed || !transposed->isBool() || transposed->toBool()) return nullptr;
      }
      auto groups = intArg(p, k == aten::_convolution ? 8 : 6);
      return groups && *groups == 1 ? p : nullptr;
    }
    const auto* in = shapeOf(p->input(0));
    const auto* out = shapeOf(cur);
    if (!in || !out || p->outputs().size() != 1 || (cur != v && valueUses(cur) != 1)) return nullptr;
    const auto rank = static_cast<int64_t>(in->size());
    auto norm = [&](int64_t d) { return d < 0 ? d + rank : d; };
    if (k == aten::permute) {
      auto dims = intList(p->input(1));
      if (!dims || static_cast<int64_t>(dims->size()) != rank) return nullptr;
      axis = norm((*dims)[static_cast<std::size_t>(axis)]);
    } else if (k == aten::transpose) {
      auto a = intArg(p, 1), b = intArg(p, 2);
      if (!a || !b) return nullptr;
      axis = axis == norm(*a) ? norm(*b) : axis == norm(*b) ? norm(*a) : axis;
    } else if (k == aten::reshape || k == aten::view || k == aten::flatten) {
      // The axis stays whole when the input has an axis of the same size behind the same number
      // of elements: every element keeps its channel index.
      int64_t before = 1;
      for (int64_t i = 0; i < axis; ++i) before *= (*out)[static_cast<std::size_t>(i)];
      const int64_t size = (*out)[static_cast<std::size_t>(axis)];
      int64_t found = -1, prefix = 1;
      for (int64_t j = 0; j < rank && found < 0; ++j) {
        if (prefix == before && (*in)[static_cast<std::size_t>(j)] == size) found = j;
        prefix *= (*in)[static_cast<std::size_t>(j)];
      }
      if (found < 0) return nullptr;
      axis = found;
    } else if (!(k == aten::contiguous || k == aten::clone || (k == aten::dropout && isEvalDropout(p)))) {
      return nullptr;
    }
    cur = p->input(0);
  }
  return nullptr;
}

}  // namespace foldnorm::rotate_detail
