// Issue 28: retargeting is one operation of a model, over every method: a folded file retargeted
// to bfloat16 runs on the CPU (Python's module.to(torch.bfloat16) leaves a trace's float32
// constants behind), and a CPU trace retargeted to a GPU names it everywhere (structural: no GPU
// needed).
#include <catch2/catch.hpp>

#include <torch/cuda.h>
#include <torch/csrc/jit/api/function_impl.h>
#include <torch/script.h>

#include "foldnorm/fold/fold.h"
#include "foldnorm/fold/retarget.h"
#include "foldnorm/import/input_spec.h"
#include "foldnorm/zoo/zoo.h"
#include "helpers.h"

using namespace foldnorm;
namespace jit = torch::jit;

namespace {

/// Every graph of every method of `m` and its submodules.
std::vector<std::shared_ptr<jit::Graph>> methodGraphs(const jit::Module& m) {
  std::vector<std::shared_ptr<jit::Graph>> out;
  for (const auto& sub : m.modules())
    for (auto* fn : sub.type()->methods())
      if (auto* g = dynamic_cast<jit::GraphFunction*>(fn)) out.push_back(g->graph());
  return out;
}

std::string foldedGpt2(const test::ScratchDir& dir) {
  const auto path = (dir.path / "gpt2.pt").string(), folded = (dir.path / "gpt2-folded.pt").string();
  ZooBuildOptions zo;
  zo.preset = "tiny";
  buildZooModel("gpt2", path, zo);
  auto model = importTorchScript(path);
  auto analysis = analyzeFoldability(model.graph);
  FoldOptions fo;
  fo.randomInputs = 1;
  auto fold = foldModel(model, analysis, fo);
  REQUIRE(fold.report.verification.passed());
  saveFolded(fold, model, folded);
  return folded;
}

}  // namespace

TEST_CASE("a folded file retargeted to bfloat16 runs on the CPU, with no float32 left in any method", "[retarget]") {
  test::ScratchDir dir("foldnorm-retarget");
  const auto folded = foldedGpt2(dir), out = (dir.path / "gpt2-bf16.pt").string();
  RetargetFileOptions o;
  o.dtype = "bfloat16";
  auto r = retargetFile(folded, out, o);
  INFO(toText(r));
  CHECK(r.ran);
  CHECK(r.rewritten > 0);
  // It ran in bfloat16 (rounding shows) and computes the model (bfloat16's 2^-8 per op, two blocks).
  CHECK(r.worstRelative > 0);
  CHECK(r.worstRelative < 0.1);
  auto m = jit::load(out);
  for (const auto& p : m.parameters()) CHECK(p.scalar_type() == at::kBFloat16);
  for (const auto& g : methodGraphs(m))
    for (auto* n : g->nodes()) {
      if (n->kind() != c10::prim::Constant || !n->hasAttribute(c10::attr::value)) continue;
      if (n->kindOf(c10::attr::value) == jit::AttributeKind::t && n->t(c10::attr::value).is_floating_point())
        CHECK(n->t(c10::attr::value).scalar_type() == at::kBFloat16);
    }
  // The input is never the output, and a .pt2 or an unknown dtype is one line.
  CHECK_THROWS_WITH(retargetFile(folded, folded, o), Catch::Contains("refusing to overwrite"));
  o.dtype = "float8";
  CHECK_THROWS_WITH(retargetFile(folded, out + "2", o), Catch::Contains("unknown dtype"));
}

TEST_CASE("a CPU trace retargeted to a GPU names it in every method", "[retarget]") {
  test::ScratchDir dir("foldnorm-retarget");
  const auto folded = foldedGpt2(dir), out = (dir.path / "gpt2-cuda.pt").string();
  RetargetFileOptions o;
  o.device = "cuda:0";
  auto r = retargetFile(folded, out, o);
  INFO(toText(r));
  CHECK(r.tensorsMoved == torch::cuda::is_available());
  CHECK(r.rewritten > 0);
  auto m = jit::load(out, c10::Device(c10::kCPU));
  int devices = 0;
  for (const auto& g : methodGraphs(m))
    for (auto* n : g->nodes()) {
      if (n->kind() == c10::prim::Constant && n->outputs().size() == 1 &&
          n->output()->type()->kind() == c10::TypeKind::DeviceObjType) {
        CHECK(n->s(c10::attr::value) == "cuda:0");  // no CPU device constant left
        ++devices;
      }
      // No factory left on the default device (`device=None` is the CPU).
      const auto* schema = n->maybeSchema();
      if (!schema) continue;
      for (std::size_t i = 0; i < n->inputs().size() && i < schema->arguments().size(); ++i)
        if (schema->arguments()[i].name() == "device")
          CHECK(n->input(i)->type()->kind() != c10::TypeKind::NoneType);
    }
  CHECK(devices > 0);
  // On the CPU it still runs once moved back: the same model, only its devices named.
  RetargetFileOptions back;
  back.device = "cpu";
  auto again = retargetFile(out, (dir.path / "gpt2-back.pt").string(), back);
  CHECK(again.ran);
  CHECK(again.tracedDevice == "cuda:0");
  CHECK(again.worstRelative < 1e-6);
}

TEST_CASE("a model returning a dict (a Hugging Face trace's output) is retargeted and checked leaf for leaf", "[retarget]") {
  // Hugging Face models traced with strict=False return a dict of tensors; the copy's check
  // flattened only tuples and lists, so every such model failed "another number of outputs".
  test::ScratchDir dir("foldnorm-retarget");
  jit::Module m("DictOut");
  m.register_parameter("w", torch::randn({4, 4}), false);
  m.define(R"JIT(
    def forward(self, x):
        h = torch.matmul(x, self.w)
        return {"logits": h, "hidden": torch.relu(h)}
  )JIT");
  const auto in = (dir.path / "dict.pt").string(), out = (dir.path / "dict-bf16.pt").string();
  m.save(in, {{kInputSpecExtraFile, inputSpecsToJson({parseInputSpec("3x4:float32")})}});
  RetargetFileOptions o;
  o.dtype = "bfloat16";
  auto r = retargetFile(in, out, o);
  INFO(toText(r));
  CHECK(r.ran);
  CHECK(r.outputs == 2);
  // bfloat16 rounding shows, and both leaves are the model's (a swapped or dropped leaf is O(1)).
  CHECK(r.worstRelative > 0);
  CHECK(r.worstRelative < 0.05);
}
