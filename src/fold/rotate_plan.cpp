// Deciding the absorb + rotate stage (rotate_internal.h) on the folded graph and its shapes:
// which norms' affine moves into which readers, which residual streams rotate, and every tensor
// edit that keeps each reader seeing what it saw. Nothing is changed here (rotate_apply.cpp).
//
// The stream's channel axis is the last axis of every value in it. An op passes it on (a
// "passthrough") when its input and output both end in that width and it moves whole fibers:
// views and reshapes that keep the last width (row-major order keeps each fiber whole), eval
// dropout, contiguous, clone, alias (a traced export's identity), to, expand, unsqueeze, and
// slice/select/cat along another axis.
#include <torch/csrc/jit/ir/constants.h>
#include <torch/csrc/jit/ir/ir.h>

#include <cstring>
#include <deque>
#include <set>

#include "foldnorm/ops/rms_norm.h"
#include "rotate_internal.h"

namespace foldnorm::rotate_detail {

namespace {

/// The "input" of a matmul reader that names the bias the stage adds after it.
constexpr std::size_t kBiasAfter = kBiasAfterInput;

/// Where a linear map's weight is read and which of its axes meet the stream.
///   Linear  aten::linear(x, W [o, i], b)        weight input 1 of the node, bias input 2
///   Addmm   aten::addmm(b, x, W [i, o])         weight input 2, bias input 0
///   Matmul  aten::matmul(x, W [i, o])           weight input 1, no bias (a new one is added after)
///           aten::matmul(x, W.T), W [o, i]      (numpy_T / t / transpose(-2, -1)): weight input 0
///                                               of the transposing node (Falcon's FalconLinear)
struct ReaderShape {
  LinearKind kind;
  const jit::Node* weightNode;
  std::size_t weight;
  std::size_t bias;        // input of the node itself; kBiasAfter for a matmul
  int64_t inAxis, outAxis;  // of the stored weight: the axis the input meets, the output's
};

class Planner {
 public:
  Planner(const jit::Module& m, const std::shared_ptr<jit::Graph>& g, const Shapes& s, const RotateOptions& o)
      : module_(m), graph_(g), shapes_(s), options_(o) {
    for (auto* n : g->nodes()) {
      position_[n] = plan_.kinds.size();
      plan_.kinds.push_back(n->kind());
    }
  }

  StagePlan run() {
    absorbNorms();
    findStreams();
    return std::move(plan_);
  }

 private:
  int64_t lastDim(const jit::Value* v) const {
    auto it = shapes_.find(v);
    return it == shapes_.end() || it->second.empty() ? -1 : it->second.back();
  }
  std::size_t pos(const jit::Node* n) const { return position_.at(n); }
  std::string pathOf(const jit::Value* v) const {
    auto s = slotOf(module_, v);
    return s ? s->path : "?";
  }

  bool isPassthrough(const jit::Node* n) const {
    using namespace c10;
    static const std::set<Symbol> kinds{aten::view,  aten::reshape, aten::contiguous, aten::clone,  aten::to,
                                        aten::expand, aten::unsqueeze, aten::slice,    aten::select, aten::dropout,
                                        aten::type_as, aten::alias};
    return kinds.count(n->kind()) > 0;
  }
  /// A passthrough whose input 0 and output both end in width d, moving whole fibers.
  bool keepsFibers(const jit::Node* n, int64_t d) const {
    if (lastDim(n->input(0)) != d || lastDim(n->output()) != d) return false;
    const auto rank = static_cast<int64_t>(shapes_.at(n->input(0)).size());
    if (n->kind() == c10::aten::dropout) return isEvalDropout(n);
    if (n->kind() == c10::aten::slice || n->kind() == c10::aten::select) {
      auto dim = intArg(n, 1);
      if (!dim) return false;
      if ((*dim < 0 ? *dim + rank : *dim) != rank - 1) return true;
      // x[..., 0:] (Hugging Face's hidden_states[:, slice, :]): the whole last axis, in order.
      auto start = jit::toIValue(n->input(2));
      return n->kind() == c10::aten::slice && start && (start->isNone() || (start->isInt() && start->toInt() == 0)) &&
             isOne(n->input(4));
    }
    return true;
  }

