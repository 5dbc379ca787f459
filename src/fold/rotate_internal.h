// Internal to src/fold: the pieces of the absorb + rotate stage (include/foldnorm/fold/rotate.h).
//   rotate_graph.cpp     reads the graph: the parameter a value reads, shapes, constant arguments,
//                        the layout walk from the stream back to a convolution
//   rotate_plan.cpp      decides, on the folded graph and its recorded shapes: which norms' affine
//                        moves into which readers, which streams rotate, every tensor edit and
//                        every inserted rotation
//   rotate_apply.cpp     executes such a plan on a module whose forward has the same node order
//                        (the float32 fold, or the float64 plan of the verification)
//   rotation_matrix.cpp  the orthogonal matrices;  rotate.cpp  orchestration, check, save, report
#pragma once

#include <map>
#include <optional>
#include <memory>
#include <string>
#include <vector>

#include "foldnorm/fold/rotate.h"
#include "foldnorm/torch/torch_model.h"

namespace foldnorm::rotate_detail {

namespace jit = torch::jit;

/// How a node reads or writes the stream, and so which axis of which input is the stream's.
enum class LinearKind {
  Linear,     // aten::linear(x, W [o, i], b [o])
  Addmm,      // aten::addmm(b [o], x, W [i, o])  (Hugging Face's Conv1D)
  Matmul,     // aten::matmul(x, W [i, o]), W a parameter
  Embedding,  // aten::embedding(W [n, d], ids)   (writer only)
  Parameter,  // a parameter read into the stream as it is (a position table): its last axis
  Conv,       // aten::_convolution / convNd(x, W [o, i/g, k...], b [o]), groups 1 (writer only): its
              // output channels reach the stream's last axis through layout ops (ViT's patch embedding)
};

/// One edit of the tensor that input `input` of node `node` (by position in the graph) reads.
struct TensorEdit {
  enum Kind { Scale, AddProduct, Rotate } kind;
  std::size_t node = 0, input = 0;
  int64_t axis = 0;               // Scale, Rotate: the stream's axis of that tensor
  at::Tensor factor;              // Scale: g (float64); Rotate: Q (float64 [d, d])
  /// AddProduct: add W b, W the tensor input `weightInput` of node `weightNode` reads (as it was
  /// before this plan: the executing module's), b = `factor`, contracted along `axis` of W.
  std::size_t weightNode = 0, weightInput = 0;
  std::string key;                // equal keys, equal edits: what decides an untie
};

/// One absorbed norm: node position, and the new bias inputs it needs (a reader with no bias of
/// its own reading a norm that has one gets a fresh one: its (node, input) with the width).
/// A reader without a bias of its own reading a norm that has one: aten::linear gets the new
/// tensor as its bias input; an aten::matmul (input kBiasAfter) gets an aten::add after it.
struct NewBias {
  std::size_t node = 0, input = 0, weightNode = 0, weightInput = 0;  // the dtype is its weight's
  int64_t width = 0;
};
inline constexpr std::size_t kBiasAfterInput = 1000;
struct AbsorbedNorm {
  std::size_t node = 0;
  std::vector<NewBias> newBiases;
};

/// A rotation inserted into the graph where the stream meets an op that is not a linear map of a
/// parameter (Whisper's GELU stem writing it, a norm that keeps its affine or the model's output
/// reading it): After: output `slot` of the node becomes linear(v, Q) = Q v per fiber, for every
/// use; Before: input `slot` of the node reads matmul(v, Q) = Q^T v, the stream as it was.
inline constexpr std::size_t kReturnNode = static_cast<std::size_t>(-1);  // `node`: the graph's return
struct InsertedRotation {
  std::size_t node = 0, slot = 0;
  bool before = false;
  std::size_t stream = 0;         // index into StagePlan::rotations
};

struct StagePlan {
  std::vector<AbsorbedNorm> norms;
  std::vector<TensorEdit> edits;  // in order (absorb first, then rotations)
  std::vector<at::Tensor> rotations;         // float64 Q of each stream that has inserted rotations
  std::vector<InsertedRotation> inserted;
  std::vector<c10::Symbol> kinds; // the planned graph's node kinds, by position (checked on apply)
  RotateReport report;            // verdicts (the verification's numbers are filled later)
};

/// Shapes of every tensor value of `graph`, from one run of `module` on `inputs`.
using Shapes = std::map<const jit::Value*, std::vector<int64_t>>;
Shapes recordShapes(const jit::Module& module, const std::shared_ptr<jit::Graph>& graph,
                    const std::vector<at::Tensor>& inputs);

/// Decides the stage on `graph` (the folded model's forward: its norms foldnorm::rms_norm).
StagePlan planStage(const jit::Module& module, const std::shared_ptr<jit::Graph>& graph, const Shapes& shapes,
                    const RotateOptions& options);

/// Executes `plan` on `module` (forward `graph`, the same node order as the planned graph):
/// each edited tensor computed in float64 and stored in `storeAs` (or its own dtype), new
/// attributes on the root module for untied reads and new biases; absorbed norms become
/// aten::rms_norm without weight. Untied tensors are listed in `untied` when given.
void applyStage(jit::Module& module, const std::shared_ptr<jit::Graph>& graph, const StagePlan& plan,
                std::optional<at::ScalarType> storeAs, std::vector<std::string>* untied);

/// "aten::addmm (model.py:12)": what a refusal names.
std::string describeNode(const jit::Node* n);

/// Reads only metadata (size, dim, numel, device, dtype, layout): no edit changes what it sees.
bool isShapeOnly(const jit::Node* n);
/// Constant arguments: an int input, an int list (also a prim::ListConstruct of constants), 1.
std::optional<int64_t> intArg(const jit::Node* n, std::size_t i);
std::optional<std::vector<int64_t>> intList(const jit::Value* v);
bool isOne(const jit::Value* v);
inline bool isNone(const jit::Value* v) { return v->mustBeNone(); }
/// aten::dropout with train=false.
bool isEvalDropout(const jit::Node* n);
/// A convolution whose output channels reach `v`'s last axis whole through layout ops read by
/// nothing else (ViT's patch embedding: conv -> reshape(n, c, h*w) or flatten(2) ->
/// permute(0, 2, 1) or transpose(1, 2)), its weight and bias parameters, groups 1, not
/// transposed: rotating its output channels rotates that axis. nullptr otherwise.
const jit::Node* convThroughLayout(const jit::Module& module, const Shapes& shapes, const jit::Value* v);

}  // namespace foldnorm::rotate_detail

namespace foldnorm::rotate_detail {

/// The attribute (or tensor constant) a value reads: the module that owns it, its name, its
/// dotted path from the root, and the tensor. Empty `name` for a constant (`constant` set).
struct Slot {
  jit::Module owner;
  std::string name, path;
  at::Tensor tensor;
  jit::Node* constant = nullptr;
};
/// Follows prim::GetAttr from the graph's `self` (input 0); nullopt for anything else.
std::optional<Slot> slotOf(const jit::Module& root, const jit::Value* v);

}  // namespace foldnorm::rotate_detail
