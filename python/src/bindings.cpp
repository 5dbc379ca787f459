// _foldnorm: the C++ core for the Python package (python/foldnorm/, docs/python.md).
//
// Everything the CLI does on a saved TorchScript file or torch.export archive (.pt2, the importer
// picked by content: importModel), without the CLI: import + analysis (an Analysis object that
// keeps the graph, so a notebook can render an LN's `ln:` view later), and the fold: of a
// TorchScript file, whose folded ScriptModule comes back to Python through torch's own pybind
// casters (torch/extension.h), so it never needs to be written and re-read; of a .pt2, written
// as a .pt2 (fold/fold_export.h) as `foldnorm fold` does. foldnorm::Error
// (every user-caused problem) reaches Python as foldnorm.FoldnormError with the CLI's text.
#include <torch/extension.h>

#include <cstdio>
#include <memory>
#include <optional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "foldnorm/analysis/analysis.h"
#include "foldnorm/analysis/explain.h"
#include "foldnorm/checkpoint/fold_checkpoint.h"
#include "foldnorm/common/error.h"
#include "foldnorm/common/setting_error.h"
#include "foldnorm/fold/fold.h"
#include "foldnorm/fold/model.h"
#include "foldnorm/fold/rotate.h"
#include "foldnorm/import/torchscript.h"
#include "foldnorm/torch/torch_model.h"
#ifdef FOLDNORM_WITH_RENDER
#include "foldnorm/render/render.h"
#include "foldnorm/render/scene.h"
#endif

namespace py = pybind11;

