// The built-in model zoo: published architectures written with the LibTorch C++ API, randomly
// initialised, traced by LibTorch's own tracer and saved as TorchScript with their example-input
// spec embedded (kInputSpecExtraFile), so every other command can run on them without Python.
//
// Parameter and module names follow the reference implementation of each model (Hugging Face
// transformers, torchvision), so a saved zoo model reads like a Python trace of the original:
// `transformer.h.0.ln_1.weight`, `encoder.layers.encoder_layer_0.mlp.0.bias`. See
// docs/architectures.md for the structure, presets and parameter counts of each model.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace foldnorm {

struct ZooModelInfo {
  std::string name;         // e.g. "gpt2"
  std::string description;  // one line: what it is and which norm it uses
  std::string reference;    // the implementation whose names and forward pass it follows
  std::vector<std::string> presets;  // "tiny" first; then the published sizes
  std::string defaultPreset;         // what `foldnorm zoo NAME` builds without --preset
};

/// Every built-in model, in the order `foldnorm zoo list` shows them.
const std::vector<ZooModelInfo>& zooModels();

/// Throws foldnorm::Error listing the known models when `name` is not one of them.
const ZooModelInfo& findZooModel(const std::string& name);

struct ZooBuildOptions {
  std::string preset;  // empty: the model's default preset
  uint64_t seed = 0;   // weights and the example inputs used for tracing
  int64_t layers = 0;  // > 0: that many layers at the preset's width (a full-width model that fits)
  std::function<void(const std::string&)> progress;  // optional; one line per step
};

/// Builds, traces and saves model `name` to `outPath` (written to a temporary file next to it and
/// renamed, so a reader never sees half a model; an earlier file at `outPath` is replaced).
/// Throws foldnorm::Error for an unknown name or preset, naming the valid ones.
void buildZooModel(const std::string& name, const std::string& outPath,
                   const ZooBuildOptions& options = {});

}  // namespace foldnorm
