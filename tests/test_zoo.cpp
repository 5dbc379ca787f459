#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <dirent.h>
#include <unistd.h>

#include "foldnorm/common/error.h"
#include "foldnorm/import/torchscript.h"
#include "foldnorm/zoo/eager.h"
#include "foldnorm/zoo/zoo.h"
#include "helpers.h"

namespace fs = std::filesystem;
using foldnorm::zoo::EagerModel;

namespace {

using foldnorm::test::ScratchDir;


std::vector<std::string> modelNames() {
  std::vector<std::string> names;
  for (const auto& m : foldnorm::zooModels()) names.push_back(m.name);
  return names;
}

std::vector<torch::Tensor> eagerOutputs(EagerModel& model, const std::vector<torch::Tensor>& in) {
  torch::NoGradGuard noGrad;
  return model.forward(in);
}

fs::path buildTiny(const ScratchDir& dir, const std::string& name, uint64_t seed = 7) {
  auto path = dir.path / (name + "-tiny.pt");
  foldnorm::ZooBuildOptions options;
  options.preset = "tiny";
  options.seed = seed;
  foldnorm::buildZooModel(name, path.string(), options);
  return path;
}

std::set<std::string> parameterNames(const torch::jit::Module& m) {
  std::set<std::string> names;
  for (const auto& p : m.named_parameters()) names.insert(p.name);
  return names;
}

std::vector<std::string> specTexts(const std::vector<foldnorm::InputSpec>& specs) {
  std::vector<std::string> texts;
  for (const auto& s : specs) texts.push_back(s.toString());
  return texts;
}

int64_t tensorConstants(const torch::jit::Graph& graph) {
  int64_t n = 0;
  for (const auto* node : graph.nodes()) {
    if (node->kind() == c10::prim::Constant && node->output()->type()->cast<c10::TensorType>()) ++n;
  }
  return n;
}

// Names of each reference implementation that the saved model must keep.
const std::map<std::string, std::vector<std::string>> kReferenceNames = {
    {"gpt2", {"transformer.h.1.attn.c_attn.weight", "transformer.ln_f.bias", "lm_head.weight"}},
    {"bert",
     {"embeddings.word_embeddings.weight", "embeddings.token_type_embeddings.weight",
      "embeddings.LayerNorm.weight", "encoder.layer.1.attention.self.query.weight",
      "encoder.layer.1.attention.output.LayerNorm.bias", "encoder.layer.0.intermediate.dense.weight",
      "encoder.layer.0.output.dense.bias", "encoder.layer.0.output.LayerNorm.weight",
      "pooler.dense.weight"}},
    {"opt",
     {"model.decoder.embed_tokens.weight", "model.decoder.embed_positions.weight",
      "model.decoder.layers.0.self_attn.q_proj.weight", "model.decoder.layers.1.self_attn.out_proj.bias",
      "model.decoder.layers.0.self_attn_layer_norm.weight", "model.decoder.layers.0.fc1.weight",
      "model.decoder.layers.1.final_layer_norm.bias", "model.decoder.final_layer_norm.weight",
      "lm_head.weight"}},
    {"opt350m",
     {"model.decoder.project_in.weight", "model.decoder.project_out.weight",
      "model.decoder.layers.1.fc2.bias", "model.decoder.layers.0.final_layer_norm.weight"}},
    {"phi",
     {"model.embed_tokens.weight", "model.layers.0.input_layernorm.weight",
      "model.layers.1.self_attn.dense.bias", "model.layers.0.mlp.fc1.weight",
      "model.final_layernorm.weight", "lm_head.bias"}},
    {"llama",
     {"model.layers.0.input_layernorm.weight", "model.layers.0.post_attention_layernorm.weight",
      "model.layers.1.self_attn.o_proj.weight", "model.layers.1.mlp.gate_proj.weight",
      "model.norm.weight", "lm_head.weight"}},
    {"vit",
     {"conv_proj.weight", "class_token", "encoder.pos_embedding",
      "encoder.layers.encoder_layer_0.ln_1.weight",
      "encoder.layers.encoder_layer_1.self_attention.in_proj_weight",
      "encoder.layers.encoder_layer_1.self_attention.out_proj.bias",
      "encoder.layers.encoder_layer_0.mlp.3.weight", "encoder.ln.bias", "heads.head.weight"}},
    {"swin_t",
     {"features.0.0.weight", "features.0.2.weight", "features.1.1.attn.relative_position_bias_table",
      "features.1.0.attn.qkv.weight", "features.1.1.mlp.0.bias", "features.2.reduction.weight",
      "features.2.norm.weight", "features.7.1.norm2.bias", "norm.weight", "head.weight"}},
    {"convnext_t",
     {"features.0.0.weight", "features.0.1.weight", "features.1.0.layer_scale",
      "features.1.0.block.0.weight", "features.1.0.block.2.weight", "features.1.0.block.5.bias",
      "features.2.0.weight", "features.2.1.weight", "features.7.0.block.3.weight",
      "classifier.0.weight", "classifier.2.bias"}},
};

}  // namespace

