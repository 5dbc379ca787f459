// foldnorm fold MODEL.pt|MODEL.pt2 -o OUT [--input SPEC]... [--no-untie] [--only LN_PATH]...
//               [--no-scale-absorb] [--no-insert-centering] [--rms-op foldnorm|aten]
//               [--device cpu|cuda] [--no-verify] [--random N] [--no-fuse] [--json] [--absorb-affine]
// A .pt2 (torch.export) is folded into a .pt2, a TorchScript file into a .pt (fold/model.h).
#include <torch/cuda.h>

#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "command.h"
#include "rotate_request.h"
#include "foldnorm/common/error.h"
#include "foldnorm/fold/fold.h"
#include "foldnorm/fold/model.h"

namespace foldnorm::cli {
namespace {

struct FoldCliOptions {
  std::string model, out, device = "cpu", rmsOp;  // empty: foldnorm for a .pt, aten (portable) for a .pt2
  std::vector<std::string> inputs, only;
  bool noUntie = false, noVerify = false, noFuse = false, json = false, noScaleAbsorb = false,
       noInsertCentering = false, absorbAffine = false;
  int random = 3;
};

void setup(CLI::App& app, int& exitCode) {
  auto o = std::make_shared<FoldCliOptions>();
  auto* cmd = app.add_subcommand("fold", "Center the planned leaves, replace foldable LayerNorms by "
                                         "foldnorm::rms_norm, verify (float32 and float64) and save");
  cmd->add_option("model", o->model, "TorchScript file (.pt) from torch.jit.trace, or a torch.export archive (.pt2)")->required();
  cmd->add_option("-o,--output", o->out, "Where to write the folded model (never the input)")->required();
  addInputOption(*cmd, o->inputs);
  cmd->add_flag("--no-untie", o->noUntie, "Never copy a tied/shared parameter (LNs needing one stay LayerNorm)");
  cmd->add_option("--only", o->only, "Fold only these LayerNorms (module paths)")->take_all();
  addBeyondPaperFlags(*cmd, o->noScaleAbsorb, o->noInsertCentering);
  cmd->add_option("--device", o->device, "Where verification runs")->check(CLI::IsMember({"cpu", "cuda"}));
  cmd->add_flag("--no-verify", o->noVerify, "Skip verification (for huge models only)");
  cmd->add_option("--random", o->random, "Random input sets drawn from the spec, besides the example")
      ->check(CLI::Range(0, 100));
  cmd->add_flag("--no-fuse", o->noFuse,
                "Keep each residual add separate from the folded norm (no foldnorm::add_rms_norm)");
  cmd->add_option("--rms-op", o->rmsOp, "foldnorm: our fused op (fast; loading the model needs "
                                       "libfoldnorm_ops.so); aten: aten::rms_norm plus a bias add "
                                       "(runs in plain PyTorch). Default: foldnorm for a .pt, aten for a .pt2")
      ->check(CLI::IsMember(std::vector<std::string>(std::begin(kRmsOpNames), std::end(kRmsOpNames))));
  cmd->add_flag("--json", o->json, "Print the fold report as JSON (schema foldnorm-fold/1)");
  cmd->add_flag("--absorb-affine", o->absorbAffine,
                "Move each folded norm's weight and bias into its readers where all are linear (weightless "
                "aten::rms_norm left; TorchScript only; no add+norm fusion; `foldnorm rotate` goes on to rotate)");
  cmd->callback([o, &exitCode] {
    if (o->absorbAffine) {  // the absorb + rotate stage, stopping after the absorb (cmd_rotate.cpp)
      RotateCliRequest req;
      req.model = o->model, req.out = o->out, req.inputs = o->inputs, req.only = o->only;
      req.random = std::max(1, o->random), req.json = o->json, req.rotate = false;
      exitCode = runRotateStage(req);
      return;
    }
    checkOutputPath(o->model, o->out);
    // Before the import (seconds on a large model), and in the option's own spelling.
    if (o->device == "cuda" && !o->noVerify && !torch::cuda::is_available())
      throw Error("--device cuda: no CUDA device is available here");
    auto progress = [](const std::string& m) { std::cerr << "[foldnorm] " << m << "\n"; };
    ImportOptions io;
    for (const auto& s : o->inputs) io.inputs.push_back(parseInputSpec(s));
    io.progress = progress;
    const Model model = Model::open(o->model, io);
    model.checkOutput(o->out);  // the kind is known by content only now, before any fold work
    // The fold copies the loaded model; the file's bytes kept for fresh copies (as many again
    // as the model) are not needed past the import.
    model.releaseFileBytes();
    AnalysisOptions ao;
    ao.allowUntie = !o->noUntie;
    ao.only = o->only;
    ao.scaleAbsorb = !o->noScaleAbsorb;
    ao.insertCentering = !o->noInsertCentering;
    auto analysis = analyzeWithOnlyOption(model.graph(), ao);
    FoldOptions fo;
    fo.verify = !o->noVerify;
    fo.randomInputs = o->random;
    fo.device = o->device;
    fo.fuseAddNorm = !o->noFuse;
    if (!o->rmsOp.empty()) fo.rmsOp = parseRmsOp(o->rmsOp);  // unset: the format's default
    fo.progress = progress;
    const ModelFold folded = model.fold(analysis, fo);
    FoldReport report = folded.report();
    const auto& v = report.verification;
    if (v.ran && !v.passed()) {
      if (o->json) std::cout << toJson(report).dump(2) << "\n";
      else std::cout << toText(report);
      for (const auto& c : v.checks) {
        if (c.dtype == "float64" && !(c.maxRel <= fo.float64Tolerance))
          std::fprintf(stderr, "foldnorm: error: output %zu (%s) diverged in float64: relative error %.3e > %.0e; "
                       "not writing %s\n", c.output, c.shape.c_str(), c.maxRel, fo.float64Tolerance, o->out.c_str());
        if (c.unexplainedFlips > 0)
          std::fprintf(stderr, "foldnorm: error: output %zu (%s): %lld prediction flip(s) not within float32 "
                       "rounding; not writing %s\n", c.output, c.shape.c_str(),
                       static_cast<long long>(c.unexplainedFlips), o->out.c_str());
      }
      exitCode = 3;
      return;
    }
    // The save loads the written file back and checks it (SavedFileCheck); the report says so.
    report.savedFile = model.save(folded, o->out);
    if (o->json) std::cout << toJson(report).dump(2) << "\n";
    else std::cout << toText(report);
    std::cerr << "[foldnorm] wrote " << o->out << "\n";
    exitCode = 0;
  });
}

FOLDNORM_REGISTER_COMMAND("fold", setup);

}  // namespace
}  // namespace foldnorm::cli
