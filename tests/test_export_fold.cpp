// The .pt2 fold in C++: the fixture programs of tests/fixtures/export_fold_models.py folded
// (both forms of the RMSNorm), verified in float64 by the interpreter, written atomically and
// read back as written. tests/python/check_export_fold.py loads the results in Python.
#include <ATen/ATen.h>
#include <catch2/catch.hpp>
#include <filesystem>

#include "export_fold_fixtures.h"
#include "foldnorm/common/error.h"
#include "foldnorm/fold/fold_export.h"
#include "foldnorm/import/export.h"
#include "foldnorm/import/export_archive.h"
#include "foldnorm/interpreter/export_interpreter.h"
#include "skip.h"

using namespace foldnorm;
using namespace foldnorm::test;

TEST_CASE("a folded .pt2 is equivalent in float64 and reads back as written", "[python][export]") {
  auto dir = exportFixtures();
  if (dir.empty()) return skipTest("no Python here to export the fixtures with");
  ScratchDir out("foldnorm-export-fold");
  for (const auto& name : kExportPrograms) {
    for (auto op : {RmsOp::Aten, RmsOp::Foldnorm}) {
      INFO(name << (op == RmsOp::Aten ? " (aten.rms_norm)" : " (foldnorm::rms_norm)"));
      auto model = importExport(dir + "/" + name + ".pt2");
      auto analysis = analyzeFoldability(model.graph);
      FoldOptions options;
      options.randomInputs = 2;
      options.rmsOp = op;
      auto folded = foldExport(model, analysis, options);
      const auto& v = folded.report.verification;
      REQUIRE(v.ran);
      CHECK(v.float64Equivalent);
      CHECK(v.worstRelative64 <= 1e-9);
      CHECK(v.worstRelative32 <= 1e-4);
      CHECK(folded.report.folded.size() == analysis.foldableCount());
      // The saved file in float64 (the float32 state the archive gets, run in float64), one
      // comparison per output as for float32 and float64, within its bound.
      std::size_t saved = 0, f64 = 0;
      for (const auto& c : v.checks) {
        saved += c.dtype == "saved-float64";
        f64 += c.dtype == "float64";
      }
      CHECK(saved == f64);
      CHECK(saved > 0);
      CHECK(v.savedWithinBound);
      CHECK(v.worstRelativeSaved64 <= options.savedFloat64Bound);
      CHECK(v.unexplainedFlips == 0);
      CHECK(v.passed());
      // The report names the op the LNs became.
      CHECK(folded.report.rmsOp == op);
      CHECK_THAT(toText(folded.report), Catch::Contains(op == RmsOp::Aten ? "into aten::rms_norm (+ a bias add"
                                                                               : "into foldnorm::rms_norm;"));
      CHECK(toJson(folded.report)["rms_op"] == (op == RmsOp::Aten ? "aten" : "foldnorm"));
      // The fold changed something real: every fixture has a foldable LayerNorm.
      CHECK(analysis.foldableCount() > 0);
      auto path = (out.path / (name + (op == RmsOp::Aten ? "-aten" : "-op") + ".pt2")).string();
      saveFoldedExport(folded, model, path);
      auto back = readExportArchive(path);
      CHECK(back.program == folded.program);
      std::size_t lns = 0, rms = 0;
      for (const auto& n : back.program["graph_module"]["graph"]["nodes"]) {
        auto t = n["target"].get<std::string>();
        lns += t.find("layer_norm") != std::string::npos;
        rms += t.find("rms_norm") != std::string::npos;
      }
      CHECK(rms == analysis.foldableCount());
      CHECK(lns == analysis.layerNorms.size() - analysis.foldableCount());
      for (const auto& [fqn, t] : folded.state) {
        auto* entry = back.find(fqn);
        REQUIRE(entry != nullptr);
        CHECK(entry->tensor.equal(t));
      }
      // The written program runs in C++ and gives the folded outputs.
      ExportInterpreter reread(back.program, stateOf(back));
      ExportInterpreter original(model.exported->archive->program, stateOf(*model.exported->archive));
      auto ref = readReference(dir + "/" + name + ".ref.pt");
      auto a = reread.run(ref.inputs[1]), b = original.run(ref.inputs[1]);
      REQUIRE(a.size() == b.size());
      for (std::size_t i = 0; i < a.size(); ++i)
        if (b[i].is_floating_point()) CHECK(relativeError(a[i], b[i]) <= 1e-4);
    }
  }
}

