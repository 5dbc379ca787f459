// Folding a Hugging Face safetensors checkpoint tensor by tensor (issue 29, docs/method.md section 11).
//
// The plan (plan.h) is checked against the checkpoint's index; then each shard is written anew:
// planned tensors are read one at a time, centered in float64 arithmetic (their own dtype in
// memory: one tensor plus its axis means) and written back in their dtype; the rest are copied
// byte for byte through a fixed buffer; a tied head the plan unties is written as its own tensor
// (the original bytes of the tensor it was tied to) and config.json's tie_word_embeddings set to
// false. Everything goes to a hidden sibling folder renamed into place at the end: a failure or an
// interruption (`interrupted` returning true, SIGINT/SIGTERM in the CLI) removes it, and the
// input folder is only read. Peak memory: the largest centered tensor, its means, a 16 MB buffer.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>

#include "foldnorm/checkpoint/plan.h"

namespace foldnorm::checkpoint {

inline constexpr const char* kResultSchema = "foldnorm-fold-checkpoint/1";
/// The plan written beside the folded weights: which modules become RMSNorm (load_folded reads it).
inline constexpr const char* kFoldedPlanFile = "foldnorm_plan.json";

struct FoldCheckpointOptions {
  bool dryRun = false;                              // check and report from the index; read no weights
  std::function<void(const std::string&)> progress; // one line per update (about once a second)
  std::function<bool()> interrupted;                // polled between chunks: true stops and cleans up
};

/// Folds the checkpoint in `src` into the new folder `out` (which must not exist) as `plan` says.
/// Returns the result (schema foldnorm-fold-checkpoint/1): what changed, bytes, time, and the worst
/// |sum| / sum|x| along a centered axis of the written values (float64). Throws foldnorm::Error in
/// one line for anything the checkpoint, the plan or the output path does not allow.
nlohmann::json foldCheckpoint(const std::string& src, const std::string& out, const CheckpointPlan& plan,
                              const FoldCheckpointOptions& options);

/// Refuses (one line) an output folder that exists, whose parent does not, or inside `src`.
void checkOutputFolder(const std::string& src, const std::string& out);

/// Centers `count` elements of a `dtype` tensor of `shape` in place, for each (axis, groups) in
/// order (float64 arithmetic, one rounding to the dtype at the end); returns the worst
/// |sum| / sum|x| of a centered group of the result. Exposed for the unit tests.
double centerInPlace(void* data, const std::string& dtype, const std::vector<int64_t>& shape,
                     const std::vector<std::pair<int, int>>& actions);

/// The text report of a result (what the CLI prints without --json).
std::string resultText(const nlohmann::json& result);

}  // namespace foldnorm::checkpoint
