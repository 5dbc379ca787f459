// What a rotation is for (issue 30, docs/rotation.md): on a model whose residual stream carries
// channel outliers, the largest channel's share of the stream and the error of a simulated
// per-token symmetric int8 / int4 quantization of the activations at the linear layers' inputs,
// before and after `foldnorm rotate`.
//
//   rotation_outliers [--preset tiny] [--channels 2] [--factor 25] [--seed 0] [--sets 4] [--out FILE]
//
// The model is the zoo's GPT-2 (randomly initialized, so its stream has no outliers of its own);
// the outliers are planted deterministically: channels 0..channels-1 of every writer of the stream
// (wte, wpe, each c_proj's weight columns and bias) are multiplied by `factor`, which makes those
// channels of the stream `factor` times larger (a "massive activation" pattern). Rows: the model
// as traced (LayerNorm: what its linears read are LN outputs), the affine absorbed (weightless
// RMSNorm, not rotated), and rotated (randomized Hadamard; random orthogonal). The stream is
// measured at every norm's input; a linear input is whatever a linear/addmm reads from a norm.
// Metrics are over the example inputs and `sets - 1` random input sets of the spec.
#include <CLI/CLI.hpp>
#include <torch/script.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <string>
#include <unistd.h>

#include "docs_output.h"
#include "foldnorm/common/measure.h"
#include "foldnorm/fold/rotate.h"
#include "foldnorm/import/torchscript.h"
#include "foldnorm/torch/torch_model.h"
#include "foldnorm/zoo/zoo.h"
#include "program_error.h"

using namespace foldnorm;
namespace jit = torch::jit;

