// The fold's memory (issue 16, item 3): each step's peak resident size over the model's bytes,
// from the same measurement as docs/performance.md's table (analyses/fold_memory.cpp).
#include <ATen/CPUGeneratorImpl.h>
#include <catch2/catch.hpp>

#include <cmath>

#include <filesystem>
#include <fstream>
#include <set>

#include "foldnorm/common/error.h"
#include "foldnorm/fold/fold_support.h"
#include "foldnorm/fold/fold_memory.h"
#include "foldnorm/torch/model_surgery.h"
#include "foldnorm/torch/torch_model.h"
#include "foldnorm/zoo/zoo.h"
#include "helpers.h"

using namespace foldnorm;

namespace {

/// A pre-LN residual MLP stack of `blocks` blocks at width `d` (4d hidden), a final LN and a head:
/// about 32 d^2 bytes per block, every LN foldable.
IrModel mlpStack(int blocks, int d) {
  auto D = std::to_string(d), H = std::to_string(4 * d);
  std::string ir = "graph(%x : Tensor, %inp__weight : Tensor, %inp__bias : Tensor, %ln_w : Tensor, %ln_b : Tensor,"
                   " %head__weight : Tensor, %head__bias : Tensor";
  for (int b = 0; b < blocks; ++b)
    for (const char* p : {"fc__weight", "fc__bias", "proj__weight", "proj__bias"})
      ir += ", %b" + std::to_string(b) + "__" + p + " : Tensor";
  ir += "):\n  %approx : str = prim::Constant[value=\"none\"]()\n  %one : int = prim::Constant[value=1]()\n"
        "  %h0 : Tensor = aten::linear(%x, %inp__weight, %inp__bias)\n";
  std::vector<std::pair<std::string, InputSpec>> params{{"inp__weight", parseInputSpec(D + "x64")},
                                                        {"inp__bias", parseInputSpec(D)},
                                                        {"ln_w", parseInputSpec(D + ":float32[0.5,1.5)")},
                                                        {"ln_b", parseInputSpec(D)},
                                                        {"head__weight", parseInputSpec("16x" + D)},
                                                        {"head__bias", parseInputSpec("16")}};
  for (int b = 0; b < blocks; ++b) {
    auto B = "b" + std::to_string(b), in = "h" + std::to_string(b), out = "h" + std::to_string(b + 1);
    ir += test::layerNorm(in, B + "_ln", d) +
          "  %" + B + "_u : Tensor = aten::linear(%" + B + "_ln, %" + B + "__fc__weight, %" + B + "__fc__bias)\n" +
          "  %" + B + "_g : Tensor = aten::gelu(%" + B + "_u, %approx)\n" +
          "  %" + B + "_v : Tensor = aten::linear(%" + B + "_g, %" + B + "__proj__weight, %" + B + "__proj__bias)\n" +
          "  %" + out + " : Tensor = aten::add(%" + in + ", %" + B + "_v, %one)\n";
    params.push_back({B + "__fc__weight", parseInputSpec(H + "x" + D)});
    params.push_back({B + "__fc__bias", parseInputSpec(H)});
    params.push_back({B + "__proj__weight", parseInputSpec(D + "x" + H)});
    params.push_back({B + "__proj__bias", parseInputSpec(D)});
  }
  ir += test::layerNorm("h" + std::to_string(blocks), "final", d) +
        "  %logits : Tensor = aten::linear(%final, %head__weight, %head__bias)\n  return (%logits)\n";
  return {ir, {parseInputSpec("8x64")}, params};
}

/// Every tensor attribute of `m` by dotted name.
std::map<std::string, at::Tensor> namedTensors(const torch::jit::Module& m) {
  std::map<std::string, at::Tensor> out;
  for (const auto& a : m.named_attributes(/*recurse=*/true))
    if (a.value.isTensor()) out[a.name] = a.value.toTensor();
  return out;
}

/// Bytes of the storages of `m` that `original` does not hold.
int64_t ownBytes(const torch::jit::Module& m, const torch::jit::Module& original) {
  const auto shared = tensorStorages(original);
  std::set<const void*> seen;
  int64_t bytes = 0;
  for (const auto& [name, t] : namedTensors(m)) {
    const void* s = t.storage().unsafeGetStorageImpl();
    if (!shared.count(s) && seen.insert(s).second) bytes += static_cast<int64_t>(t.storage().nbytes());
  }
  return bytes;
}

}  // namespace

