// The .pt2 fold executes the plans beyond the paper as the TorchScript fold does: scaled
// centerings (LayerScale), an inserted centering (a BLOOM-like embedding-LN stream), the fused
// residual add + RMSNorm (foldnorm form only), and an untie whose read sits inside a
// wrap_with_set_grad_enabled subgraph. Each fold is verified by the interpreter in float64 (the
// oracle: <= 1e-9), written, read back and run on a second input against Python's outputs of the
// original (tests/fixtures/export_fold_models.py). tests/python/check_export_fold.py loads the
// same folds with torch.export.load.
#include <catch2/catch.hpp>

#include "export_fold_fixtures.h"
#include "foldnorm/fold/fold_export.h"
#include "foldnorm/import/export.h"
#include "foldnorm/import/export_archive.h"
#include "foldnorm/torch/export_interpreter.h"
#include "skip.h"

using namespace foldnorm;
using namespace foldnorm::test;
using nlohmann::json;

namespace {

std::size_t countTargets(const json& graph, const std::string& target) {
  std::size_t n = 0;
  for (const auto& node : graph.at("nodes")) {
    n += node.at("target") == target;
    for (const auto& in : node.at("inputs"))
      if (in.at("arg").contains("as_graph")) n += countTargets(in.at("arg").at("as_graph").at("graph"), target);
  }
  return n;
}

struct Folded {
  AnalysisResult analysis;
  FoldedExport fold;
};

/// Folds `name` (analysis options `ao`), checks the float64 verdict, saves, reads back and runs
/// the written program on the fixture's second input against Python's outputs of the original.
Folded foldChecked(const std::string& dir, const std::string& name, const AnalysisOptions& ao, ExportRmsOp op,
                   bool fuse, const std::string& out) {
  auto model = importExport(dir + "/" + name + ".pt2");
  Folded f{analyzeFoldability(model.graph, ao), {}};
  FoldOptions options;
  options.randomInputs = 2;
  options.fuseAddNorm = fuse;
  f.fold = foldExport(model, f.analysis, options, op);
  const auto& v = f.fold.report.verification;
  CHECK(v.ran);
  CHECK(v.float64Equivalent);
  CHECK(v.worstRelative64 <= 1e-9);
  CHECK(v.worstRelative32 <= 1e-4);
  CHECK(f.fold.report.folded.size() == f.analysis.foldableCount());
  saveFoldedExport(f.fold, model, out);
  auto back = readExportArchive(out);
  CHECK(back.program == f.fold.program);
  auto ref = readReference(dir + "/" + name + ".ref.pt");
  ExportInterpreter reread(back.program, stateOf(back));
  for (std::size_t set = 0; set < ref.inputs.size(); ++set) {
    auto got = reread.run(ref.inputs[set]);
    REQUIRE(got.size() == ref.outputs[set].size());
    for (std::size_t i = 0; i < got.size(); ++i)
      if (got[i].is_floating_point()) CHECK(relativeError(got[i], ref.outputs[set][i]) <= 1e-5);
  }
  return f;
}

AnalysisOptions paperOnly() {
  AnalysisOptions ao;
  ao.scaleAbsorb = ao.insertCentering = false;
  return ao;
}

}  // namespace

TEST_CASE("a .pt2 fold absorbs LayerScale, inserts a centering and fuses residual adds", "[python][export]") {
  auto dir = exportFixtures();
  if (dir.empty()) return skipTest("no Python here to export the fixtures with");
  ScratchDir out("foldnorm-export-plans");
  auto path = [&](const std::string& n) { return (out.path / (n + ".pt2")).string(); };

  SECTION("LayerScale: scaled centerings fold every LN") {
    auto paper = foldChecked(dir, "layerscale", paperOnly(), ExportRmsOp::Aten, true, path("ls-paper"));
    auto f = foldChecked(dir, "layerscale", {}, ExportRmsOp::Aten, true, path("ls"));
    CHECK(paper.analysis.foldableCount() < f.analysis.foldableCount());  // the scales are what it takes
    CHECK(f.analysis.foldableCount() == f.analysis.layerNorms.size());
    std::size_t scaled = 0;
    for (const auto& plan : f.analysis.plan)
      for (const auto& a : plan.actions) scaled += a.scale != kNone;
    CHECK(scaled >= 2);
    CHECK(f.fold.report.fusedAddNorms == 0);  // the aten form stays unfused
  }
  SECTION("an embedding-LN stream: one inserted centering frees the stack") {
    auto paper = foldChecked(dir, "embed_ln", paperOnly(), ExportRmsOp::Aten, true, path("emb-paper"));
    for (auto op : {ExportRmsOp::Aten, ExportRmsOp::Foldnorm}) {
      auto f = foldChecked(dir, "embed_ln", {}, op, true, path(op == ExportRmsOp::Aten ? "emb-aten" : "emb-op"));
      CHECK(f.fold.report.inserted.size() == 1);
      CHECK(f.analysis.foldableCount() == f.analysis.layerNorms.size());
      CHECK(paper.analysis.foldableCount() + 2 <= f.analysis.foldableCount());
      const auto& graph = f.fold.program["graph_module"]["graph"];
      CHECK(countTargets(graph, "torch.ops.aten.sub.Tensor") ==
            countTargets(paper.fold.program["graph_module"]["graph"], "torch.ops.aten.sub.Tensor") + 1);
    }
  }
  SECTION("fusion: each residual add read by a folded norm becomes foldnorm::add_rms_norm") {
    for (const std::string name : {"prenorm", "layerscale", "embed_ln"}) {
      INFO(name);
      auto f = foldChecked(dir, name, {}, ExportRmsOp::Foldnorm, true, path(name + "-fused"));
      const auto& graph = f.fold.program["graph_module"]["graph"];
      CHECK(f.fold.report.fusedAddNorms > 0);
      CHECK(countTargets(graph, "torch.ops.foldnorm.add_rms_norm.default") ==
            static_cast<std::size_t>(f.fold.report.fusedAddNorms));
      CHECK(countTargets(graph, "torch.ops.foldnorm.rms_norm.default") + f.fold.report.fusedAddNorms ==
            f.analysis.foldableCount());
      auto unfused = foldChecked(dir, name, {}, ExportRmsOp::Foldnorm, false, path(name + "-unfused"));
      CHECK(unfused.fold.report.fusedAddNorms == 0);
      CHECK(countTargets(unfused.fold.program["graph_module"]["graph"], "torch.ops.foldnorm.add_rms_norm.default") == 0);
    }
  }
  SECTION("an untie whose read is inside wrap_with_set_grad_enabled") {
    auto f = foldChecked(dir, "grad_tied", {}, ExportRmsOp::Aten, true, path("grad-tied"));
    REQUIRE(f.analysis.foldableCount() == 1);
    CHECK(f.fold.report.untied.size() == 1);
    CHECK(f.fold.added.size() == 1);
    // The centered copy enters the subgraph as one more operand; the head outside keeps the original.
    const auto& hop = f.fold.program["graph_module"]["graph"]["nodes"][0];
    REQUIRE(hop["target"] == "torch.ops.higher_order.wrap_with_set_grad_enabled");
    const auto& sub = hop["inputs"][1]["arg"]["as_graph"]["graph"];
    CHECK(hop["inputs"].size() == 5);
    CHECK(sub["inputs"].size() == 3);
  }
}