  /// The linear read of input `offset` of `n`, where the weight is a parameter.
  std::optional<ReaderShape> linearRead(const jit::Node* n, std::size_t offset) const {
    auto slot = [&](std::size_t i) { return slotOf(module_, n->input(i)).has_value(); };
    if (n->kind() == c10::aten::linear && offset == 0 && slot(1) && (isNone(n->input(2)) || slot(2)))
      return ReaderShape{LinearKind::Linear, n, 1, 2, 1, 0};
    if (n->kind() == c10::aten::addmm && offset == 1 && slot(2) && slot(0) && isOne(n->input(3)) && isOne(n->input(4)))
      return ReaderShape{LinearKind::Addmm, n, 2, 0, 0, 1};
    if (n->kind() != c10::aten::matmul || offset != 0) return std::nullopt;
    auto w = slotOf(module_, n->input(1));
    if (w && w->tensor.dim() == 2) return ReaderShape{LinearKind::Matmul, n, 1, kBiasAfter, 0, 1};
    const auto* t = n->input(1)->node();
    const std::string k = t->kind().toQualString();
    auto tw = slotOf(module_, t->input(0));
    if (!tw || tw->tensor.dim() != 2 || t->input(0)->uses().size() != 1) return std::nullopt;
    const bool transposed = k == "aten::numpy_T" || k == "aten::t" ||
                            (k == "aten::transpose" && intArg(t, 1) && intArg(t, 2) &&
                             std::abs(*intArg(t, 1) - *intArg(t, 2)) == 1);
    if (transposed) return ReaderShape{LinearKind::Matmul, t, 0, kBiasAfter, 1, 0};
    return std::nullopt;
  }

  bool hasBiasInput(const jit::Node* r, const ReaderShape& sh) const {
    return sh.bias != kBiasAfter && !isNone(r->input(sh.bias));
  }

  /// The read of a node readersOf accepted.
  ReaderShape readShape(const jit::Node* r) const {
    return linearRead(r, r->kind() == c10::aten::addmm ? 1 : 0).value();
  }

  /// The linear readers of `v` (width d) through passthroughs, or the reason there are others.
  std::string readersOf(const jit::Value* v, int64_t d, std::vector<const jit::Node*>& out) const {
    for (const auto& use : v->uses()) {
      const auto* n = use.user;
      if (isShapeOnly(n)) continue;
      if (use.offset == 0 && isPassthrough(n)) {
        if (!keepsFibers(n, d)) return describeNode(n) + " moves its channel axis";
        auto r = readersOf(n->output(), d, out);
        if (!r.empty()) return r;
        continue;
      }
      if (linearRead(n, use.offset)) {
        out.push_back(n);
        continue;
      }
      if (n->kind() == c10::prim::Return || n->kind() == c10::prim::TupleConstruct)
        return "the model returns it (" + describeNode(n) + ")";
      return describeNode(n) + " reads it and is not linear in it";
    }
    return "";
  }

  int nextCount(int& counter) { return counter++; }

  void absorbNorms() {
    const auto rmsKind = c10::Symbol::fromQualString(ops::kRmsNormOp);
    for (auto* n : graph_->nodes()) {
      if (n->kind() != rmsKind) continue;
      AbsorbVerdict verdict;
      const auto* g = n->input(2);
      const auto* b = n->input(3);
      verdict.norm = !isNone(g) ? pathOf(g) : !isNone(b) ? pathOf(b) : "rms_norm #" + std::to_string(pos(n));
      for (const char* suffix : {".weight", ".bias"})
        if (verdict.norm.size() > 7 && verdict.norm.rfind(suffix) == verdict.norm.size() - std::strlen(suffix))
          verdict.norm.resize(verdict.norm.size() - std::strlen(suffix));
      const int64_t d = lastDim(n->input(0));
      const auto shape = intList(n->input(1));
      std::vector<const jit::Node*> readers;
      std::optional<Slot> gs, bs;
      if (!isNone(g)) gs = slotOf(module_, g);
      if (!isNone(b)) bs = slotOf(module_, b);
      if (!shape || *shape != std::vector<int64_t>{d}) {
        verdict.reason = "it normalizes over more than the last axis";
      } else if ((!isNone(g) && !gs) || (!isNone(b) && !bs)) {
        verdict.reason = "its weight or bias is computed, not a parameter";
      } else {
        verdict.reason = readersOf(n->output(), d, readers);
      }
      if (verdict.reason.empty()) {
        AbsorbedNorm norm{pos(n), {}};
        for (const auto* r : readers) {
          const auto sh = readShape(r);
          verdict.readers.push_back(pathOf(sh.weightNode->input(sh.weight)));
          const std::size_t w = pos(sh.weightNode);
          if (gs) edit({TensorEdit::Scale, w, sh.weight, sh.inAxis, gs->tensor.to(at::kDouble), 0, 0,
                        "scale:" + verdict.norm});
          if (bs) {
            if (!hasBiasInput(r, sh))
              norm.newBiases.push_back({pos(r), sh.bias, w, sh.weight, lastDim(r->output())});
            if (nextCount(biasEdits_) != options_.dropBias)
              edit({TensorEdit::AddProduct, pos(r), sh.bias, sh.inAxis, bs->tensor.to(at::kDouble), w, sh.weight,
                    "bias:" + verdict.norm});
            hasBias_.insert({pos(r), sh.bias});
          }
          readersOfNorm_[n].push_back(r);
        }
        verdict.absorbed = true;
        absorbed_.insert(n);
        plan_.norms.push_back(norm);
      }
      plan_.report.absorbed.push_back(verdict);
    }
  }

