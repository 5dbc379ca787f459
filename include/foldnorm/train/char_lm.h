// Character-level language-model training for the tiny GPT: a byte corpus split into train and
// validation text, deterministic batches, and an Adam loop that records the loss curve.
//
// Everything that differs between runs is drawn from explicit seeds: batch positions from a
// private generator (dataSeed), dropout masks from the global generator reseeded with
// dropoutSeed at the start of the run. Models of the three norm variants draw their dropout masks
// in the same order and shapes, so runs that share the seeds see the same batches and the same
// masks, and differ only in their norms.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "foldnorm/train/tiny_gpt.h"

namespace foldnorm::train {

struct CharCorpus {
  std::string path;
  std::vector<unsigned char> alphabet;  // the distinct bytes, sorted; id = index
  torch::Tensor train;                  // int64 ids, the first (1 - valFraction) of the text
  torch::Tensor validation;             // int64 ids, the rest

  int64_t vocabSize() const { return static_cast<int64_t>(alphabet.size()); }
  int64_t size() const { return train.numel() + validation.numel(); }

  /// Reads `path` as bytes. Throws foldnorm::Error when the file cannot be read or is too short
  /// for windows of `window` tokens in both splits.
  static CharCorpus load(const std::string& path, double valFraction, int64_t window);
};

struct TrainOptions {
  int steps = 300;
  int64_t batch = 16;
  int64_t window = 64;  // tokens per sequence (<= the model's context)
  double learningRate = 3e-3;
  uint64_t dataSeed = 1;
  uint64_t dropoutSeed = 2;
  int evalEvery = 25;     // validation loss at step 0, every evalEvery steps and after the last
  int64_t evalWindows = 64;  // fixed, evenly spaced validation windows
};

struct LossCurve {
  std::vector<double> train;  // train[s]: the batch loss at step s, before that step's update
  std::vector<int> evalSteps;  // validation after this many updates
  std::vector<double> validation;
};

/// Trains `model` in place with Adam (default betas, no weight decay) and returns its curve.
/// The validation loss is measured in eval mode without autograd (dropout off; the RMSNorm
/// modules then run the project's foldnorm::rms_norm kernel). `progress`, when set, is called
/// after every step with the step number and its loss.
LossCurve trainCharLm(TinyGpt& model, const CharCorpus& corpus, const TrainOptions& options,
                      const std::function<void(int, double)>& progress = {});

/// Mean loss of `model` over `windows` evenly spaced windows of `ids` (eval mode, no autograd;
/// the model's training flag is restored).
double evaluateLoss(TinyGpt& model, const torch::Tensor& ids, int64_t window, int64_t windows,
                    int64_t batch);

/// Inputs and next-token targets [starts.size(), window] cut from `ids` at `starts`.
std::pair<torch::Tensor, torch::Tensor> windowsAt(const torch::Tensor& ids,
                                                  const torch::Tensor& starts, int64_t window);

}  // namespace foldnorm::train
