// foldnorm rotate MODEL.pt -o OUT.pt [--rotation hadamard|random] [--seed S] [--input SPEC]...
//                 [--random N] [--no-inserted-rotations] [--json]
// Folds the model, moves every folded norm's affine into its readers where they are all linear
// (--absorb-affine of `fold` stops there), rotates each residual stream whose norms are all
// weightless RMSNorms by an orthogonal Q, checks the result against the original in float64 and
// saves it (fold/rotate.h). Exit 3 when the float64 check fails (nothing written).
#include <iostream>
#include <nlohmann/json.hpp>

#include "command.h"
#include "rotate_request.h"
#include "foldnorm/common/error.h"
#include "foldnorm/fold/rotate.h"
#include "foldnorm/fold/model.h"

namespace foldnorm::cli {

int runRotateStage(const RotateCliRequest& req) {
  checkOutputPath(req.model, req.out);
  auto progress = [](const std::string& m) { std::cerr << "[foldnorm] " << m << "\n"; };
  ImportOptions io;
  for (const auto& s : req.inputs) io.inputs.push_back(parseInputSpec(s));
  io.progress = progress;
  const Model handle = Model::open(req.model, io);
  const ImportedModel& model = handle.imported();  // a .pt2 is refused by rotateModel, in one line
  AnalysisOptions ao;
  ao.only = req.only;
  auto analysis = analyzeWithOnlyOption(handle.graph(), ao);
  FoldOptions fo;
  fo.randomInputs = req.random;
  fo.progress = progress;
  RotateOptions ro;
  ro.rotate = req.rotate;
  ro.kind = req.rotation == "random" ? RotationKind::Random : RotationKind::Hadamard;
  ro.seed = req.seed;
  ro.insertRotations = !req.noInsertedRotations;
  ro.randomInputs = std::max(1, req.random);
  ro.progress = progress;
  auto rotated = rotateModel(model, analysis, fo, ro);
  auto print = [&] {
    if (req.json) std::cout << nlohmann::json{{"fold", toJson(rotated.folded.report)}, {"stage", toJson(rotated.report)}}.dump(2) << "\n";
    else std::cout << toText(rotated.folded.report) << toText(rotated.report);
  };
  if (!rotated.report.passed) {
    print();
    std::cerr << "foldnorm: error: the model after the stage differs from the original in float64 (relative "
              << rotated.report.worstRelative64 << " > " << rotated.report.tolerance << "); not writing " << req.out
              << "\n";
    return 3;
  }
  const double saved64 = saveRotated(rotated, model, req.out);
  print();
  if (!req.json)
    std::cout << "the written file, loaded back: its forward matches the verified model; in float64 against the "
                 "original: relative "
              << saved64 << "\n";
  std::cerr << "[foldnorm] wrote " << req.out << "\n";
  return 0;
}

namespace {

void setup(CLI::App& app, int& exitCode) {
  auto o = std::make_shared<RotateCliRequest>();
  auto* cmd = app.add_subcommand("rotate", "Fold, absorb each folded norm's affine into its linear readers, rotate "
                                           "each residual stream by an orthogonal matrix (QuaRot-style), verify in "
                                           "float64 and save");
  cmd->add_option("model", o->model, "TorchScript file (.pt), not yet folded (rotate folds it first)")->required();
  cmd->add_option("-o,--output", o->out, "Where to write the rotated model (never the input)")->required();
  addInputOption(*cmd, o->inputs);
  cmd->add_option("--only", o->only, "Fold only these LayerNorms (module paths)")->take_all();
  cmd->add_option("--rotation", o->rotation, "hadamard: a randomized Hadamard matrix where the width has a "
                                             "construction (2^k, 12*2^k, 20*2^k, ...; otherwise random); random: "
                                             "a random orthogonal matrix")
      ->check(CLI::IsMember({"hadamard", "random"}));
  cmd->add_option("--seed", o->seed, "Seed of the rotation's random signs or matrix");
  cmd->add_option("--random", o->random, "Random input sets drawn from the spec, besides the example")
      ->check(CLI::Range(1, 100));
  cmd->add_flag("--no-inserted-rotations", o->noInsertedRotations,
                "Refuse a stream a non-linear op writes or reads (a GELU stem, a norm that keeps its affine, "
                "the model's output) instead of inserting the rotation there as an op");
  cmd->add_flag("--json", o->json, "Print the fold report and the stage report as JSON");
  cmd->callback([o, &exitCode] { exitCode = runRotateStage(*o); });
}

FOLDNORM_REGISTER_COMMAND("rotate", setup);

}  // namespace
}  // namespace foldnorm::cli