  void edit(TensorEdit e) { plan_.edits.push_back(std::move(e)); }

  struct Stream {
    std::set<const jit::Value*> values;
    std::set<const jit::Node*> norms, writers;
    std::map<std::size_t, std::pair<const jit::Node*, LinearKind>> writerKinds;  // by position
    std::map<std::size_t, const jit::Node*> readers;                              // by position
    // Inserted rotations (options_.insertRotations): values a non-linear op writes, which get
    // Q after it; (node, input) reads by a non-linear op, which get Q^T before it.
    std::vector<const jit::Value*> insertAfter;
    std::vector<std::pair<const jit::Node*, std::size_t>> insertBefore;
    std::vector<std::string> insertedNames;
    std::vector<std::string> nonLinearReads;  // why each inserted Q^T was needed
    std::string refusal;
  };

  /// A non-linear writer: its output gets Q inserted after it, or the stream is refused.
  void nonLinearWriter(Stream& s, const jit::Value* v) const {
    const auto* p = v->node();
    if (!options_.insertRotations) {
      refuse(s, "it is written by " + describeNode(p) + ", which is not a linear map of a parameter");
      return;
    }
    s.insertAfter.push_back(v);
    s.insertedNames.push_back("after " + describeNode(p));
  }
  /// A non-linear read: Q^T inserted before it gives it the stream as it was, or the stream is refused.
  void nonLinearReader(Stream& s, const jit::Node* n, std::size_t input, const std::string& why) const {
    if (!options_.insertRotations) {
      refuse(s, why);
      return;
    }
    s.nonLinearReads.push_back(why);
    s.insertBefore.push_back({n, input});
    s.insertedNames.push_back("before " + (n->kind() == c10::prim::Return ? std::string("the model's output")
                                                                             : describeNode(n)));
  }

  void refuse(Stream& s, const std::string& why) const {
    if (s.refusal.empty()) s.refusal = why;
  }

