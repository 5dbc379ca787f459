// Model surgery on the torch side: copies of a traced module made to run in another floating
// dtype or on another device. One home for what the fold's float64 verification and the
// benchmark's bfloat16/float16/CUDA copies both need.
//
// A trace bakes in what it saw while tracing:
//   - the float32 dtype code wherever it converted to the model's dtype (aten::to(x, 6)),
//   - floating tensor constants (a causal mask's fill value, a scale),
//   - the tracing device (aten::arange(..., device="cpu")).
// Converting the module's tensors (module.to()) leaves all three as they were, so a "float64"
// copy still rounds to float32 at every aten::to. retargetGraph rewrites them as a trace made in
// the target dtype on the target device would have them.
#pragma once

#include <torch/script.h>

#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace foldnorm {

/// Where and in which floating dtype a copy runs.
struct RetargetOptions {
  std::optional<at::ScalarType> dtype;  // floating tensors become this; others (or all: nullopt) keep theirs
  c10::Device device{c10::kCPU};
  /// false: tensors (attributes, tensor constants) keep their device and only the graphs' device
  /// arguments name `device` (a copy for a GPU written on a machine without one; `.to("cuda")`
  /// after loading moves the tensors).
  bool moveTensors = true;
};

/// Floating tensor attributes of `module` and its submodules (recursively) to `dtype`, every
/// tensor attribute to `device`. Tensors that share a storage (the same offset, sizes and
/// strides) share their copy, so tied weights stay tied.
void retargetAttributes(const torch::jit::Module& module, const RetargetOptions& to);

/// A clone of `module` (own types and objects: attributes can be set and registered on it) that
/// shares every tensor with `module` except those sharing a storage with one of `own`: these get
/// copies of their own, converted as `to` says (tensors that shared a storage share their copy).
/// What the fold and its float64 plan write into is never the original's. Throws
/// std::logic_error if a slot would still hold one of `own`'s storages.
torch::jit::Module cloneSharing(const torch::jit::Module& module, const std::vector<at::Tensor>& own,
                                const RetargetOptions& to);

/// Rewrites what the trace baked into `graph` (see above): floating tensor constants to `dtype`
/// (all tensor constants to `device`), device constants to `device`, and dtype codes passed as
/// a dtype argument: the float32 code, and for a float64 target also the float16 and bfloat16
/// codes (a float64 oracle keeps no narrower step). The same integer 6 used as a size stays 6.
/// Returns how many constants and uses were rewritten.
int retargetGraph(const std::shared_ptr<torch::jit::Graph>& graph, const RetargetOptions& to);

/// retargetGraph on every method of `module` and its submodules (each type's methods once), then
/// retargetAttributes: a saved copy of it runs in `to.dtype` on `to.device` as a trace made there
/// would (every method, not only an inlined forward). Types are changed in place: use it on a
/// module whose types are its own (a fresh load). Returns how many constants and uses were rewritten.
int retargetModule(const torch::jit::Module& module, const RetargetOptions& to);

/// How convertedReads replaces a read instead of converting it: given the tensor an attribute
/// read or a tensor constant of the graph holds, the value its use reads instead (inserted into
/// the graph at its insert point, right before that use), or nullptr to convert it as usual.
using ReadReplacement = std::function<torch::jit::Value*(torch::jit::Graph&, const at::Tensor&)>;

/// A copy of `graph` (a forward of `module`, first input `self`) that converts each tensor
/// attribute it reads to `to` right before each use (floating ones to `to.dtype`, all to
/// `to.device`), with retargetGraph applied. Run on `module` itself it computes what a converted
/// copy would, without one: the float64 check of a 6 GB float32 model needs no 12 GB copy, and
/// what it checks are the very float32 weights the module holds, upcast exactly. With
/// `replace`, the reads it gives a value for (attributes and tensor constants) read that value.
std::shared_ptr<torch::jit::Graph> convertedReads(const torch::jit::Module& module,
                                                  const std::shared_ptr<torch::jit::Graph>& graph,
                                                  const RetargetOptions& to, const ReadReplacement& replace = {});

/// Where a slot of `clone` (a module.clone of `original`, same slot order; slots it added come
/// last and are left alone) holds a floating tensor of its own equal in value to the original's
/// tensor in that slot (the original converted to the clone's dtype, which must be at least as
/// wide), the slot takes the original's tensor back. A fold's clone copies a tied storage whole,
/// and the names the plan leaves unchanged (a tied head when only the embedding is centred) need
/// no copy. Slots whose tensor lies in one of `keep` (storages) stay as they are. Returns how
/// many slots were given back.
int shareUnchanged(const torch::jit::Module& clone, const torch::jit::Module& original,
                   const std::set<const void*>& keep = {});

/// The storages (implementations) of every tensor attribute of `module` and its submodules.
std::set<const void*> tensorStorages(const torch::jit::Module& module);

/// Floating inputs to `dtype`, every input to `device`.
std::vector<at::Tensor> retargetInputs(const std::vector<at::Tensor>& inputs, const RetargetOptions& to);

/// The module's bytes as torch.jit.save writes them.
std::string serializeModule(const torch::jit::Module& module);

/// A fresh, independent module (own types and tensors) from `bytes`, on the CPU. Reads the bytes
/// where they are (an std::istringstream would first copy them: one more model's worth).
torch::jit::Module loadModule(const std::string& bytes);
/// A fresh copy of `module` (own types and tensors) through a temporary file, removed after the
/// load: no in-memory archive (which holds a large model's bytes two or three times over).
torch::jit::Module copyThroughFile(const torch::jit::Module& module);
torch::jit::Module loadModule(const std::string& bytes, torch::jit::ExtraFilesMap& extra, bool loadDebugFiles);

}  // namespace foldnorm
