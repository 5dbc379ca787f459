// Issue 31: the file foldnorm writes is what it verified. saveFolded loads the written file back
// (torch::jit::load, as Python's torch.jit.load) and refuses (and removes) one that does not load
// or computes something else; the report says the file was reloaded.
#include <catch2/catch.hpp>

#include <torch/csrc/jit/frontend/resolver.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "foldnorm/common/error.h"
#include "foldnorm/fold/fold.h"
#include "foldnorm/fold/fold_support.h"
#include "foldnorm/torch/model_surgery.h"
#include "foldnorm/torch/torch_model.h"
#include "helpers.h"

using namespace foldnorm;
namespace jit = torch::jit;

namespace {

/// A module whose forward passes one submodule (`b`) to another's method (`enc.forward`) whose
/// signature names a different type (`a`'s): what the untie of a shared embedding left in
/// Pegasus-style traces. It runs in memory (the interpreter does not check the argument's type)
/// but its saved code does not compile: torch.jit.load refuses it.
FoldedModel mistypedCall() {
  auto cu = std::make_shared<jit::CompilationUnit>();
  auto w = at::arange(4, at::kFloat);
  jit::Module a("__torch__.A", cu, true), b("__torch__.B", cu, true), enc("__torch__.Enc", cu, true),
      root("__torch__.Root", cu, true);
  a.register_parameter("w", w, false);
  b.register_parameter("w", w, false);
  // The signature names A's type (a resolver for the one name it uses).
  struct NamesA : jit::Resolver {
    c10::TypePtr type;
    c10::TypePtr resolveType(const std::string& name, const jit::SourceRange&) override {
      return name == "A" ? type : nullptr;
    }
  };
  auto resolver = std::make_shared<NamesA>();
  resolver->type = a.type();
  enc.define("def forward(self, m: A, x: Tensor) -> Tensor:\n  return x + m.w\n", resolver);
  root.register_module("a", a);
  root.register_module("b", b);
  root.register_module("enc", enc);
  root.define("def forward(self, x: Tensor) -> Tensor:\n  return self.enc.forward(self.a, x)\n");
  // Point the call at self.b: the same tensors, another type.
  auto graph = jit::toGraphFunction(root.get_method("forward").function()).graph();
  for (auto* n : graph->nodes())
    if (n->kind() == c10::prim::GetAttr && n->s(c10::attr::name) == "a") {
      auto* get = graph->createGetAttr(graph->inputs()[0], "b");
      get->insertBefore(n);
      n->output()->replaceAllUsesWith(get->output());
    }
  FoldedModel folded;
  folded.torch = std::make_shared<TorchModel>();
  folded.torch->module = root;
  folded.torch->graph = graph;
  auto runs = std::make_shared<VerificationRuns>();
  auto x = at::ones({4});
  runs->inputSets = {{x}};
  runs->folded = {{x + w}};
  runs->original64 = {{(x + w).to(at::kDouble)}};
  folded.runs = runs;
  return folded;
}

}  // namespace

TEST_CASE("a written file that does not load back is refused, removed, and named in one line", "[fold][saved]") {
  auto folded = mistypedCall();
  // It runs in memory: only the written file shows the fault.
  auto out = folded.torch->module.forward({at::ones({4})}).toTensor();
  REQUIRE(out.equal(at::ones({4}) + at::arange(4, at::kFloat)));
  test::ScratchDir dir("foldnorm-saved");
  ImportedModel original;
  original.path = (dir.path / "in.pt").string();
  const auto path = (dir.path / "out.pt").string();
  try {
    saveFolded(folded, original, path);
    FAIL("the mistyped file was accepted");
  } catch (const Error& e) {
    const std::string what = e.what();
    INFO(what);
    CHECK(what.find("does not load back") != std::string::npos);
    CHECK(what.find("Expected a value of type") != std::string::npos);  // the loader's reason
    CHECK(what.find('\n') == std::string::npos);
  }
  CHECK_FALSE(std::filesystem::exists(path));
  for (const auto& entry : std::filesystem::directory_iterator(dir.path))  // no temporary left
    CHECK(entry.path().filename().string().rfind("out.pt", 0) != 0);
}

