// Running a torch.export program (.pt2, models/model.json) without Python: each node's
// `torch.ops.<ns>.<op>.<overload>` target is looked up in the dispatcher, its arguments are
// bound by the op's schema from the serialized NamedArguments (schema defaults for the omitted
// ones), and the op is called boxed. The fold verifies with it (float32 and float64) and the
// benchmark times with it.
//
//   program JSON ──compile──▶ steps (operator handle + argument sources) ──run(inputs)──▶ outputs
//
// What runs: ATen and registered custom ops (foldnorm::rms_norm once libfoldnorm_ops is loaded),
// `_operator.getitem` and the `_operator`/`torch.sym_*` scalar helpers on concrete ints,
// `higher_order.wrap_with_set_grad_enabled` (its subgraph, inline). Symbolic sizes are the
// concrete values the sym_size nodes compute, or the recorded hints. Anything else is refused
// at compile time with an Error naming the node.
//
// Retargeting (the float64 oracle): floating state and inputs are cast to `dtype`, dtype
// arguments that name float32/float16/bfloat16 are rewritten to it, device arguments name the
// run's device, and factory ops that take the default dtype get it (the default dtype is set
// for the duration of a run), as an export made in that dtype would have them.
#pragma once

#include <torch/script.h>

#include <map>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

namespace foldnorm {

struct ExportRunOptions {
  std::optional<at::ScalarType> dtype;  // floating tensors and float dtype arguments become this
  c10::Device device{c10::kCPU};
};

/// A compiled ExportedProgram. Copies share the compiled steps and the state tensors.
class ExportInterpreter {
 public:
  /// `program`: the ExportedProgram JSON (the whole models/model.json). `state`: the tensors the
  /// signature lifts, by parameter / buffer / tensor-constant name (FQN). Throws foldnorm::Error
  /// naming the node for an op it cannot run, or naming a missing state entry.
  ExportInterpreter(const nlohmann::json& program, const std::map<std::string, at::Tensor>& state,
                    const ExportRunOptions& options = {});

  /// Runs on the user inputs (in the signature's order) and returns the user outputs with
  /// tuples and lists flattened; int/float/bool outputs become 0-dim tensors.
  std::vector<at::Tensor> run(const std::vector<at::Tensor>& userInputs) const;

  /// Names of the user inputs, in order.
  const std::vector<std::string>& userInputNames() const;

 private:
  struct Program;
  std::shared_ptr<const Program> program_;
};

/// The dispatcher name and overload of a node target: "torch.ops.aten.add.Tensor" ->
/// {"aten::add", "Tensor"}; "...default" -> overload "". nullopt for other targets.
std::optional<std::pair<std::string, std::string>> dispatcherName(const std::string& target);

/// c10::ScalarType of a serialized ScalarType code (schema.py: FLOAT = 7, ...), and back.
at::ScalarType scalarTypeFromExport(int64_t code);
int64_t exportScalarTypeCode(at::ScalarType type);

}  // namespace foldnorm