  void walk(const jit::Value* seed, int64_t d, Stream& s) {
    std::deque<const jit::Value*> work{seed};
    while (!work.empty()) {
      const auto* v = work.front();
      work.pop_front();
      if (!s.values.insert(v).second) continue;
      if (lastDim(v) != d) {
        refuse(s, "a value of it does not end in width " + std::to_string(d));
        continue;
      }
      const auto* p = v->node();
      const auto kind = p->kind();
      if ((kind == c10::aten::add || kind == c10::aten::add_) && p->inputs().size() == 3 && isOne(p->input(2))) {
        for (std::size_t i = 0; i < 2; ++i) {
          if (p->input(i)->type()->kind() != c10::TypeKind::TensorType) refuse(s, describeNode(p) + " adds a scalar to it");
          else work.push_back(p->input(i));
        }
      } else if (isPassthrough(p) && keepsFibers(p, d)) {
        work.push_back(p->input(0));
      } else if (kind == c10::aten::cat && p->input(0)->node()->kind() == c10::prim::ListConstruct &&
                 intArg(p, 1) && *intArg(p, 1) != -1 &&
                 *intArg(p, 1) != static_cast<int64_t>(shapes_.at(v).size()) - 1) {
        for (auto* part : p->input(0)->node()->inputs()) work.push_back(part);
      } else if (linearRead(p, kind == c10::aten::addmm ? 1 : 0)) {
        s.writers.insert(p), s.writerKinds[pos(p)] = {p, LinearKind::Linear};
      } else if (kind == c10::aten::embedding && slotOf(module_, p->input(0))) {
        s.writers.insert(p), s.writerKinds[pos(p)] = {p, LinearKind::Embedding};
      } else if (slotOf(module_, v)) {
        s.writers.insert(p), s.writerKinds[pos(p)] = {p, LinearKind::Parameter};
      } else if (kind == c10::prim::Param) {
        refuse(s, "the model's input is part of it");
      } else if (const auto* conv = convThroughLayout(module_, shapes_, v)) {
        s.writers.insert(conv), s.writerKinds[pos(conv)] = {conv, LinearKind::Conv};
      } else {
        nonLinearWriter(s, v);
      }
      for (const auto& use : v->uses()) {
        const auto* n = use.user;
        if (isShapeOnly(n)) continue;
        if ((n->kind() == c10::aten::add || n->kind() == c10::aten::add_) && n->inputs().size() == 3 &&
            isOne(n->input(2)) && use.offset < 2) {
          work.push_back(n->output());
        } else if (use.offset == 0 && isPassthrough(n)) {
          if (keepsFibers(n, d)) work.push_back(n->output());
          else nonLinearReader(s, n, use.offset, describeNode(n) + " reads it and moves its channel axis");
        } else if (n->kind() == c10::prim::ListConstruct && n->output()->uses().size() == 1 &&
                   n->output()->uses()[0].user->kind() == c10::aten::cat) {
          work.push_back(n->output()->uses()[0].user->output());
        } else if (absorbed_.count(n) && use.offset == 0) {
          s.norms.insert(n);
          for (const auto* r : readersOfNorm_.at(n)) s.readers[pos(r)] = r;
        } else if (n->kind() == c10::Symbol::fromQualString(ops::kRmsNormOp)) {
          std::string why;
          for (const auto& a : plan_.report.absorbed)
            if (a.norm == normName(n)) why = a.reason;
          nonLinearReader(s, n, use.offset, "the norm " + normName(n) + " keeps its affine (" + why + ")");
        } else if (n->kind() == c10::aten::layer_norm) {
          refuse(s, "a LayerNorm the fold kept reads it (" + describeNode(n) + "): not mean-zero there, so not an "
                    "RMSNorm (a post-LN model's norms read the residual sum itself)");
        } else if (linearRead(n, use.offset)) {
          s.readers[pos(n)] = n;
        } else if (n->kind() == c10::prim::Return || n->kind() == c10::prim::TupleConstruct) {
          nonLinearReader(s, n, use.offset, "the model returns it (" + describeNode(n) + "): a rotated output would differ");
        } else {
          nonLinearReader(s, n, use.offset, describeNode(n) + " reads it and is not linear in it");
        }
      }
    }
  }

  std::string normName(const jit::Node* n) const {
    for (std::size_t i = 2; i < 4; ++i)
      if (!isNone(n->input(i))) {
        auto p = pathOf(n->input(i));
        auto dot = p.rfind('.');
        return dot == std::string::npos ? p : p.substr(0, dot);
      }
    return "rms_norm #" + std::to_string(pos(n));
  }

  void findStreams() {
    const auto rmsKind = c10::Symbol::fromQualString(ops::kRmsNormOp);
    std::set<const jit::Value*> seen;
    int index = 0;
    for (auto* n : graph_->nodes()) {
      if (n->kind() != rmsKind && n->kind() != c10::aten::layer_norm) continue;
      if (seen.count(n->input(0))) continue;
      Stream s;
      const int64_t d = lastDim(n->input(0));
      walk(n->input(0), d, s);
      seen.insert(s.values.begin(), s.values.end());
      StreamVerdict verdict;
      verdict.width = d;
      verdict.norms = static_cast<int>(s.norms.size());
      verdict.writers = static_cast<int>(s.writers.size());
      verdict.readers = static_cast<int>(s.readers.size());
      if (s.refusal.empty() && s.readers.empty())
        refuse(s, "no linear map reads it (through a weightless norm or directly), so rotating it would change "
                  "nothing a quantizer sees" +
                      (s.nonLinearReads.empty() ? std::string() : ": " + s.nonLinearReads.front()));
      verdict.reason = s.refusal;
      verdict.seed = options_.seed + static_cast<uint64_t>(index);
      if (options_.rotate && s.refusal.empty()) rotate(s, d, verdict);
      else if (!options_.rotate && s.refusal.empty()) verdict.reason = "not asked to rotate (absorb only)";
      plan_.report.streams.push_back(verdict);
      ++index;
    }
  }