TEST_CASE("a verified fold's saved file is loaded back and checked, and the report says so", "[fold][saved]") {
  auto ir = importIrModel(test::threeBlocks());  // h.0 folds
  auto analysis = analyzeFoldability(ir.graph);
  REQUIRE(analysis.foldableCount() > 0);
  auto folded = foldModel(ir, analysis);
  REQUIRE(folded.runs);
  test::ScratchDir dir("foldnorm-saved");
  ir.path = (dir.path / "in.pt").string();
  const auto path = (dir.path / "out.pt").string();
  folded.report.savedFile = saveFolded(folded, ir, path);
  const auto& s = folded.report.savedFile;
  CHECK(s.ran);
  CHECK(s.loader == "torch::jit::load");
  CHECK(s.runs == folded.report.verification.runs);
  CHECK(s.tensors > 0);
  CHECK(s.worstRelative32 <= s.tolerance32);
  CHECK(s.worstRelativeSaved64 <= folded.report.verification.savedFloat64Bound);
  CHECK(toText(folded.report).find("saved file reloaded (torch::jit::load)") != std::string::npos);
  CHECK(toJson(folded.report)["saved_file"]["reloaded"].get<bool>());
  // The file is the fold: loaded here it gives the verified outputs.
  auto loaded = jit::load(path);
  auto got = loaded.forward({folded.runs->inputSets[0].begin(), folded.runs->inputSets[0].end()});
  REQUIRE(got.isTuple());
  CHECK(got.toTupleRef().elements()[0].toTensor().equal(folded.runs->folded[0][0]));
  // Unverified folds have nothing to compare with: saved, not checked.
  FoldOptions quick;
  quick.verify = false;
  auto unverified = foldModel(ir, analysis, quick);
  CHECK_FALSE(unverified.runs);
  CHECK_FALSE(saveFolded(unverified, ir, (dir.path / "quick.pt").string()).ran);
}

TEST_CASE("a clone keeps every method naming a module type from a later subtree loadable", "[fold][saved]") {
  // Module::clone copies the encoder's methods before it clones the decoder: a signature that
  // names the decoder's embedding type (Pegasus 4.41's trace passes decoder.embed_tokens to the
  // encoder's forward) kept the original's type, and the saved clone did not load (issue 31).
  auto cu = std::make_shared<jit::CompilationUnit>();
  jit::Module root("__torch__.Root", cu, true), enc("__torch__.Enc", cu, true), dec("__torch__.Dec", cu, true),
      emb("__torch__.Emb", cu, true);
  emb.register_parameter("weight", at::arange(6, at::kFloat).view({3, 2}), false);
  dec.register_module("emb", emb);
  struct NamesEmb : jit::Resolver {
    c10::TypePtr type;
    c10::TypePtr resolveType(const std::string& name, const jit::SourceRange&) override {
      return name == "Emb" ? type : nullptr;
    }
  };
  auto resolver = std::make_shared<NamesEmb>();
  resolver->type = emb.type();
  enc.define("def forward(self, m: Emb, ids: Tensor) -> Tensor:\n  return m.weight.index_select(0, ids)\n", resolver);
  root.register_module("enc", enc);  // cloned before `dec`
  root.register_module("dec", dec);
  root.define("def forward(self, ids: Tensor) -> Tensor:\n  return self.enc.forward(self.dec.emb, ids)\n");
  auto clone = cloneSharing(root, {}, {std::nullopt, c10::kCPU});
  test::ScratchDir dir("foldnorm-saved");
  const auto path = (dir.path / "clone.pt").string();
  clone.save(path);
  auto loaded = jit::load(path);  // threw "Expected a value of type ... Emb ... found type ... Emb"
  auto ids = at::tensor({2, 0}, at::kLong);
  CHECK(loaded.forward({ids}).toTensor().equal(root.forward({ids}).toTensor()));
}