TEST_CASE("every zoo model's saved trace reproduces the eager model", "[zoo]") {
  ScratchDir scratch;
  auto name = GENERATE(from_range(modelNames()));
  INFO("model " << name);
  auto path = buildTiny(scratch, name);
  auto eager = foldnorm::zoo::makeEagerModel(name, "tiny", 7);
  auto loaded = torch::jit::load(path.string());
  loaded.eval();
  // Plain blocks rather than SECTIONs: each SECTION would build the model again.

  {
    INFO("on the embedded example inputs");
    auto inputs = foldnorm::zoo::makeInputs(eager.inputs, 11);
    auto want = eagerOutputs(eager, inputs);
    auto got = foldnorm::zoo::runTraced(loaded, inputs);
    REQUIRE(got.size() == want.size());
    REQUIRE(got.size() == eager.outputNames.size());
    for (std::size_t i = 0; i < got.size(); ++i) {
      INFO("output " << eager.outputNames[i]);
      CHECK(got[i].sizes() == want[i].sizes());
      CHECK(torch::allclose(got[i], want[i], 1e-5, 1e-6));
    }
  }
  {
    INFO("at a batch size other than the traced one");
    auto specs = eager.inputs;
    for (auto& s : specs) s.shape[0] += 1;
    auto inputs = foldnorm::zoo::makeInputs(specs, 12);
    auto want = eagerOutputs(eager, inputs);
    auto got = foldnorm::zoo::runTraced(loaded, inputs);
    REQUIRE(got.size() == want.size());
    for (std::size_t i = 0; i < got.size(); ++i) CHECK(torch::allclose(got[i], want[i], 1e-5, 1e-6));
  }
  {
    INFO("with every parameter reached as a module attribute, none baked into the graph");
    auto graph = loaded.get_method("forward").graph();
    CHECK(tensorConstants(*graph) == 0);
    std::set<std::string> eagerNames;
    for (const auto& p : eager.root->named_parameters()) eagerNames.insert(p.key());
    auto names = parameterNames(loaded);
    CHECK(names == eagerNames);
    REQUIRE(kReferenceNames.count(name) == 1);
    for (const auto& expected : kReferenceNames.at(name)) {
      INFO("reference name " << expected);
      CHECK(names.count(expected) == 1);
    }
  }
  {
    INFO("with the example-input spec embedded");
    torch::jit::ExtraFilesMap extra{{foldnorm::kInputSpecExtraFile, ""}};
    torch::jit::load(path.string(), c10::nullopt, extra);
    auto embedded = foldnorm::inputSpecsFromJson(extra[foldnorm::kInputSpecExtraFile]);
    CHECK(specTexts(embedded) == specTexts(eager.inputs));
  }
}

TEST_CASE("language models run at sequence lengths other than the traced one", "[zoo]") {
  ScratchDir scratch;
  auto name = GENERATE(as<std::string>{}, "gpt2", "bert", "opt", "opt350m", "phi", "llama");
  auto eager = foldnorm::zoo::makeEagerModel(name, "tiny", 3);
  auto loaded = torch::jit::load(buildTiny(scratch, name, 3).string());
  INFO("model " << name);
  auto specs = eager.inputs;
  for (auto& s : specs) s.shape = {3, 7};
  auto inputs = foldnorm::zoo::makeInputs(specs, 5);
  auto got = foldnorm::zoo::runTraced(loaded, inputs);
  auto want = eagerOutputs(eager, inputs);
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    CHECK(got[i].sizes() == want[i].sizes());
    CHECK(torch::allclose(got[i], want[i], 1e-5, 1e-6));
  }
}

