// torch.export programs (.pt2) give the verdicts of their traced twins. The fixtures are the
// corpus' architectures (tests/fixtures/export_models.py), so every verdict of a twin is one the
// corpus' float64 oracle confirmed; parity with it is the claim here. Per LayerNorm module path:
// fold or keep, and the parameters the plan centers.
#include <catch2/catch.hpp>

#include <fstream>
#include <nlohmann/json.hpp>

#include "foldnorm/analysis/analysis.h"
#include "foldnorm/common/error.h"
#include "foldnorm/import/export.h"
#include "foldnorm/import/export_archive.h"
#include "helpers.h"
#include "skip.h"

using namespace foldnorm;
using foldnorm::test::fixturePath;
using foldnorm::test::haveFixture;

namespace {

nlohmann::json exportManifest() {
  std::ifstream in(fixturePath("export_manifest.json"));
  if (!in) return nlohmann::json::object();
  return nlohmann::json::parse(in);
}

/// Per LN module path: "fold" or "keep (<reason>)"; the centered parameters by path; the
/// inserted centerings and the scaled centerings the plan makes.
struct Verdicts {
  std::map<std::string, std::string> layerNorms;
  std::set<std::string> centered;
  std::size_t count = 0, inserted = 0, scaled = 0;
};

Verdicts verdictsOf(const ImportedModel& model) {
  // Both folds beyond the paper on, as `foldnorm fold` runs on either file.
  AnalysisOptions options;
  options.scaleAbsorb = options.insertCentering = true;
  const auto result = analyzeFoldability(model.graph, options);
  Verdicts v;
  for (const auto& ln : result.layerNorms) {
    v.layerNorms[ln.info.modulePath] = ln.foldable ? "fold" : std::string("keep (") + toString(ln.reason) + ")";
    ++v.count;
  }
  // A tied storage is named by its first path: which name of it a program reads differs between
  // the importers (non-strict export reads one canonical placeholder for both users).
  const auto& g = model.graph;
  for (const auto& p : result.plan) {
    auto name = g.parameter(p.param).path;
    if (g.parameter(p.param).tiedGroup >= 0)
      for (auto other : g.tiedGroups().at(g.parameter(p.param).tiedGroup)) name = std::min(name, g.parameter(other).path);
    v.centered.insert(name);
    for (const auto& a : p.actions) v.scaled += a.scale != kNone;
  }
  for (const auto& ic : result.insertions) v.inserted += ic.inserted;
  return v;
}

}  // namespace

TEST_CASE("every exported architecture gives the verdicts of its traced twin", "[export]") {
  const auto manifest = exportManifest();
  if (manifest.empty()) return test::skipTest("no export fixtures (ctest fixture make_export_models)");
  std::size_t architectures = 0, folded = 0;
  std::set<std::string> libraries;
  for (const auto& [name, entry] : manifest.items()) {
    INFO(name);
    CHECK_FALSE(entry.contains("error"));
    if (entry.contains("error")) continue;
    const auto twin = entry.value("twin_of", name);
    REQUIRE(haveFixture(name + ".pt2"));
    REQUIRE(haveFixture(twin + ".pt"));
    ImportedModel exported, traced;
    REQUIRE_NOTHROW(exported = importModel(fixturePath(name + ".pt2")));
    REQUIRE(exported.exported != nullptr);
    CHECK(exported.torch == nullptr);
    REQUIRE_NOTHROW(traced = importModel(fixturePath(twin + ".pt")));
    CHECK(traced.torch != nullptr);
    const auto a = verdictsOf(exported), b = verdictsOf(traced);
    CHECK(a.count == b.count);
    CHECK(a.layerNorms == b.layerNorms);
    CHECK(a.inserted == b.inserted);
    if (name == twin) {  // variants (-kw, -decomposed): verdicts only
      CHECK(a.centered == b.centered);
      CHECK(a.scaled == b.scaled);
    }
    // The example inputs are the spec of the twin.
    CHECK(exported.inputSpecs.size() == traced.inputSpecs.size());
    for (std::size_t i = 0; i < std::min(exported.inputSpecs.size(), traced.inputSpecs.size()); ++i) {
      CHECK(exported.inputSpecs[i].shape == traced.inputSpecs[i].shape);
      CHECK(exported.inputSpecs[i].dtype == traced.inputSpecs[i].dtype);
    }
    ++architectures;
    for (const auto& [path, v] : a.layerNorms) folded += v == "fold";
    if (name.rfind("hf-", 0) == 0) libraries.insert("transformers");
    if (name.rfind("timm-", 0) == 0) libraries.insert("timm");
    if (name.rfind("tv-", 0) == 0) libraries.insert("torchvision");
  }
  CHECK(architectures >= 12);
  CHECK(libraries.size() == 3);
  CHECK(folded > 0);  // parity over all-keep verdicts would prove little
}