TEST_CASE("a verified fold holds its centred tensors once, in the model's dtype, and saves the bits an unverified fold "
          "writes", "[fold][memory]") {
  // The check's float64 plan centres the original tensors again at each read (no float64 copy
  // of the planned tensors is made); the fold itself is the one an unverified fold makes.
  test::ScratchDir dir("foldnorm-memory");
  auto path = (dir.path / "gpt2.pt").string();
  ZooBuildOptions zo;
  zo.preset = "tiny";  // tied embedding and head: the plan unties; residual adds: fused
  buildZooModel("gpt2", path, zo);
  auto model = importTorchScript(path);
  auto analysis = analyzeFoldability(model.graph);
  REQUIRE(analysis.foldableCount() > 0);
  FoldOptions verified, unverified;
  unverified.verify = false;
  std::vector<std::string> steps;
  verified.progress = [&](const std::string& line) { steps.push_back(line); };
  auto a = foldModel(model, analysis, verified), b = foldModel(model, analysis, unverified);
  const auto& v = a.report.verification;
  CHECK(v.float64Equivalent);
  CHECK(v.worstRelative64 < 1e-12);
  CHECK(std::any_of(steps.begin(), steps.end(), [](const auto& l) { return l.rfind("verifying on input set", 0) == 0; }));
  auto kinds = [](const std::shared_ptr<torch::jit::Graph>& g) {
    std::vector<std::string> out;  // the node kinds in order (the types' mangled names differ per clone)
    for (auto* n : g->nodes()) out.push_back(n->kind().toQualString());
    return out;
  };
  CHECK(kinds(a.torch->graph) == kinds(b.torch->graph));
  auto ta = namedTensors(a.torch->module), tb = namedTensors(b.torch->module);
  REQUIRE(ta.size() == tb.size());
  for (const auto& [name, t] : ta) {
    INFO(name);
    REQUIRE(tb.count(name));
    CHECK(t.scalar_type() == tb.at(name).scalar_type());
    CHECK(t.equal(tb.at(name)));  // bit for bit (no NaN in a zoo model)
  }
  // What the fold owns is the planned tensors in the model's dtype, no more: everything else is
  // the original's (a second copy of the model, or a float64 one left behind, fails here).
  const auto& original = model.torch->module;
  CHECK(ownBytes(a.torch->module, original) == ownBytes(b.torch->module, original));
  CHECK(ownBytes(a.torch->module, original) > 0);
  int64_t modelBytes = 0;
  for (const auto& [name, t] : namedTensors(original)) modelBytes += static_cast<int64_t>(t.nbytes());
  CHECK(ownBytes(a.torch->module, original) < modelBytes);
  // The same fold checked with the plan made again on a float64 clone (verifyFold: it has no
  // record of what was centred): the same float32 and saved-file figures (the same tensors and
  // runs), and the same float64 plan up to float64 rounding.
  auto c = verifyFold(model, analysis, b, verified);
  CHECK(c.worstRelativeSaved64 == v.worstRelativeSaved64);
  CHECK(c.worstRelative32 == v.worstRelative32);
  CHECK(c.float64Equivalent);
  CHECK(std::abs(c.worstRelative64 - v.worstRelative64) < 1e-14);
}

TEST_CASE("centering in slices of rows equals centering the whole tensor in float64, rounded once", "[fold][memory]") {
  // 4100 x 600 float32: 19.7 MB in float64, more than one slice (16 MiB), and a last slice of
  // its own size. Along the last axis (slices of rows) and the first (slices of columns).
  auto gen = at::make_generator<at::CPUGeneratorImpl>(7);
  auto t = (at::randn({4100, 600}, gen, at::kDouble) * 3 + 0.25).to(at::kFloat);
  for (int64_t axis : {1, 0}) {
    INFO("axis " << axis);
    CenterAction a;
    a.axis = axis;
    auto x = t.to(at::kDouble);
    auto whole = (x - x.mean(axis, /*keepdim=*/true)).to(at::kFloat);
    auto sliced = centeredCopy(t, {a});
    CHECK(sliced.is_contiguous());
    CHECK(sliced.scalar_type() == at::kFloat);
    // Each row's float64 sum is one reduction either way; a difference would be a rounding of
    // the float64 mean, far below float32's: both round to the same float32 but at ties.
    CHECK((sliced.to(at::kDouble) - whole.to(at::kDouble)).abs().max().item<double>() <=
          std::ldexp(1.0, -22) * t.abs().max().item<double>());
    CHECK(sliced.to(at::kDouble).mean(axis).abs().max().item<double>() < 1e-6);
    CHECK_FALSE(t.equal(sliced));
  }
  // Groups along the centred axis, on a tensor small enough for one slice.
  CenterAction g;
  g.axis = 1;
  g.groups = 4;
  auto small = t.narrow(0, 0, 8).contiguous();
  auto grouped = centeredCopy(small, {g}).to(at::kDouble).view({8, 4, 150});
  CHECK(grouped.mean(-1).abs().max().item<double>() < 1e-6);
}

