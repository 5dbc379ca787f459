// Shared test helpers: IR models, paths of generated fixtures.
#pragma once

#include <dirent.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "foldnorm/analysis/analysis.h"
#include "foldnorm/import/torchscript.h"

namespace foldnorm::test {

/// A fresh folder per object (name prefix, pid, counter), removed with its files at the end with
/// POSIX calls: libtorch.so exports its own std::filesystem::remove_all, which crashes in this build.
struct ScratchDir {
  explicit ScratchDir(const std::string& prefix = "foldnorm-test") {
    static int counter = 0;
    path = std::filesystem::temp_directory_path() /
           (prefix + "-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
    std::filesystem::create_directories(path);
  }
  ~ScratchDir() {
    if (DIR* dir = ::opendir(path.c_str())) {
      while (const dirent* entry = ::readdir(dir)) {
        std::string name = entry->d_name;
        if (name != "." && name != "..") ::unlink((path / name).c_str());
      }
      ::closedir(dir);
    }
    ::rmdir(path.c_str());
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  std::filesystem::path path;
};

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

/// IR lines for `%out = aten::layer_norm(%in)` over a last dim of size d, with the weight and bias
/// graph inputs %ln_w and %ln_b (declare them as IrModel parameters).
inline std::string layerNorm(const std::string& in, const std::string& out, int d) {
  return "  %" + out + "_shape : int[] = prim::Constant[value=[" + std::to_string(d) + "]]()\n" +
         "  %" + out + "_eps : float = prim::Constant[value=1.0000000000000001e-05]()\n" +
         "  %" + out + "_cudnn : bool = prim::Constant[value=0]()\n" +
         "  %" + out + " : Tensor = aten::layer_norm(%" + in + ", %" + out + "_shape, %ln_w, %ln_b, %" +
         out + "_eps, %" + out + "_cudnn)\n";
}

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