TEST_CASE("a .pt2 fold never writes over its input", "[python][export]") {
  auto dir = exportFixtures();
  if (dir.empty()) return skipTest("no Python here to export the fixtures with");
  auto path = dir + "/tied_lm.pt2";
  auto model = importExport(path);
  auto analysis = analyzeFoldability(model.graph);
  FoldOptions options;
  options.verify = false;
  auto folded = foldExport(model, analysis, options);
  auto size = std::filesystem::file_size(path);
  CHECK_THROWS_WITH(saveFoldedExport(folded, model, path), Catch::Contains("refusing to overwrite"));
  CHECK(std::filesystem::file_size(path) == size);
}

TEST_CASE("a .pt2 fold's verification counts prediction rows and catches a perturbed saved state",
          "[python][export]") {
  auto dir = exportFixtures();
  if (dir.empty()) return skipTest("no Python here to export the fixtures with");
  // prenorm: a language model whose logits [batch, seq, vocab] are predictions (argmax rows).
  auto model = importExport(dir + "/prenorm.pt2");
  auto analysis = analyzeFoldability(model.graph);
  REQUIRE(analysis.foldableCount() > 0);
  FoldOptions options;
  options.randomInputs = 2;
  auto folded = foldExport(model, analysis, options);
  const auto& v = folded.report.verification;
  REQUIRE(v.ran);
  CHECK(v.predictionRows > 0);
  CHECK(v.unexplainedFlips == 0);
  CHECK(v.savedWithinBound);
  CHECK(v.passed());
  // Verifying the fold again gives the same figures (the verification reads only the fold).
  auto again = verifyExportFold(model, analysis, folded, options);
  CHECK(again.savedWithinBound);
  CHECK(again.worstRelativeSaved64 <= 2 * v.worstRelativeSaved64);
  CHECK(again.predictionRows == v.predictionRows);

  // A saved state that is not the plan's: one centered weight replaced by other values of its
  // size. The float64 verdict (the plan, recomputed from the original) stays exact, but the saved
  // file in float64 is far outside its bound, and the flipped predictions are no float32 rounding.
  REQUIRE(!folded.report.centered.empty());
  std::string victim;
  for (const auto& name : folded.report.centered)
    if (folded.state.count(name) && folded.state.at(name).dim() == 2) victim = name;
  REQUIRE(!victim.empty());
  INFO("perturbed " << victim);
  auto& t = folded.state.at(victim);
  at::manual_seed(7);
  t = at::randn(t.sizes(), t.options()) * 4 * t.abs().max();
  auto bad = verifyExportFold(model, analysis, folded, options);
  CHECK(bad.float64Equivalent);
  CHECK_FALSE(bad.savedWithinBound);
  CHECK(bad.worstRelativeSaved64 > options.savedFloat64Bound);
  CHECK(bad.flippedRows > 0);
  CHECK(bad.unexplainedFlips > 0);
  CHECK_FALSE(bad.passed());
  REQUIRE(!bad.worstFlips.empty());
  CHECK_FALSE(bad.worstFlips.front().withinRounding());
  folded.report.verification = bad;
  const auto text = toText(folded.report);
  CHECK_THAT(text, Catch::Contains("saved file in float64: worst relative error"));
  CHECK_THAT(text, Catch::Contains("(ABOVE the bound"));
  CHECK_THAT(text, Catch::Contains("NOT within float32 rounding"));
  CHECK(toJson(folded.report)["verification"]["saved_float64"]["within_bound"] == false);
}