TEST_CASE("a .pt2 imports with shapes from the file, parameters by FQN, ties by storage and module paths",
          "[export]") {
  if (!haveFixture("tied.pt2")) return test::skipTest("no export fixtures (ctest fixture make_export_models)");
  const auto model = importModel(fixturePath("tied.pt2"));
  const auto& g = model.graph;
  REQUIRE(model.exported != nullptr);
  CHECK(model.specFromModel);
  REQUIRE(model.inputSpecs.size() == 1);
  // The example's shape and dtype; integers drawn from the example's own range.
  const auto& spec = model.inputSpecs[0];
  const auto& example = model.exported->archive->exampleInputs.at(0);
  CHECK(spec.shape == std::vector<int64_t>{2, 6});
  CHECK(spec.dtype == "int64");
  REQUIRE((spec.low && spec.high));
  CHECK(*spec.low == example.min().item<int64_t>());
  CHECK(*spec.high == example.max().item<int64_t>() + 1);
  // Every tensor value has a shape from tensor_values.
  for (const auto& v : g.values())
    if (v.kind == ValueKind::Tensor) CHECK(v.tensor.has_value());
  // The tie: emb.weight and head.weight, one group; the embedding and the linear both read
  // the placeholder of head.weight (non-strict export keeps one canonical name).
  REQUIRE(g.tiedGroups().size() == 1);
  std::set<std::string> tied;
  for (auto p : g.tiedGroups()[0]) tied.insert(g.parameter(p).path);
  CHECK(tied == std::set<std::string>{"emb.weight", "head.weight"});
  std::size_t lns = 0;
  for (const auto& n : g.nodes()) {
    if (n.kind == "aten::layer_norm") {
      ++lns;
      CHECK(n.modulePath == "ln");
      CHECK(model.exported->nodeName[n.id] == "layer_norm");
      CHECK(n.origin != kNone);
      const auto& nodes = model.exported->archive->program["graph_module"]["graph"]["nodes"];
      CHECK(nodes[n.origin]["target"] == "torch.ops.aten.layer_norm.default");
      CHECK(g.value(n.outputs[0]).tensor->shape == std::vector<int64_t>{2, 6, 16});
    }
    if (n.kind == "aten::embedding") CHECK(n.modulePath == "emb");
  }
  CHECK(lns == 1);
  const auto result = analyzeFoldability(g);
  REQUIRE(result.layerNorms.size() == 1);
  // The LN reads emb(ids) + pos: both leaves are centered (the table untied from the head).
  CHECK(result.layerNorms[0].foldable);
}

TEST_CASE("inspect shows the export's versions, and bad .pt2 input is one clear line", "[export]") {
  if (!haveFixture("tied.pt2")) return test::skipTest("no export fixtures (ctest fixture make_export_models)");
  const auto model = importModel(fixturePath("tied.pt2"));
  const auto& a = *model.exported->archive;
  CHECK(a.schemaMajor == kExportSchemaMajor);
  CHECK_FALSE(a.torchVersion.empty());
  ImportOptions wrong;
  wrong.inputs = {parseInputSpec("3x6:int64[0,50)")};
  CHECK_THROWS_WITH(importModel(fixturePath("tied.pt2"), wrong),
                    Catch::Contains("does not match the shape the program was exported with ([2, 6] int64)"));
}
