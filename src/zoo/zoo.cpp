// The zoo's registry and the build pipeline: eager model -> trace -> check -> save.
#include "foldnorm/zoo/zoo.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "foldnorm/common/error.h"
#include "layers.h"

namespace foldnorm {
namespace {

struct ZooEntry {
  ZooModelInfo info;
  zoo::EagerModel (*build)(const std::string& preset, int64_t layers, at::Generator& gen);
};

// The registry as one table, in the order `zoo list` shows (GPT-2 first): name, what it is,
// the reference it follows, presets ("tiny" first) and the default; each model's file builds it.
const std::vector<ZooEntry>& entries() {
  static const std::vector<ZooEntry> kEntries = {
      {{"gpt2", "GPT-2 decoder: pre-LN blocks with Conv1D (addmm) projections, final ln_f, lm_head tied to wte",
        "Hugging Face transformers GPT2LMHeadModel (eager attention)",
        {"tiny", "small", "medium", "large", "xl", "xl-graph"}, "small"}, &zoo::buildGpt2},
      {{"bert", "BERT encoder: embeddings LayerNorm, post-LN layers (LayerNorm after each residual add), GELU, "
        "tanh pooler (base-16k: a 16384-row position table, for long-sequence timing)",
        "Hugging Face transformers BertModel (eager attention)", {"tiny", "base", "base-16k"}, "base"},
       &zoo::buildBert},
      {{"opt", "OPT decoder: pre-LN layers with ReLU MLPs, final_layer_norm, learned positions (offset 2), "
        "lm_head tied to embed_tokens", "Hugging Face transformers OPTForCausalLM (eager attention)",
        {"tiny", "125m"}, "125m"}, &zoo::buildOpt},
      {{"opt350m", "OPT-350m decoder: post-LN layers (do_layer_norm_before=False), 512-wide embeddings with "
        "project_in/project_out, no final norm, tied lm_head",
        "Hugging Face transformers OPTForCausalLM, facebook/opt-350m config", {"tiny", "350m"}, "350m"},
       &zoo::buildOpt350m},
      {{"phi", "Phi decoder: parallel attention and MLP sharing one input_layernorm, partial rotary, gelu_new, "
        "final_layernorm, lm_head with bias", "Hugging Face transformers PhiForCausalLM (eager attention)",
        {"tiny", "phi-1_5", "phi-2"}, "phi-2"}, &zoo::buildPhi},
      {{"llama", "Llama decoder (negative control): RMSNorm written out (pow/mean/rsqrt/mul), rotary positions, "
        "SwiGLU MLP, grouped-query attention, untied lm_head",
        "Hugging Face transformers LlamaForCausalLM (eager attention)", {"tiny", "tinyllama-1.1b", "7b"},
        "tinyllama-1.1b"}, &zoo::buildLlama},
      {{"vit", "Vision Transformer: patch conv, class token, pre-LN encoder blocks (ln_1/ln_2, eps 1e-6), "
        "exact GELU, final encoder.ln, linear head",
        "torchvision.models.VisionTransformer (vit_b_16); attention written out", {"tiny", "b_16"}, "b_16"},
       &zoo::buildVit},
      {{"swin_t", "Swin-T: shifted-window attention (roll, masks, relative position bias), pre-LN blocks, "
        "PatchMerging (strided slices + cat + LayerNorm + reduction), final norm", "torchvision.models.swin_t",
        {"tiny", "t"}, "t"}, &zoo::buildSwin},
      {{"convnext_t", "ConvNeXt-T: depthwise 7x7 conv blocks with channels-last LayerNorm (permute), layer "
        "scale, LayerNorm2d in the stem, downsampling and classifier", "torchvision.models.convnext_tiny",
        {"tiny", "t"}, "t"}, &zoo::buildConvnext},
  };
  return kEntries;
}

std::string joined(const std::vector<std::string>& items) {
  std::string s;
  for (const auto& i : items) s += (s.empty() ? "" : ", ") + i;
  return s;
}

const ZooEntry& findEntry(const std::string& name) {
  for (const auto& e : entries()) {
    if (e.info.name == name) return e;
  }
  std::vector<std::string> names;
  for (const auto& e : entries()) names.push_back(e.info.name);
  throw Error("unknown zoo model '" + name + "' (known: " + joined(names) + ")");
}

std::string checkedPreset(const ZooModelInfo& info, const std::string& preset) {
  if (preset.empty()) return info.defaultPreset;
  for (const auto& p : info.presets) {
    if (p == preset) return p;
  }
  throw Error("unknown preset '" + preset + "' for zoo model '" + info.name +
              "' (presets: " + joined(info.presets) + ")");
}

}  // namespace

const std::vector<ZooModelInfo>& zooModels() {
  static const std::vector<ZooModelInfo> kInfos = [] {
    std::vector<ZooModelInfo> infos;
    for (const auto& e : entries()) infos.push_back(e.info);
    return infos;
  }();
  return kInfos;
}

const ZooModelInfo& findZooModel(const std::string& name) { return findEntry(name).info; }

namespace zoo {

EagerModel makeEagerModel(const std::string& name, const std::string& preset, uint64_t seed, int64_t layers) {
  const auto& entry = findEntry(name);
  auto checked = checkedPreset(entry.info, preset);
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  auto model = entry.build(checked, layers, gen);
  model.name = name;
  model.preset = checked;
  model.root->eval();
  return model;
}

}  // namespace zoo

void buildZooModel(const std::string& name, const std::string& outPath, const ZooBuildOptions& options) {
  auto say = [&](const std::string& line) {
    if (options.progress) options.progress(line);
  };
  const auto& info = findZooModel(name);
  auto preset = checkedPreset(info, options.preset);

  say("building " + name + " (" + preset + (options.layers > 0 ? ", " + std::to_string(options.layers) + " layers" : "") +
      ") with seed " + std::to_string(options.seed));
  auto model = zoo::makeEagerModel(name, preset, options.seed, options.layers);
  say(std::to_string(zoo::countParameters(*model.root)) + " parameters");

  auto inputs = zoo::makeInputs(model.inputs, options.seed);
  std::vector<std::string> specTexts;
  for (const auto& s : model.inputs) specTexts.push_back(s.toString());
  say("tracing on " + joined(specTexts));
  auto traced = zoo::traceEagerModel(model, inputs);

  // The trace must compute what the eager model computes; a divergence here is a zoo bug
  // (an op the tracer records differently), not something to hand to the analysis.
  std::vector<torch::Tensor> eager;
  {
    torch::NoGradGuard noGrad;
    eager = model.forward(inputs);
  }
  auto replay = zoo::runTraced(traced, inputs);
  if (replay.size() != eager.size()) {
    throw Error("zoo model '" + name + "': the trace returns " + std::to_string(replay.size()) +
                " outputs, the eager model " + std::to_string(eager.size()));
  }
  for (std::size_t i = 0; i < eager.size(); ++i) {
    // Both run the same kernels; only reassociation inside them may differ.
    double scale = eager[i].abs().max().item<double>();
    double diff = (eager[i] - replay[i]).abs().max().item<double>();
    if (!(diff <= 1e-5 * (1.0 + scale))) {
      throw Error("zoo model '" + name + "': traced output " + std::to_string(i) +
                  " differs from the eager model by " + std::to_string(diff));
    }
  }

  say("saving " + outPath);
  // <cstdio> rather than std::filesystem: libtorch.so exports its own std::filesystem symbols,
  // and some of them crash in this build.
  std::string tmp = outPath + ".tmp" + std::to_string(static_cast<long>(getpid()));
  torch::jit::ExtraFilesMap extra{{kInputSpecExtraFile, inputSpecsToJson(model.inputs)}};
  try {
    traced.save(tmp, extra);
  } catch (const c10::Error& e) {
    std::remove(tmp.c_str());
    throw Error("cannot write '" + outPath + "': " + e.what_without_backtrace());
  }
  if (std::rename(tmp.c_str(), outPath.c_str()) != 0) {
    std::string why = std::strerror(errno);
    std::remove(tmp.c_str());
    throw Error("cannot write '" + outPath + "': " + why);
  }
  say("done");
}

}  // namespace foldnorm
