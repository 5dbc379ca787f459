// The export corpus twins that fold beyond the paper (LayerScale: scaled centerings; BLOOM,
// SegFormer: inserted centerings; tests/fixtures/export_models.py) folded as .pt2 and verified by
// the interpreter in float64, with the fold counts of their traced twins' TorchScript fold; and
// hf-beit, whose export writes in place through views (functionalized at import): its counts
// equal its twin's too (0 of 5: its residual stream is a model output).
#include <catch2/catch.hpp>

#include <fstream>
#include <nlohmann/json.hpp>

#include "foldnorm/fold/fold.h"
#include "foldnorm/fold/fold_export.h"
#include "foldnorm/import/export.h"
#include "helpers.h"
#include "skip.h"

using namespace foldnorm;
using foldnorm::test::fixturePath;

namespace {

std::size_t scaledActions(const AnalysisResult& r) {
  std::size_t n = 0;
  for (const auto& p : r.plan)
    for (const auto& a : p.actions) n += a.scale != kNone;
  return n;
}

bool beyondPaper(const AnalysisResult& r) {
  for (const auto& ic : r.insertions)
    if (ic.inserted) return true;
  for (const auto& p : r.plan)
    for (const auto& a : p.actions)
      if (a.scale != kNone) return true;
  return false;
}

}  // namespace

TEST_CASE("export corpus twins with scaled or inserted centerings fold and verify as .pt2", "[export]") {
  std::ifstream in(fixturePath("export_manifest.json"));
  if (!in) return test::skipTest("no export fixtures (ctest fixture make_export_models)");
  const auto manifest = nlohmann::json::parse(in);
  std::size_t folded = 0, scaledModels = 0, insertedModels = 0;
  bool sawBeit = false;
  for (const auto& [name, entry] : manifest.items()) {
    if (entry.contains("error") || entry.contains("twin_of")) continue;  // variants: the parity test
    auto model = importModel(fixturePath(name + ".pt2"));
    const auto analysis = analyzeFoldability(model.graph);
    // hf-beit's export writes in place through views: folded (and compared) whatever its plan.
    if (!beyondPaper(analysis) && name != "hf-beit") continue;
    INFO(name);
    for (const auto& ic : analysis.insertions) insertedModels += ic.inserted;
    for (const auto& p : analysis.plan)
      for (const auto& a : p.actions) scaledModels += a.scale != kNone;
    FoldOptions options;
    options.randomInputs = 1;
    options.rmsOp = RmsOp::Foldnorm;
    auto fold = foldExport(model, analysis, options);
    const auto& v = fold.report.verification;
    CHECK(v.float64Equivalent);
    CHECK(v.worstRelative64 <= 1e-9);
    CHECK(fold.report.folded.size() == analysis.foldableCount());
    // The traced twin's TorchScript fold folds as many (its own verification passing too).
    auto traced = importModel(fixturePath(name + ".pt"));
    const auto tracedAnalysis = analyzeFoldability(traced.graph);
    FoldOptions quick;
    quick.verify = false;
    auto tracedFold = foldModel(traced, tracedAnalysis, quick);
    CHECK(tracedFold.report.folded.size() == fold.report.folded.size());
    CHECK(tracedFold.report.inserted.size() == fold.report.inserted.size());
    CHECK(scaledActions(tracedAnalysis) == scaledActions(analysis));
    if (name == "hf-beit") sawBeit = true;  // writes in place through views: functionalized at import
    ++folded;
  }
  CHECK(folded >= 4);
  CHECK(sawBeit);
  CHECK(scaledModels > 0);
  CHECK(insertedModels > 0);
}