  void rotate(Stream& s, int64_t d, StreamVerdict& verdict) {
    RotationKind used;
    auto q = rotationMatrix(d, options_.kind, verdict.seed, &used);
    verdict.rotated = true;
    verdict.rotation = toString(used);
    if (!s.insertAfter.empty() || !s.insertBefore.empty()) {
      const std::size_t k = plan_.rotations.size();
      plan_.rotations.push_back(q);
      for (const auto* v : s.insertAfter)
        if (nextCount(insertedEdits_) != options_.skipInserted)
          plan_.inserted.push_back({pos(v->node()), v->offset(), false, k});
      for (const auto& [n, input] : s.insertBefore)
        if (nextCount(insertedEdits_) != options_.skipInserted)
          plan_.inserted.push_back({n->kind() == c10::prim::Return ? kReturnNode : pos(n), input, true, k});
      verdict.inserted = s.insertedNames;
    }
    const std::string key = "rot:" + std::to_string(verdict.seed);
    auto rot = [&](const jit::Node* n, std::size_t input, int64_t axis) {
      edit({TensorEdit::Rotate, pos(n), input, axis, q, 0, 0, key + ":" + std::to_string(axis)});
    };
    auto rotBias = [&](const jit::Node* n, const ReaderShape& sh) {
      if (!hasBias_.count({pos(n), sh.bias}) && !hasBiasInput(n, sh)) return;
      if (nextCount(biasEdits_) != options_.dropBias) rot(n, sh.bias, -1);
    };
    for (const auto& [position, writer] : s.writerKinds) {
      const auto& [p, kind] = writer;
      (void)position;
      switch (kind) {
        case LinearKind::Linear: {  // linear, addmm, matmul: their output axis
          const auto sh = readShape(p);
          rot(sh.weightNode, sh.weight, sh.outAxis);
          rotBias(p, sh);
          verdict.writerNames.push_back(pathOf(sh.weightNode->input(sh.weight)));
          break;
        }
        case LinearKind::Conv:  // its output channels: weight axis 0, the bias
          rot(p, 1, 0);
          if (!isNone(p->input(2)) && nextCount(biasEdits_) != options_.dropBias) rot(p, 2, -1);
          verdict.writerNames.push_back(pathOf(p->input(1)));
          break;
        case LinearKind::Embedding:
          rot(p, 0, 1);
          verdict.writerNames.push_back(pathOf(p->input(0)));
          break;
        case LinearKind::Parameter:
          for (const auto& use : p->output()->uses())
            if (!isShapeOnly(use.user)) rot(use.user, use.offset, -1);
          verdict.writerNames.push_back(pathOf(p->output()));
          break;
        default:
          break;
      }
    }
    for (const auto& [position, r] : s.readers) {
      (void)position;
      const auto sh = readShape(r);
      verdict.readerNames.push_back(pathOf(sh.weightNode->input(sh.weight)));
      if (nextCount(readerEdits_) == options_.skipReader) continue;
      rot(sh.weightNode, sh.weight, sh.inAxis);
    }
  }

  const jit::Module& module_;
  std::shared_ptr<jit::Graph> graph_;
  const Shapes& shapes_;
  const RotateOptions& options_;
  StagePlan plan_;
  std::map<const jit::Node*, std::size_t> position_;
  std::set<const jit::Node*> absorbed_;
  std::map<const jit::Node*, std::vector<const jit::Node*>> readersOfNorm_;
  std::set<std::pair<std::size_t, std::size_t>> hasBias_;  // (node, input) that has or gets a bias
  int biasEdits_ = 0, readerEdits_ = 0, insertedEdits_ = 0;
};

}  // namespace

StagePlan planStage(const jit::Module& module, const std::shared_ptr<jit::Graph>& graph, const Shapes& shapes,
                    const RotateOptions& options) {
  return Planner(module, graph, shapes, options).run();
}

}  // namespace foldnorm::rotate_detail
