// Shared test helpers: IR models, paths of generated fixtures.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <string>

#include "foldnorm/analysis/analysis.h"
#include "foldnorm/import/torchscript.h"

namespace foldnorm::test {

struct Analyzed {
  ImportedModel model;
  AnalysisResult result;
  const LayerNormVerdict& ln(std::size_t i) const { return result.layerNorms.at(i); }
  /// The parameter paths the plan centers, sorted.
  std::vector<std::string> centered() const {
    std::vector<std::string> out;
    for (const auto& p : result.plan) out.push_back(model.graph.parameter(p.param).path);
    std::sort(out.begin(), out.end());
    return out;
  }
  const ParameterPlan* planFor(const std::string& path) const {
    for (const auto& p : result.plan)
      if (model.graph.parameter(p.param).path == path) return &p;
    return nullptr;
  }
};

inline Analyzed analyzeIr(const IrModel& ir, AnalysisOptions options = {}) {
  Analyzed a{importIrModel(ir), {}};
  a.result = analyzeFoldability(a.model.graph, options);
  return a;
}

/// Models traced by tests/fixtures/make_models.py (ctest fixture "models").
inline std::string fixturePath(const std::string& name) {
  const char* env = std::getenv("FOLDNORM_TEST_MODELS");
  std::filesystem::path dir = env ? env : FOLDNORM_TEST_MODELS;
  return (dir / name).string();
}

inline bool haveFixture(const std::string& name) { return std::filesystem::exists(fixturePath(name)); }

}  // namespace foldnorm::test
