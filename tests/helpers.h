// Shared test helpers: IR models, paths of generated fixtures.
#pragma once

#include <dirent.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "foldnorm/analysis/analysis.h"
#include "foldnorm/import/torchscript.h"

namespace foldnorm::test {

/// Removes folder `dir` and the files in it with POSIX calls (no subprocess): libtorch.so exports
/// its own std::filesystem::remove_all, which crashes in this build. Test folders are flat.
inline void removeFlatDir(const std::filesystem::path& dir) {
  if (DIR* d = ::opendir(dir.c_str())) {
    while (const dirent* entry = ::readdir(d)) {
      std::string name = entry->d_name;
      if (name != "." && name != "..") ::unlink((dir / name).c_str());
    }
    ::closedir(d);
  }
  ::rmdir(dir.c_str());
}

/// The id of a process that has just ended (a child that exits at once, reaped): what a save
/// killed before its rename leaves in a temporary file's name.
inline long deadProcessId() {
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ::waitpid(child, nullptr, 0);
  return static_cast<long>(child);
}

/// A fresh folder per object (name prefix, pid, counter), removed with its files at the end.
struct ScratchDir {
  explicit ScratchDir(const std::string& prefix = "foldnorm-test") {
    static int counter = 0;
    path = std::filesystem::temp_directory_path() /
           (prefix + "-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
    std::filesystem::create_directories(path);
  }
  ~ScratchDir() { removeFlatDir(path); }
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

// Three blocks, one verdict each:
//  h.0: fc -> ln. The linear is a leaf; its shift reaches only ln (absorbed): foldable.
//  h.1: ln(fc(g) + g) with g = gelu(h.0's LN output): gelu breaks mean-zero: not foldable.
//  h.2: fc -> ln, and fc's output is also returned: centering fc would change that output,
//       so the leaf is unsafe and ln is not foldable (the output node is the unsafe consumer).
inline IrModel threeBlocks() {
  std::string ir = "graph(%x : Tensor";
  std::vector<std::pair<std::string, InputSpec>> params;
  for (int b = 0; b < 3; ++b) {
    std::string p = "%h__" + std::to_string(b) + "__";
    ir += ", " + p + "fc__weight : Tensor, " + p + "fc__bias : Tensor, " + p + "ln__weight : Tensor, " + p +
          "ln__bias : Tensor";
    for (const char* n : {"fc__weight", "fc__bias", "ln__weight", "ln__bias"})
      params.emplace_back(p.substr(1) + n, parseInputSpec(std::string(n) == "fc__weight" ? "8x8" : "8"));
  }
  ir += "):\n"
        "  %shape : int[] = prim::Constant[value=[8]]()\n"
        "  %eps : float = prim::Constant[value=1.0000000000000001e-05]()\n"
        "  %cudnn : bool = prim::Constant[value=0]()\n"
        "  %one : int = prim::Constant[value=1]()\n"
        "  %approx : str = prim::Constant[value=\"none\"]()\n"
        "  %y0 : Tensor = aten::linear(%x, %h__0__fc__weight, %h__0__fc__bias)\n"
        "  %z0 : Tensor = aten::layer_norm(%y0, %shape, %h__0__ln__weight, %h__0__ln__bias, %eps, %cudnn)\n"
        "  %g : Tensor = aten::gelu(%z0, %approx)\n"
        "  %y1 : Tensor = aten::linear(%g, %h__1__fc__weight, %h__1__fc__bias)\n"
        "  %r1 : Tensor = aten::add(%y1, %g, %one)\n"
        "  %z1 : Tensor = aten::layer_norm(%r1, %shape, %h__1__ln__weight, %h__1__ln__bias, %eps, %cudnn)\n"
        "  %y2 : Tensor = aten::linear(%z1, %h__2__fc__weight, %h__2__fc__bias)\n"
        "  %z2 : Tensor = aten::layer_norm(%y2, %shape, %h__2__ln__weight, %h__2__ln__bias, %eps, %cudnn)\n"
        "  %out : (Tensor, Tensor) = prim::TupleConstruct(%z2, %y2)\n"
        "  return (%out)\n";
  return {ir, {parseInputSpec("2x3x8")}, params};
}

/// Models traced by tests/fixtures/make_models.py (ctest fixture "models").
inline std::string fixturePath(const std::string& name) {
  const char* env = std::getenv("FOLDNORM_TEST_MODELS");
  std::filesystem::path dir = env ? env : FOLDNORM_TEST_MODELS;
  return (dir / name).string();
}

inline bool haveFixture(const std::string& name) { return std::filesystem::exists(fixturePath(name)); }

}  // namespace foldnorm::test
