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

// Listed explicitly (not self-registered) so `zoo list` keeps this order: GPT-2 first.
const std::vector<zoo::ZooEntry>& entries() {
  static const std::vector<zoo::ZooEntry> kEntries = {
      zoo::gpt2Entry(), zoo::bertEntry(), zoo::optEntry(),  zoo::opt350mEntry(), zoo::phiEntry(),
      zoo::llamaEntry(), zoo::vitEntry(), zoo::swinEntry(), zoo::convnextEntry(),
  };
  return kEntries;
}

std::string joined(const std::vector<std::string>& items) {
  std::string s;
  for (const auto& i : items) s += (s.empty() ? "" : ", ") + i;
  return s;
}

const zoo::ZooEntry& findEntry(const std::string& name) {
  for (const auto& e : entries()) {
    if (e.info.name == name) return e;
  }
  std::vector<std::string> names;
  for (const auto& e : entries()) names.push_back(e.info.name);
  throw Error("unknown zoo model '" + name + "' (known: " + joined(names) +
              "; `foldnorm zoo list` describes them)");
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

EagerModel makeEagerModel(const std::string& name, const std::string& preset, uint64_t seed) {
  const auto& entry = findEntry(name);
  auto checked = checkedPreset(entry.info, preset);
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  auto model = entry.build(checked, gen);
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

  say("building " + name + " (" + preset + ") with seed " + std::to_string(options.seed));
  auto model = zoo::makeEagerModel(name, preset, options.seed);
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
