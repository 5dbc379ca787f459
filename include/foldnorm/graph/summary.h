// What `foldnorm inspect` shows: op histogram, LayerNorms, parameters, tied groups, I/O shapes.
// Built from the Graph alone; JSON schema documented in docs/json-schema.md ("inspect").
#pragma once

#include <map>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "foldnorm/graph/graph.h"

namespace foldnorm {

/// One aten::layer_norm node, read from its arguments
/// (input, normalized_shape, weight?, bias?, eps, cudnn_enable).
struct LayerNormInfo {
  NodeId node = kNone;
  std::string modulePath;
  std::vector<int64_t> normalizedShape;
  double eps = 0;
  ParamId weight = kNone;  // kNone when absent (None) or not a parameter
  ParamId bias = kNone;
  bool hasWeight = false;
  bool hasBias = false;
  std::string inputShape;
};

/// All layer norms in graph order. Throws foldnorm::Error if one has a normalized_shape or eps
/// that is not a constant (the fold needs them exactly).
std::vector<LayerNormInfo> findLayerNorms(const Graph& graph);

struct ModelSummary {
  std::string path;
  std::map<std::string, int> opHistogram;  // dataflow ops only (plumbing counted apart)
  int plumbingNodes = 0;
  int nodes = 0;
  std::vector<LayerNormInfo> layerNorms;
  int64_t parameterCount = 0;  // elements of parameters (not buffers/constants), tied counted once
  int64_t parameterBytes = 0;
  int64_t bufferBytes = 0;
  std::vector<std::vector<std::string>> tiedGroups;  // attribute paths
  std::vector<std::pair<std::string, std::string>> inputs;   // name, "[2, 16] int64"
  std::vector<std::pair<std::string, std::string>> outputs;
  std::vector<std::string> inputSpecs;
};

ModelSummary summarize(const Graph& graph, const std::string& path,
                       const std::vector<std::string>& inputSpecs);
nlohmann::json toJson(const ModelSummary& summary);
std::string toText(const ModelSummary& summary);

}  // namespace foldnorm