TEST_CASE("BERT base-16k runs past base's 512 positions, as the long-sequence sweep needs", "[zoo]") {
  // The sweep to 16k tokens (scripts/gpu-check.sh) times bert:base-16k; 600 tokens is enough to
  // tell the presets apart: base has 512 position rows and refuses them.
  auto longer = foldnorm::zoo::makeEagerModel("bert", "base-16k", 1);
  auto table = longer.root->named_parameters()["embeddings.position_embeddings.weight"];
  CHECK(table.sizes() == std::vector<int64_t>{16384, 768});
  auto specs = longer.inputs;
  for (auto& s : specs) s.shape = {1, 600};
  auto inputs = foldnorm::zoo::makeInputs(specs, 2);
  auto out = eagerOutputs(longer, inputs);
  REQUIRE(out.size() == 2);
  CHECK(out[0].sizes() == std::vector<int64_t>{1, 600, 768});
  CHECK(torch::isfinite(out[0]).all().item<bool>());
  auto base = foldnorm::zoo::makeEagerModel("bert", "base", 1);
  CHECK_THROWS(eagerOutputs(base, inputs));
}

TEST_CASE("GPT-2 keeps the reference names and its tied head", "[zoo]") {
  ScratchDir scratch;
  auto loaded = torch::jit::load(buildTiny(scratch, "gpt2").string());
  auto names = parameterNames(loaded);
  for (const char* expected :
       {"transformer.wte.weight", "transformer.wpe.weight", "transformer.h.0.ln_1.weight",
        "transformer.h.0.attn.c_attn.weight", "transformer.h.0.attn.c_proj.bias",
        "transformer.h.1.ln_2.bias", "transformer.h.1.mlp.c_fc.weight",
        "transformer.h.1.mlp.c_proj.weight", "transformer.ln_f.weight", "lm_head.weight"}) {
    INFO(expected);
    CHECK(names.count(expected) == 1);
  }
  SECTION("Conv1D weights are stored [in, out] and applied with addmm") {
    CHECK(loaded.attr("transformer").toModule().attr("h").toModule().attr("0").toModule()
              .attr("attn").toModule().attr("c_attn").toModule().attr("weight").toTensor().sizes() ==
          std::vector<int64_t>{64, 192});
    int64_t addmms = 0;
    for (const auto* node : loaded.get_method("forward").graph()->nodes()) {
      addmms += node->kind() == c10::aten::addmm;
    }
    CHECK(addmms == 2 * 4);  // 2 layers x (c_attn, c_proj, c_fc, c_proj)
  }
  SECTION("lm_head and wte are one tensor after save and load") {
    auto head = loaded.attr("lm_head").toModule().attr("weight").toTensor();
    auto wte = loaded.attr("transformer").toModule().attr("wte").toModule().attr("weight").toTensor();
    CHECK(head.data_ptr() == wte.data_ptr());
  }
  SECTION("layer norms are not the identity, biases are not zero") {
    auto ln = loaded.attr("transformer").toModule().attr("ln_f").toModule();
    CHECK(ln.attr("weight").toTensor().sub(1).abs().max().item<float>() > 0.01f);
    CHECK(ln.attr("bias").toTensor().abs().max().item<float>() > 0.01f);
  }
}

TEST_CASE("the same seed builds the same model, another seed another", "[zoo]") {
  auto a = foldnorm::zoo::makeEagerModel("gpt2", "tiny", 1);
  auto b = foldnorm::zoo::makeEagerModel("gpt2", "tiny", 1);
  auto c = foldnorm::zoo::makeEagerModel("gpt2", "tiny", 2);
  auto pa = a.root->named_parameters(), pb = b.root->named_parameters(), pc = c.root->named_parameters();
  CHECK(torch::equal(pa["transformer.h.0.ln_1.weight"], pb["transformer.h.0.ln_1.weight"]));
  CHECK_FALSE(torch::equal(pa["transformer.h.0.ln_1.weight"], pc["transformer.h.0.ln_1.weight"]));
}

TEST_CASE("zoo --layers builds the preset's width with that many layers, and a model with stages refuses it", "[zoo]") {
  auto a = foldnorm::zoo::makeEagerModel("gpt2", "tiny", 1), b = foldnorm::zoo::makeEagerModel("gpt2", "tiny", 1, 3);
  auto pa = a.root->named_parameters(), pb = b.root->named_parameters();
  CHECK(pa.contains("transformer.h.1.ln_1.weight"));
  CHECK_FALSE(pa.contains("transformer.h.2.ln_1.weight"));  // the preset has 2
  CHECK(pb.contains("transformer.h.2.ln_1.weight"));
  CHECK_FALSE(pb.contains("transformer.h.3.ln_1.weight"));
  CHECK(pb["transformer.wte.weight"].sizes() == pa["transformer.wte.weight"].sizes());
  auto phi = foldnorm::zoo::makeEagerModel("phi", "tiny", 1, 1);
  CHECK_FALSE(phi.root->named_parameters().contains("model.layers.1.input_layernorm.weight"));
  CHECK_THROWS_WITH(foldnorm::zoo::makeEagerModel("swin_t", "tiny", 1, 2), Catch::Contains("per stage"));
  CHECK_THROWS_WITH(foldnorm::zoo::makeEagerModel("gpt2", "tiny", 1, -1), Catch::Contains("positive"));
}