namespace {

bool isNorm(const jit::Node* n) {
  const std::string k = n->kind().toQualString();
  return k == "aten::layer_norm" || k == "aten::rms_norm" || k == "foldnorm::rms_norm";
}

/// Whether `v` is a norm's output, through layout ops.
bool fromNorm(const jit::Value* v) {
  while (true) {
    const auto* p = v->node();
    if (isNorm(p)) return true;
    const std::string k = p->kind().toQualString();
    if (k != "aten::view" && k != "aten::reshape" && k != "aten::contiguous" && k != "aten::dropout") return false;
    v = p->input(0);
  }
}

struct Captured {
  std::vector<at::Tensor> stream, linearInputs;
};

/// The inputs of every norm and the activation input of every linear reading a norm, on `inputs`.
Captured capture(const jit::Module& m, const std::shared_ptr<jit::Graph>& graph, const std::vector<at::Tensor>& inputs) {
  auto copy = graph->copy();
  std::vector<jit::Value*> stream, linear;
  for (auto* n : copy->nodes()) {
    const std::string k = n->kind().toQualString();
    if (isNorm(n)) stream.push_back(n->input(0));
    if (k == "aten::linear" && fromNorm(n->input(0))) linear.push_back(n->input(0));
    if (k == "aten::addmm" && fromNorm(n->input(1))) linear.push_back(n->input(1));
  }
  std::vector<jit::Value*> all(stream);
  all.insert(all.end(), linear.begin(), linear.end());
  auto* tuple = copy->insertNode(copy->createTuple(all));
  while (!copy->outputs().empty()) copy->eraseOutput(0);
  copy->registerOutput(tuple->output());
  auto values = runGraph(m, copy, inputs);
  Captured c;
  c.stream.assign(values.begin(), values.begin() + static_cast<long>(stream.size()));
  c.linearInputs.assign(values.begin() + static_cast<long>(stream.size()), values.end());
  return c;
}

at::Tensor rows(const at::Tensor& x) { return x.detach().to(at::kDouble).reshape({-1, x.size(-1)}); }

/// Mean over tokens of max_c |x_c| / |x|_2 (1 when one channel holds everything, 1/sqrt(d) at best).
double largestShare(const std::vector<at::Tensor>& xs) {
  double sum = 0;
  int64_t n = 0;
  for (const auto& x : xs) {
    auto r = rows(x);
    sum += (r.abs().amax(1) / r.norm(2, 1).clamp_min(1e-300)).sum().item<double>();
    n += r.size(0);
  }
  return sum / static_cast<double>(n);
}

/// |x - Q(x)|_F / |x|_F over all tensors, Q per-token symmetric round-to-nearest with `bits`.
double quantError(const std::vector<at::Tensor>& xs, int bits) {
  const double qmax = std::pow(2.0, bits - 1) - 1;
  double num = 0, den = 0;
  for (const auto& x : xs) {
    auto r = rows(x);
    auto scale = r.abs().amax(1, true).clamp_min(1e-300) / qmax;
    auto q = (r / scale).round().clamp(-qmax, qmax) * scale;
    num += (r - q).pow(2).sum().item<double>();
    den += r.pow(2).sum().item<double>();
  }
  return std::sqrt(num / den);
}

struct Row {
  std::string variant;
  double share = 0, int8 = 0, int4 = 0;
};

Row measure(const std::string& variant, const jit::Module& m, const std::shared_ptr<jit::Graph>& graph,
            const std::vector<std::vector<at::Tensor>>& sets) {
  Captured all;
  for (const auto& s : sets) {
    auto c = capture(m, graph, s);
    all.stream.insert(all.stream.end(), c.stream.begin(), c.stream.end());
    all.linearInputs.insert(all.linearInputs.end(), c.linearInputs.begin(), c.linearInputs.end());
  }
  return {variant, largestShare(all.stream), quantError(all.linearInputs, 8), quantError(all.linearInputs, 4)};
}

bool endsWith(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

/// Channels [0, channels) of every stream writer of the zoo GPT-2 times `factor`.
void plant(const jit::Module& m, int64_t channels, double factor) {
  at::NoGradGuard noGrad;
  for (const auto& p : m.named_parameters(/*recurse=*/true))
    if (endsWith(p.name, "wte.weight") || endsWith(p.name, "wpe.weight") || endsWith(p.name, "c_proj.weight") ||
        endsWith(p.name, "c_proj.bias"))
      p.value.narrow(-1, 0, channels).mul_(factor);
}

}  // namespace

static int run(int argc, char** argv) {
  std::string preset = "tiny", out;
  int64_t channels = 2;
  double factor = 25;
  uint64_t seed = 0;
  int sets = 4;
  CLI::App app{"Outlier channels and simulated int8/int4 activation error before and after foldnorm rotate"};
  app.add_option("--preset", preset, "Zoo GPT-2 preset");
  app.add_option("--channels", channels, "Channels with planted outliers")->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  app.add_option("--factor", factor, "How much larger those channels are")->check(CLI::Range(1e-6, 1e6));
  app.add_option("--seed", seed, "Seed of the model and the rotation");
  app.add_option("--sets", sets, "Input sets: the example inputs and sets - 1 random ones")->check(CLI::Range(1, 1000));
  app.add_option("--out", out, "Also write the table here");
  CLI11_PARSE(app, argc, argv);
  const auto dir = std::filesystem::temp_directory_path() / ("foldnorm-rotation-outliers-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto clean = (dir / "gpt2.pt").string(), planted = (dir / "gpt2-planted.pt").string();
  ZooBuildOptions zo;
  zo.preset = preset;
  zo.seed = seed;
  buildZooModel("gpt2", clean, zo);
  {
    jit::ExtraFilesMap extra{{kInputSpecExtraFile, ""}};
    auto m = jit::load(clean, c10::Device(c10::kCPU), extra);
    plant(m, channels, factor);
    m.save(planted, extra);
  }

  std::string table = "| model | variant | largest channel / stream norm (mean over tokens) | int8 error | int4 error |\n"
                      "|---|---|---:|---:|---:|\n";
  std::string checks;
  for (const auto& [label, path] : {std::pair<std::string, std::string>{"GPT-2 " + preset, clean},
                                    {"GPT-2 " + preset + ", planted", planted}}) {
    auto model = importTorchScript(path);
    auto analysis = analyzeFoldability(model.graph);
    std::vector<std::vector<at::Tensor>> inputSets{model.torch->exampleInputs};
    for (int s = 1; s < sets; ++s) inputSets.push_back(makeInputs(model.inputSpecs, 100 + static_cast<uint64_t>(s)));
    std::vector<Row> rowsOut{measure("LayerNorm (as traced)", model.torch->module, model.torch->graph, inputSets)};
    FoldOptions fo;
    fo.randomInputs = 1;
    for (const auto& [variant, rotate, kind] :
         {std::tuple<std::string, bool, RotationKind>{"absorbed, not rotated", false, RotationKind::Hadamard},
          {"rotated: randomized Hadamard", true, RotationKind::Hadamard},
          {"rotated: random orthogonal", true, RotationKind::Random}}) {
      RotateOptions ro;
      ro.rotate = rotate;
      ro.kind = kind;
      ro.seed = seed;
      auto r = rotateModel(model, analysis, fo, ro);
      if (!r.report.passed) {
        std::cerr << "rotation_outliers: " << variant << " failed its float64 check\n" << toText(r.report);
        return 1;
      }
      checks += format("- %s, %s: float64 relative %.1e against the original\n", label.c_str(), variant.c_str(),
                       r.report.worstRelative64);
      rowsOut.push_back(measure(variant, r.folded.torch->module, r.folded.torch->graph, inputSets));
    }
    for (const auto& row : rowsOut)
      table += format("| %s | %s | %.3f | %.2e | %.2e |\n", label.c_str(), row.variant.c_str(), row.share, row.int8,
                      row.int4);
  }
  const auto text = table + "\n" + checks;
  std::cout << text;
  if (!out.empty()) analyses::writeAtomically(out, text);
  for (const auto& f : {clean, planted}) std::filesystem::remove(f);
  std::filesystem::remove(dir);
  return 0;
}

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    return foldnorm::analyses::reportFailure("rotation_outliers", e);
  }
}
