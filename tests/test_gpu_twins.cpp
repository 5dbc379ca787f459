// Issue 28: a model traced on a GPU names `cuda:0` in its constants (arange, to, zeros...). On a
// machine without one it must import, analyse, fold and verify like its CPU twin; the fixtures
// write such twins from CPU traces (tests/fixtures/make_models.py, fixture_lib.write_gpu_twin).
// And retargeting a graph to a GPU leaves no factory on the default device.
#include <catch2/catch.hpp>

#include <torch/csrc/jit/ir/irparser.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "foldnorm/fold/fold.h"
#include "foldnorm/fold/fold_export.h"
#include "foldnorm/import/export.h"
#include "foldnorm/torch/model_surgery.h"
#include "foldnorm/torch/torch_model.h"
#include "helpers.h"
#include "skip.h"

using namespace foldnorm;
using foldnorm::test::fixturePath;
using foldnorm::test::haveFixture;

namespace {

/// The device constants of `graph` that name another device than the CPU.
int foreignDeviceConstants(const torch::jit::Graph& graph) {
  int n = 0;
  for (auto* node : graph.nodes())
    if (node->kind() == c10::prim::Constant && node->outputs().size() == 1 &&
        node->output()->type()->kind() == c10::TypeKind::DeviceObjType && node->s(c10::attr::value) != "cpu")
      ++n;
  return n;
}

}  // namespace

TEST_CASE("a GPU trace (cuda:0 constants) analyses, folds and verifies on the CPU like its CPU twin",
          "[fixtures][gpu-twin]") {
  std::ifstream in(fixturePath("manifest.json"));
  if (!in) FAIL("no fixture manifest (ctest fixture make_test_models)");
  auto manifest = nlohmann::json::parse(in);
  int twins = 0;
  for (const auto& [name, f] : manifest["fixtures"].items()) {
    if (!f.contains("gpu_twin")) continue;
    INFO("fixture " << name);
    REQUIRE(f["gpu_twin"]["device_constants"].get<int>() > 0);  // else the twin proves nothing
    REQUIRE(haveFixture(f["gpu_twin"]["file"].get<std::string>()));
    const auto twinPath = fixturePath(f["gpu_twin"]["file"]);
    auto cpu = importTorchScript(fixturePath(f["file"]));
    auto gpu = importTorchScript(twinPath);
    CHECK(cpu.torch->tracedDevice == "cpu");
    CHECK(gpu.torch->tracedDevice == "cuda:0");
    CHECK(foreignDeviceConstants(*gpu.torch->graph) == 0);  // the import runs it on the CPU
    auto a = analyzeFoldability(cpu.graph), b = analyzeFoldability(gpu.graph);
    REQUIRE(a.layerNorms.size() == b.layerNorms.size());
    for (std::size_t i = 0; i < a.layerNorms.size(); ++i) {
      CHECK(a.layerNorms[i].info.modulePath == b.layerNorms[i].info.modulePath);
      CHECK(a.layerNorms[i].foldable == b.layerNorms[i].foldable);
    }
    // The same outputs: the twin computes what its CPU trace does once its devices name the CPU.
    REQUIRE(cpu.torch->exampleOutputs.size() == gpu.torch->exampleOutputs.size());
    for (std::size_t i = 0; i < cpu.torch->exampleOutputs.size(); ++i)
      CHECK(cpu.torch->exampleOutputs[i].equal(gpu.torch->exampleOutputs[i]));
    FoldOptions o;
    o.randomInputs = 1;
    auto folded = foldModel(gpu, b, o);
    INFO(toText(folded.report));
    CHECK(folded.report.tracedDevice == "cuda:0");
    CHECK(folded.report.verification.float64Equivalent);
    CHECK(folded.report.verification.worstRelative64 < 1e-10);
    test::ScratchDir dir("foldnorm-gpu-twin");
    auto out = (dir.path / (name + ".folded.pt")).string();
    auto saved = saveFolded(folded, gpu, out);
    CHECK(saved.ran);  // loaded back and run on the CPU
    ++twins;
  }
  if (twins == 0) FAIL("the fixture manifest lists no GPU twin");
}