TEST_CASE("unknown zoo models and presets are rejected with the valid choices", "[zoo]") {
  ScratchDir scratch;
  auto out = (scratch.path / "never.pt").string();
  CHECK_THROWS_WITH(foldnorm::buildZooModel("gpt5", out),
                    Catch::Contains("unknown zoo model 'gpt5'") && Catch::Contains("gpt2"));
  foldnorm::ZooBuildOptions options;
  options.preset = "huge";
  CHECK_THROWS_WITH(foldnorm::buildZooModel("gpt2", out, options),
                    Catch::Contains("unknown preset 'huge'") && Catch::Contains("tiny, small"));
  CHECK_FALSE(fs::exists(out));
}

TEST_CASE("Python loads the saved zoo models with the C++ outputs and names", "[zoo][python]") {
  ScratchDir scratch;
  std::string command = std::string(FOLDNORM_PYTHON) + " " + FOLDNORM_SOURCE_DIR +
                        "/tests/python/check_zoo_model.py";
  for (const auto& name : modelNames()) {
    auto modelPath = buildTiny(scratch, name);
    auto eager = foldnorm::zoo::makeEagerModel(name, "tiny", 7);
    auto inputs = foldnorm::zoo::makeInputs(eager.inputs, 13);
    auto loaded = torch::jit::load(modelPath.string());
    auto outputs = foldnorm::zoo::runTraced(loaded, inputs);

    // Python cannot read torch::save archives; a TorchScript module's buffers it can.
    torch::jit::Module data(c10::QualifiedName("__torch__.foldnorm_test.ZooData"));
    for (std::size_t i = 0; i < inputs.size(); ++i) data.register_buffer("input_" + std::to_string(i), inputs[i]);
    for (std::size_t i = 0; i < outputs.size(); ++i) data.register_buffer("output_" + std::to_string(i), outputs[i]);
    std::string tied = name == "gpt2"                      ? "lm_head.weight transformer.wte.weight"
                       : name == "opt" || name == "opt350m" ? "lm_head.weight model.decoder.embed_tokens.weight"
                                                            : "";
    data.register_attribute("tied", c10::StringType::get(), tied);
    auto dataPath = scratch.path / (name + "-data.pt");
    data.save(dataPath.string());
    command += " " + modelPath.string() + " " + dataPath.string();
  }
  auto log = scratch.path / "python.log";
  int rc = std::system((command + " > " + log.string() + " 2>&1").c_str());
  std::ifstream in(log);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  INFO(text);
  CHECK(rc == 0);
  CHECK(text.find("FAIL") == std::string::npos);
}

TEST_CASE("a C++ trace has no call stacks, yet parameter-free ops land in their block", "[zoo][import]") {
  // LibTorch's C++ tracer records no module scopes: softmax, views and residual adds get their
  // module from their neighbours. They must land in the block that computes them (so the
  // renderer's clusters and --collapse hold whole blocks), not on the common parent.
  ScratchDir scratch;
  auto model = foldnorm::importTorchScript(buildTiny(scratch, "gpt2").string());
  const auto& g = model.graph;
  int softmax = 0, adds = 0, addsInBlocks = 0;
  for (const auto& n : g.nodes()) {
    INFO(n.kind << " @ " << n.modulePath);
    if (n.kind == "aten::softmax") {
      ++softmax;
      CHECK((n.modulePath == "transformer.h.0.attn" || n.modulePath == "transformer.h.1.attn"));
    }
    if (n.kind == "aten::add") {
      ++adds;
      addsInBlocks += n.modulePath.rfind("transformer.h.", 0) == 0;
    }
  }
  CHECK(softmax == 2);
  // 2 residual adds per block (and GELU's tanh-form adds) inside blocks; only the embedding
  // sum (wte + wpe) sits outside them.
  CHECK(adds - addsInBlocks == 1);
}
