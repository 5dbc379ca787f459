// A fold plan over parameter-name patterns (docs/method.md section 11, issue 29): made by the Python
// side from a small capture of the architecture (python/foldnorm/checkpoint.py, schema
// foldnorm-checkpoint-plan/1), checked here against a checkpoint's index and resolved into the
// concrete tensors to center, copy and untie, and the LayerNorm modules that become RMSNorm.
//
// A pattern names one tensor, or one per layer with `{i}` standing for the layer index
// ("model.decoder.layers.{i}.fc2.weight"). Against the checkpoint: the layer count is read from
// the index (names under the layer prefix, 0..L-1 with none missing) and, where the plan names
// its config key, must equal the config's; every pattern matches for every layer, with the rank
// the capture saw and an axis length its groups divide; every LayerNorm to swap has its weight
// (or bias) in the index. Anything else is refused in one line naming the tensor or module.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "foldnorm/checkpoint/safetensors.h"

namespace foldnorm::checkpoint {

inline constexpr const char* kPlanSchema = "foldnorm-checkpoint-plan/1";

struct CenterPattern {
  std::string pattern;                         // "model.decoder.layers.{i}.fc2.weight"
  int rank = 0;
  std::vector<std::pair<int, int>> center;     // (axis, groups), applied in order
  bool optional = false;  // another name of a tied storage centered in place: saved checkpoints may omit it
};

struct UntiePattern {
  std::string name;       // the head that keeps the original ("lm_head.weight")
  std::string copyOf;     // the tensor it was tied to, centered here ("model.decoder.embed_tokens.weight")
};

struct NormPattern {
  std::string module;     // "model.decoder.layers.{i}.final_layer_norm"
  bool hasWeight = true, hasBias = true;
};

struct CheckpointPlan {
  nlohmann::json raw;                          // the plan as read (written beside the fold)
  std::string architecture;                    // "OPTForCausalLM" (config.architectures[0])
  std::string layerPrefix;                     // "model.decoder.layers" ("" when layer-free)
  std::string layerCountKey;                   // config.json key of the layer count ("" unknown)
  std::string baseModelPrefix;                 // "model": checkpoints saved without it still match
  std::vector<CenterPattern> center;
  std::vector<UntiePattern> untie;
  std::vector<NormPattern> rmsNorms;
};

/// Parses a plan (schema foldnorm-checkpoint-plan/1); refuses, in one line, the kinds of plan
/// entry a checkpoint cannot take tensor by tensor (scale absorptions, inserted centerings,
/// redirected reads: they need another tensor's values or a change of the model's code).
CheckpointPlan parsePlan(const nlohmann::json& j, const std::string& where);
CheckpointPlan readPlan(const std::string& path);

/// One concrete tensor to center.
struct CenterTensor {
  std::string name;
  std::vector<std::pair<int, int>> center;
};

/// The plan against one checkpoint.
struct ResolvedPlan {
  int layers = 0;                              // L, from the index
  bool stripPrefix = false;                    // the checkpoint names lack baseModelPrefix
  std::vector<CenterTensor> center;            // by name
  std::vector<std::pair<std::string, std::string>> untie;  // (new name, source tensor)
  std::vector<std::string> rmsNorms;           // module paths (the model's names, with prefix)
  int64_t centerBytes = 0, untieBytes = 0;
};

/// Checks `plan` against `index` (and the source config.json, for its layer count); throws
/// foldnorm::Error naming the first tensor, layer or module that does not fit.
ResolvedPlan resolvePlan(const CheckpointPlan& plan, const CheckpointIndex& index, const nlohmann::json& config);

/// `pattern` with `{i}` replaced by `layer`.
std::string instantiate(const std::string& pattern, int layer);

}  // namespace foldnorm::checkpoint