TEST_CASE("a GPU export (.pt2 naming cuda:0) analyses, folds and verifies on the CPU like its CPU archive",
          "[export][gpu-twin]") {
  // tests/fixtures/export_models.py writes these twins as torch.export.save writes a model exported
  // on a GPU: cuda:0 in every device argument and tensor metadata, sample inputs pickled as CUDA
  // tensors. Plain torch.export.load cannot open one without a GPU; foldnorm must.
  std::ifstream in(fixturePath("export_manifest.json"));
  if (!in) return test::skipTest("no export fixtures (ctest fixture make_export_models)");
  const auto manifest = nlohmann::json::parse(in);
  int twins = 0;
  for (const auto& [name, entry] : manifest.items()) {
    if (!entry.contains("gpu_twin")) continue;
    INFO("export fixture " << name);
    const auto& twin = entry["gpu_twin"];
    REQUIRE(twin["tensor_meta"].get<int>() > 0);  // else the twin proves nothing
    auto cpu = importModel(fixturePath(name + ".pt2"));
    ImportedModel gpu;
    REQUIRE_NOTHROW(gpu = importModel(fixturePath(twin["file"].get<std::string>())));
    auto a = analyzeFoldability(cpu.graph), b = analyzeFoldability(gpu.graph);
    REQUIRE(a.layerNorms.size() == b.layerNorms.size());
    REQUIRE(a.layerNorms.size() > 0);
    for (std::size_t i = 0; i < a.layerNorms.size(); ++i) {
      CHECK(a.layerNorms[i].info.modulePath == b.layerNorms[i].info.modulePath);
      CHECK(a.layerNorms[i].foldable == b.layerNorms[i].foldable);
    }
    FoldOptions o;
    o.randomInputs = 1;
    o.rmsOp = RmsOp::Aten;
    auto folded = foldExport(gpu, b, o);
    INFO(toText(folded.report));
    CHECK(folded.report.folded.size() == a.foldableCount());
    CHECK(folded.report.tracedDevice == "cuda:0");  // what the file names, kept in the folded program
    CHECK_THAT(toText(folded.report), Catch::Contains("the folded program names cuda:0, as its input did (verified on cpu)"));
    CHECK(folded.report.verification.ran);
    CHECK(folded.report.verification.float64Equivalent);
    CHECK(folded.report.verification.worstRelative64 < 1e-10);
    test::ScratchDir dir("foldnorm-gpu-twin-pt2");
    auto saved = saveFoldedExport(folded, gpu, (dir.path / (name + ".folded.pt2")).string());
    CHECK(saved.ran);  // read back and run on the CPU
    ++twins;
  }
  if (twins == 0) FAIL("the export manifest lists no GPU twin");
}

TEST_CASE("retargeting a graph to a GPU leaves no factory on the default device and no CPU device constant",
          "[retarget]") {
  // A C++ trace records `device=None` (the default device, the CPU) for arange without options,
  // and a Python trace `torch.device("cpu")`: both must name the target after retargeting.
  // Structural only (no tensor is moved), so it needs no GPU.
  auto graph = std::make_shared<torch::jit::Graph>();
  torch::jit::parseIR(R"IR(
graph(%x : Tensor):
  %none : NoneType = prim::Constant()
  %cpu : Device = prim::Constant[value="cpu"]()
  %n : int = prim::Constant[value=4]()
  %long : int = prim::Constant[value=4]()
  %false : bool = prim::Constant[value=0]()
  %a : Tensor = aten::arange(%n, %none, %none, %none, %none)
  %b : Tensor = aten::arange(%n, %long, %none, %cpu, %false)
  %c : Tensor = aten::to(%x, %cpu, %long, %false, %false, %none)
  %d : Tensor = aten::add(%a, %b, %n)
  return (%c, %d))IR", graph.get());
  const RetargetOptions toGpu{std::nullopt, c10::Device("cuda:0")};
  CHECK(retargetGraph(graph, toGpu) == 2);  // the "cpu" constant and arange a's device=None
  for (auto* node : graph->nodes()) {
    if (node->kind() == c10::prim::Constant && node->output()->type()->kind() == c10::TypeKind::DeviceObjType)
      CHECK(node->s(c10::attr::value) == "cuda:0");
    if (node->kind() == c10::aten::arange || node->kind() == c10::aten::to) {
      INFO(*node);
      bool named = false;
      for (auto* in : node->inputs())
        if (in->type()->kind() == c10::TypeKind::DeviceObjType) named = true;
      CHECK(named);
    }
  }
  // And back: device constants naming a GPU become the CPU, in place (no node added: the
  // analysis maps its nodes onto a fold's copy by position).
  auto count = [&] {
    int n = 0;
    for (auto* node : graph->nodes()) n += node != nullptr;
    return n;
  };
  const int before = count();
  CHECK(constantsToCpu(*graph) == "cuda:0");
  CHECK(count() == before);
  CHECK(foreignDeviceConstants(*graph) == 0);
}
