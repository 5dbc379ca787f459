// The folded view (render/folded_view.h) on a real saved fold: every kind of mark the fold can
// leave is found again in the re-imported file. Here: an inserted centering (docs/method.md section 8),
// whose nodes carry the source name kInsertedCenteringSource, and the LNs it frees.
#include <catch2/catch.hpp>
#include <unistd.h>

#include <cstdio>
#include <filesystem>

#include "foldnorm/fold/fold.h"
#include "foldnorm/import/torchscript.h"
#include "foldnorm/render/folded_view.h"
#include "foldnorm/torch/torch_model.h"
#include "helpers.h"

using namespace foldnorm;

TEST_CASE("an inserted centering is named in the saved file and marked on the folded view", "[fold][insert][render]") {
  // e = LN0(x); r = e + linear(LN1(e)); LN2(r): the stream starts at LN0's output, so one
  // centering after LN0 frees LN1 and LN2 (tests/test_beyond_paper.cpp checks the analysis).
  auto spec = [](const char* s) { return parseInputSpec(s); };
  IrModel m{"graph(%x : Tensor, %w : Tensor, %b : Tensor, %lnw : Tensor, %lnb : Tensor):\n"
            "  %s : int[] = prim::Constant[value=[8]]()\n"
            "  %eps : float = prim::Constant[value=1.0000000000000001e-05]()\n"
            "  %f : bool = prim::Constant[value=0]()\n"
            "  %one : int = prim::Constant[value=1]()\n"
            "  %e : Tensor = aten::layer_norm(%x, %s, %lnw, %lnb, %eps, %f)\n"
            "  %n1 : Tensor = aten::layer_norm(%e, %s, %lnw, %lnb, %eps, %f)\n"
            "  %a : Tensor = aten::linear(%n1, %w, %b)\n"
            "  %r : Tensor = aten::add(%e, %a, %one)\n"
            "  %z : Tensor = aten::layer_norm(%r, %s, %lnw, %lnb, %eps, %f)\n"
            "  return (%z)\n",
            {spec("2x3x8")},
            {{"w", spec("8x8")}, {"b", spec("8")}, {"lnw", spec("8")}, {"lnb", spec("8")}}};
  auto a = test::analyzeIr(m);
  REQUIRE(a.result.insertions.size() == 1);
  REQUIRE(a.result.foldableCount() == 2);
  auto folded = foldModel(a.model, a.result);
  REQUIRE(folded.report.verification.float64Equivalent);
  auto dir = std::filesystem::temp_directory_path() / ("foldnorm-folded-view-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  a.model.path = (dir / "input.pt").string();
  a.model.torch->module.save(a.model.path);
  const auto out = (dir / "folded.pt").string();
  saveFolded(folded, a.model, out);
  auto reloaded = importTorchScript(out);
  std::vector<std::string> inserted;
  for (const auto& n : reloaded.graph.nodes())
    if (n.sourceLocation.rfind(kInsertedCenteringSource, 0) == 0) inserted.push_back(n.kind);
  CHECK(inserted == std::vector<std::string>{"aten::mean", "aten::sub"});

  auto marks = render::foldedMarksFor(a.model.graph, a.result, reloaded.graph);
  render::SceneOptions options;
  options.legend = false;
  const auto reanalysed = analyzeFoldability(reloaded.graph);
  auto scene = render::buildScene(reloaded.graph, reanalysed, options);
  auto counts = render::markFoldedScene(scene, reloaded.graph, marks);
  CHECK(counts["inserted"] == 1);
  CHECK(counts["folded"] + counts["fused"] == 2);
  // (std::filesystem::remove_all binds to a copy inside libtorch.so that crashes: plain calls.)
  std::remove(a.model.path.c_str());
  std::remove(out.c_str());
  ::rmdir(dir.c_str());
}