TEST_CASE("runs keep no autograd history: outputs hold no forward alive", "[fold][memory]") {
  auto ir = importIrModel(mlpStack(1, 16));
  const auto& tm = *ir.torch;
  for (auto t : tm.parameterTensors)
    if (t.is_floating_point()) t.requires_grad_(true);  // as a traced module's parameters do
  auto out = runGraph(tm.module, tm.graph, tm.exampleInputs);
  REQUIRE_FALSE(out.empty());
  for (const auto& t : out) {
    CHECK_FALSE(t.requires_grad());
    CHECK(t.grad_fn() == nullptr);
  }
}

TEST_CASE("the import keeps no copy of the file's bytes, and fresh copies load the file, refused once it changed",
          "[fold][memory]") {
  test::ScratchDir dir("foldnorm-memory");
  auto path = (dir.path / "stack.pt").string();
  {
    auto ir = importIrModel(mlpStack(1, 16));
    torch::jit::ExtraFilesMap extra{{kInputSpecExtraFile, inputSpecsToJson(ir.inputSpecs)}};
    ir.torch->module.save(path, extra);
  }
  auto model = importTorchScript(path);
  CHECK_FALSE(model.torch->archive);
  auto copy = freshCopy(*model.torch);
  auto same = runGraph(copy, inlinedForward(copy), model.torch->exampleInputs);
  REQUIRE(same.size() == model.torch->exampleOutputs.size());
  CHECK(same.at(0).equal(model.torch->exampleOutputs.at(0)));
  CHECK(copy._ivalue() != model.torch->module._ivalue());
  std::filesystem::resize_file(path, std::filesystem::file_size(path) - 1);
  CHECK_THROWS_WITH(freshCopy(*model.torch), Catch::Contains("changed (or went away) since it was imported"));
}

TEST_CASE("a fold's peak resident memory stays within a small multiple of the model's bytes",
          "[fold][memory][bench]") {
  test::ScratchDir dir("foldnorm-memory");
  auto modelPath = (dir.path / "stack.pt").string(), outPath = (dir.path / "stack-folded.pt").string();
  {
    auto ir = importIrModel(mlpStack(6, 512));  // 6 x 8 MiB of weights, about 50 MiB
    torch::jit::ExtraFilesMap extra{{kInputSpecExtraFile, inputSpecsToJson(ir.inputSpecs)}};
    ir.torch->module.save(modelPath, extra);
  }
  FoldMemoryOptions o;
  o.fold.randomInputs = 1;
  auto r = measureFoldMemory(modelPath, outPath, o);
  INFO(memoryTable(r));
  REQUIRE(r.verified);
  CHECK(r.foldedLayerNorms == 7);
  CHECK(r.modelBytes > 48 * 1024 * 1024);
  std::vector<std::string> names;
  for (const auto& s : r.steps) names.push_back(s.name);
  for (const char* step : {"import: read and load the file", "import: load, inline, mirror", "import: shape recording run",
                           "analysis", "fold: copy of the model", "fold: apply the plan",
                           "verify: prepare the float64 runs", "verify: set 1/2: float32 (original, folded)",
                           "verify: set 2/2: float64 (original, plan)", "verify: set 2/2: float64 (saved file)", "save",
                           "save: load the written file back and check it"})
    CHECK(std::find(names.begin(), names.end(), step) != names.end());
  for (const auto& s : r.steps) CHECK(s.peak >= s.after - 64 * 1024 * 1024);
  // The goal (issue 16) is the whole fold within 2.5x the model's bytes: here 1.98x-2.14x in
  // three runs on the loaded machine (GPT-2 medium 2.03x). On a 50 MiB model the peaks carry
  // transients that a large one does not (float64 temporaries of one 8 MiB weight, glibc arenas
  // of two OpenMP threads: before this change identical quiet runs ranged 2.40x-3.74x), so the
  // peak bound leaves room: 3.0x. What a regression would change is what the fold *holds*: the
  // model plus its planned tensors in float32 (each step leaves at most 1.27x resident here).
  // One more full copy of the model (+1x), or the planned tensors held in float64 through the
  // check as before (+0.96x), fails the 1.75x bound; a whole extra copy made for a moment (an
  // in-memory archive at the save) fails the peak bound.
  for (const auto& s : r.steps) {
    INFO(s.name);
    CHECK(static_cast<double>(s.after - r.baseline) / static_cast<double>(r.modelBytes) <= 1.75);
  }
  CHECK(r.peakRatio() <= 3.0);
}
