// Models none of us wrote (torchvision, transformers) and hand-written edge cases, traced in Python
// by tests/fixtures/make_models.py. Its manifest.json states, per fixture, which LNs the method
// predicts foldable (checked there against a float64 oracle). Here the C++ analysis must agree,
// and every fold must verify in float64.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "foldnorm/common/error.h"
#include "foldnorm/fold/fold.h"
#include "helpers.h"
#include "skip.h"

using namespace foldnorm;
using foldnorm::test::fixturePath;
using foldnorm::test::haveFixture;

namespace {

nlohmann::json manifest() {
  std::ifstream in(fixturePath("manifest.json"));
  if (!in) FAIL("no fixture manifest at " << fixturePath("manifest.json") << " (ctest fixture make_test_models)");
  return nlohmann::json::parse(in);
}

std::vector<std::string> fixtureNames(const std::string& group) {
  std::vector<std::string> names;
  auto m = manifest();
  for (auto& [name, f] : m["fixtures"].items())
    if (f.value("group", "") == group && f.contains("expectation") && f.value("status", "ok") != "skipped" &&
        name != "scripted_control_flow")
      names.push_back(name);
  return names;
}

void checkFixture(const std::string& name) {
  auto m = manifest();
  const auto& f = m["fixtures"][name];
  INFO("fixture " << name << ": " << f.value("origin", ""));
  REQUIRE(haveFixture(f["file"].get<std::string>()));
  auto model = importTorchScript(fixturePath(f["file"]));
  auto result = analyzeFoldability(model.graph);
  std::set<std::string> expected, got;
  for (const auto& p : f["expectation"]["foldable"]) expected.insert(p.get<std::string>());
  std::string explanations;
  for (const auto& v : result.layerNorms) {
    if (v.foldable) got.insert(v.info.modulePath);
    else explanations += v.info.modulePath + ": " + v.explanation + "\n";
  }
  INFO("not foldable here:\n" << explanations);
  CHECK(got == expected);
  CHECK(result.layerNorms.size() == expected.size() + f["expectation"]["not_foldable"].size());
  for (const auto& group : f["expectation"].value("tied", nlohmann::json::array())) {
    bool found = false;
    for (const auto& g : model.graph.tiedGroups()) {
      std::set<std::string> names;
      for (auto p : g) names.insert(model.graph.parameter(p).path);
      std::set<std::string> want(group.begin(), group.end());
      found |= names == want;
    }
    CHECK(found);
  }
  FoldOptions o;
  o.randomInputs = 1;
  auto folded = foldModel(model, result, o);
  INFO(toText(folded.report));
  CHECK(folded.report.verification.float64Equivalent);
  CHECK(folded.report.verification.worstRelative64 < 1e-10);
  CHECK(folded.report.verification.worstRelative32 < 1e-4);
}

}  // namespace

TEST_CASE("torchvision models: verdicts match the rules and folds verify", "[fixtures][torchvision]") {
  auto name = GENERATE(from_range(fixtureNames("torchvision")));
  checkFixture(name);
}

TEST_CASE("Hugging Face transformers models: verdicts match the rules and folds verify", "[fixtures][transformers]") {
  auto names = fixtureNames("transformers");
  // transformers is optional (make_models.py records its models as skipped when it is missing).
  if (names.empty()) return test::skipTest("no transformers fixtures were built (see make_models.py's table)");
  for (const auto& name : names) {
    DYNAMIC_SECTION(name) { checkFixture(name); }
  }
}

TEST_CASE("hand-written edge cases: verdicts match the method and folds verify", "[fixtures][edge]") {
  auto name = GENERATE(from_range(fixtureNames("hand-written")));
  checkFixture(name);
}

TEST_CASE("bad inputs give one clear error", "[fixtures][errors]") {
  SECTION("scripted control flow is rejected, naming the node") {
    CHECK_THROWS_WITH(importTorchScript(fixturePath("scripted_control_flow.pt")),
                      Catch::Contains("control flow") && Catch::Contains("prim::If"));
  }
  SECTION("a torch.save file is not TorchScript, and is called what it is") {
    CHECK_THROWS_WITH(importTorchScript(fixturePath("not_torchscript.pt")),
                      Catch::Contains("is a torch.save file") && Catch::Contains("torch.jit.trace"));
  }
  SECTION("a file that is not a zip archive at all") {
    auto path = std::filesystem::temp_directory_path() / ("foldnorm-not-zip-" + std::to_string(::getpid()) + ".pt");
    std::ofstream(path) << "hello, not a model\n";
    CHECK_THROWS_WITH(importTorchScript(path.string()), Catch::Contains("not a zip file"));
    std::remove(path.c_str());
  }
  SECTION("a truncated archive") {
    CHECK_THROWS_WITH(importTorchScript(fixturePath("truncated.pt")), Catch::Contains("truncated or damaged"));
  }
  SECTION("a missing file") {
    CHECK_THROWS_WITH(importTorchScript(fixturePath("no-such-model.pt")), Catch::Contains("no such file"));
  }
  SECTION("an input spec that does not match the model") {
    ImportOptions o;
    o.inputs = {parseInputSpec("1x3x7:float32")};
    CHECK_THROWS_WITH(importTorchScript(fixturePath("vit.pt"), o), Catch::Contains("input spec"));
    o.inputs = {parseInputSpec("1x3x32x32"), parseInputSpec("1x3x32x32")};
    CHECK_THROWS_WITH(importTorchScript(fixturePath("vit.pt"), o), Catch::Contains("takes 1 input"));
  }
}