namespace foldnorm::python {
namespace {

std::vector<InputSpec> parseSpecs(const std::vector<std::string>& specs) {
  std::vector<InputSpec> out;
  for (const auto& s : specs) out.push_back(parseInputSpec(s));
  return out;
}

/// An imported model and its analysis, kept together: the render and the fold read both.
struct Analysis {
  std::optional<Model> model;  // set by analyze()
  AnalysisResult result;
  AnalysisOptions options;
  const Graph& graph() const { return model->graph(); }
};

std::shared_ptr<Analysis> analyze(const std::string& path, const std::vector<std::string>& inputs,
                                  bool untie, const std::vector<std::string>& only, bool scaleAbsorb,
                                  bool insertCentering) {
  auto a = std::make_shared<Analysis>();
  a->options.allowUntie = untie;
  a->options.only = only;
  a->options.scaleAbsorb = scaleAbsorb;
  a->options.insertCentering = insertCentering;
  ImportOptions io;
  io.inputs = parseSpecs(inputs);
  {
    py::gil_scoped_release release;
    a->model = Model::open(path, io);
    try {
      a->result = analyzeFoldability(a->graph(), a->options);
    } catch (const UnknownLayerNormPath& e) {
      throw Error("only=" + e.path() + ": no LayerNorm with that module path (analyze() lists them)");
    }
  }
  return a;
}

std::string svgOf(const Analysis& a, const std::string& lnName) {
#ifdef FOLDNORM_WITH_RENDER
  auto options = render::parseViewSpec("ln:" + lnName);
  options.legend = true;
  auto scene = render::buildScene(a.graph(), a.result, options);
  return render::renderToBytes(scene, render::ImageFormat::Svg);
#else
  throw Error("this build of foldnorm has no Graphviz rendering (FOLDNORM_RENDER=OFF)");
#endif
}

std::vector<std::string> lnNames(const Analysis& a) {
#ifdef FOLDNORM_WITH_RENDER
  return render::layerNormNames(a.result);
#else
  std::vector<std::string> names;
  for (const auto& v : a.result.layerNorms) names.push_back(v.info.modulePath);
  return names;
#endif
}

/// The CLI's `foldnorm fold`, for either format: returns (fold report JSON, folded module). The
/// fold is saved to `out` (when given) only when verification passed or did not run. A
/// TorchScript fold's module comes back to Python; a .pt2 fold has no module to hand over (None:
/// Python loads the written file with torch.export.load). rms_op "" is the format's default.
py::tuple foldAnalysed(const Analysis& a, const std::string& rmsOp, bool verify, int randomInputs,
                        const std::string& device, const std::string& out) {
  FoldOptions fo;
  if (!rmsOp.empty()) fo.rmsOp = parseRmsOp(rmsOp);
  if (randomInputs < 0 || randomInputs > 100)
    throw SettingError("random_inputs", "random_inputs must be within [0, 100]");
  fo.verify = verify;
  fo.randomInputs = randomInputs;
  fo.device = device;
  if (!out.empty()) a.model->checkOutput(out);
  std::optional<ModelFold> folded;
  FoldReport report;
  {
    py::gil_scoped_release release;
    folded = a.model->fold(a.result, fo);
    report = folded->report();
    const auto& v = report.verification;
    if (!out.empty() && (!v.ran || v.float64Equivalent)) report.savedFile = a.model->save(*folded, out);
  }
  struct ModuleOf {
    py::object operator()(const std::shared_ptr<const FoldedModel>& f) const { return py::cast(f->torch->module); }
    py::object operator()(const std::shared_ptr<const FoldedExport>&) const { return py::none(); }
  };
  return py::make_tuple(toJson(report).dump(), std::visit(ModuleOf{}, folded->parts()));
}

/// The CLI's `foldnorm rotate` (and `fold --absorb-affine` with rotate=false): returns (JSON text
/// {"fold": ..., "stage": ...}, module). Saved to `out` only when the float64 check passed.
py::tuple rotateTraced(const Analysis& a, bool rotate, const std::string& rotation, uint64_t seed, int randomInputs,
                       const std::string& out, bool insertRotations) {
  if (rotation != "hadamard" && rotation != "random")
    throw SettingError("rotation", "rotation must be 'hadamard' or 'random', not '" + rotation + "'");
  RotateOptions ro;
  ro.rotate = rotate;
  ro.kind = rotation == "random" ? RotationKind::Random : RotationKind::Hadamard;
  ro.seed = seed;
  ro.insertRotations = insertRotations;
  ro.randomInputs = std::max(1, randomInputs);
  FoldOptions fo;
  fo.randomInputs = randomInputs;
  RotatedModel rotated;
  {
    py::gil_scoped_release release;
    rotated = rotateModel(a.model->imported(), a.result, fo, ro);
    if (!out.empty() && rotated.report.passed) saveRotated(rotated, a.model->imported(), out);
  }
  nlohmann::json j{{"fold", toJson(rotated.folded.report)}, {"stage", toJson(rotated.report)}};
  return py::make_tuple(j.dump(), rotated.folded.torch->module);
}

/// The checkpoint fold (issue 29): `plan` is the plan's JSON text; returns the result's JSON
/// text. Progress goes to stderr; Ctrl-C (a pending Python signal) stops the fold, which removes
/// its partial output, and raises KeyboardInterrupt.
std::string foldCheckpoint(const std::string& src, const std::string& out, const std::string& planText,
                           bool dryRun, bool progress) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(planText);
  } catch (const nlohmann::json::exception& e) {
    throw Error("the plan is not JSON (" + std::string(e.what()) + ")");
  }
  const auto plan = checkpoint::parsePlan(j, "the plan");
  checkpoint::FoldCheckpointOptions fo;
  fo.dryRun = dryRun;
  if (progress) fo.progress = [](const std::string& line) { std::fprintf(stderr, "[foldnorm] %s\n", line.c_str()); };
  bool signalled = false;
  fo.interrupted = [&signalled] {
    py::gil_scoped_acquire gil;
    if (PyErr_CheckSignals() != 0) signalled = true;
    return signalled;
  };
  nlohmann::json result;
  try {
    py::gil_scoped_release release;
    result = checkpoint::foldCheckpoint(src, out, plan, fo);
  } catch (const Error&) {
    if (signalled) throw py::error_already_set();  // the KeyboardInterrupt PyErr_CheckSignals set
    throw;
  }
  return result.dump();
}

}  // namespace
}  // namespace foldnorm::python

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  using namespace foldnorm;
  using namespace foldnorm::python;
  m.doc() = "foldnorm's C++ core (import, analysis, render, traced fold); use the foldnorm package";
  // Subclasses (SettingError, UnknownLayerNormPath) are caught by reference too.
  py::register_exception<Error>(m, "FoldnormError", PyExc_RuntimeError);

  py::class_<Analysis, std::shared_ptr<Analysis>>(m, "Analysis")
      .def("json", [](const Analysis& a) { return toJson(a.graph(), a.result, a.model->path()).dump(); },
           "The analysis as the CLI's JSON (schema foldnorm-analysis/1)")
      .def("text", [](const Analysis& a, bool verbose) { return toText(a.graph(), a.result, verbose); },
           py::arg("verbose") = false, "The CLI's text report")
      .def("format", [](const Analysis& a) { return a.model->format(); },
           "What the analysed file is: a torch.export archive (pt2) or TorchScript")
      .def("input_specs", [](const Analysis& a) {
             std::vector<std::string> s;
             for (const auto& spec : a.model->inputSpecs()) s.push_back(spec.toString());
             return s;
           })
      .def("ln_names", &lnNames, "Names the ln: view accepts, one per LayerNorm in graph order")
      .def("verdict_sentence", [](const Analysis& a, std::size_t i) {
             if (i >= a.result.layerNorms.size()) throw py::index_error("no LayerNorm " + std::to_string(i));
             return verdictSentence(a.result.layerNorms[i]);
           })
      .def("svg", &svgOf, py::arg("ln_name"), "SVG of one LayerNorm's mean-zero graph (the ln: view)")
      .def("fold", &foldAnalysed, py::arg("rms_op") = "", py::arg("verify") = true,
           py::arg("random_inputs") = 3, py::arg("device") = "cpu", py::arg("out") = "")
      .def("rotate", &rotateTraced, py::arg("rotate") = true, py::arg("rotation") = "hadamard", py::arg("seed") = 0,
           py::arg("random_inputs") = 1, py::arg("out") = "", py::arg("insert_rotations") = true,
           "Fold, absorb the folded norms' affine, rotate the residual streams (rotate=False: absorb only)");
  m.def("analyze", &analyze, py::arg("path"), py::arg("inputs") = std::vector<std::string>{},
        py::arg("untie") = true, py::arg("only") = std::vector<std::string>{}, py::arg("scale_absorb") = true,
        py::arg("insert_centering") = true,
        "Imports a TorchScript file or a .pt2 (by content) and analyses it (the CLI's analyze; "
        "scale_absorb and insert_centering are its --no-scale-absorb and --no-insert-centering)");
  m.def("fold_checkpoint", &foldCheckpoint, py::arg("src"), py::arg("out"), py::arg("plan"),
        py::arg("dry_run") = false, py::arg("progress") = true,
        "Folds a safetensors checkpoint folder with a pattern plan (JSON text); returns the result JSON");
}
