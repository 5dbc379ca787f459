// `foldnorm bench X.pt2`: the original and the folded torch.export program, both run by foldnorm's
// interpreter (interpreter/export_interpreter.h), timed as the TorchScript bench times its modules
// (bench_model_internal.h); and benchModel, which hands a model's fold to its format's timer.
#include <c10/core/InferenceMode.h>

#include <optional>
#include <regex>

#include "bench_model_internal.h"
#include "foldnorm/bench/bench_model.h"
#include "foldnorm/common/measure.h"
#include "foldnorm/common/memory.h"
#include "foldnorm/fold/fold_export.h"
#include "foldnorm/fold/model.h"
#include "foldnorm/import/export.h"
#include "foldnorm/import/export_archive.h"
#include "foldnorm/interpreter/export_interpreter.h"
#include "foldnorm/torch/torch_model.h"

namespace foldnorm::bench {
namespace {

using json = nlohmann::json;
using detail::Bind;
using detail::Forward;

constexpr const char* kInterpreterExecutor =
    "foldnorm's .pt2 interpreter: each program node's op looked up in the dispatcher and called boxed, "
    "both programs alike (not torch.compile or AOTInductor)";

/// The range a dimension of a user input may take, from the program's signature.
struct DimRange {
  std::string symbol;  // "" for a static size
  int64_t min = 0, max = 0;
  bool bounded = true;  // false: no upper bound recorded (int_oo)
};

std::optional<int64_t> intOf(const json& j) {
  if (j.is_number_integer()) return j.get<int64_t>();
  return std::nullopt;  // int_oo is written as a float or a string, or an unsigned beyond int64
}

/// Per tensor user input, in signature order (the order of model.inputSpecs), its dims' ranges:
/// a static size is [n, n]; a symbolic one the range_constraints entry of its symbol.
std::vector<std::pair<std::string, std::vector<DimRange>>> userInputRanges(const json& program) {
  std::vector<std::pair<std::string, std::vector<DimRange>>> out;
  const auto& gm = program.at("graph_module");
  const auto& values = gm.at("graph").at("tensor_values");
  const json constraints = program.value("range_constraints", json::object());
  static const std::regex kSymbol(R"(^Symbol\('([A-Za-z_][A-Za-z0-9_]*)'.*\)$)");
  for (const auto& spec : gm.at("signature").at("input_specs")) {
    if (!spec.contains("user_input")) continue;
    const auto& arg = spec.at("user_input").at("arg");
    if (!arg.contains("as_tensor")) continue;
    const std::string name = arg.at("as_tensor").at("name").get<std::string>();
    std::vector<DimRange> dims;
    if (values.contains(name)) {
      for (const auto& size : values.at(name).value("sizes", json::array())) {
        DimRange d;
        if (size.contains("as_int")) {
          d.min = d.max = size.at("as_int").get<int64_t>();
        } else {
          std::smatch m;
          const std::string expr = size.at("as_expr").value("expr_str", std::string());
          if (std::regex_match(expr, m, kSymbol) && constraints.contains(m[1].str())) {
            const auto& c = constraints.at(m[1].str());
            d.symbol = m[1].str();
            d.min = intOf(c.value("min_val", json(0))).value_or(0);
            const auto max = intOf(c.value("max_val", json(nullptr)));
            d.bounded = max.has_value();
            d.max = max.value_or(0);
          } else {
            d.symbol = expr;  // an expression of symbols: not checked here, the run decides
            d.bounded = false;
          }
        }
        dims.push_back(d);
      }
    }
    out.emplace_back(name, std::move(dims));
  }
  return out;
}

/// Why the program cannot take inputs of `specs` ("" when it can): a size the export fixed, or a
/// dynamic size outside the range it was exported for. Checked before any forward, because the
/// interpreter (unlike ExportedProgram.module()) does not check the signature's constraints.
std::string refusal(const std::vector<std::pair<std::string, std::vector<DimRange>>>& ranges,
                    const std::vector<InputSpec>& specs) {
  if (ranges.size() != specs.size()) return "";
  for (std::size_t i = 0; i < specs.size(); ++i) {
    const auto& [name, dims] = ranges[i];
    if (dims.size() != specs[i].shape.size()) continue;
    for (std::size_t d = 0; d < dims.size(); ++d) {
      const int64_t n = specs[i].shape[d];
      const DimRange& r = dims[d];
      if (r.symbol.empty() && n != r.min) {
        return format("input '%s' dim %zu was exported with the static size %lld, so the program cannot run %lld "
                      "(export that dimension as a torch.export.Dim to time other sizes)",
                      name.c_str(), d, static_cast<long long>(r.min), static_cast<long long>(n));
      }
      if (!r.symbol.empty() && r.bounded && (n < r.min || n > r.max)) {
        return format("input '%s' dim %zu is %lld, outside the range [%lld, %lld] the program was exported for (%s)",
                      name.c_str(), d, static_cast<long long>(n), static_cast<long long>(r.min),
                      static_cast<long long>(r.max), r.symbol.c_str());
      }
    }
  }
  return "";
}

Bind bindProgram(const ExportInterpreter& program) {
  return [&program](const std::vector<at::Tensor>& inputs) -> Forward {
    return [&program, inputs] { program.run(inputs); };
  };
}

}  // namespace

FoldedExport foldExportForBench(const ImportedModel& model, const AnalysisResult& analysis,
                                const BenchModelOptions& options, std::ostream& progress) {
  checkOptions(options);
  if (!model.exported) throw std::logic_error("bench: a .pt2 fold of a model that is not a .pt2");
  detail::requireSomethingFolds(model, analysis);
  const auto foldOptions = detail::foldOptionsFor(options, progress);
  return foldExport(model, analysis, foldOptions);
}

ModelBenchReport runModelBench(const ImportedModel& model, const FoldedExport& folded,
                               const BenchModelOptions& options, std::ostream& progress) {
  checkOptions(options);
  if (!model.exported || !model.exported->archive)
    throw std::logic_error("bench: a .pt2 fold of a model that is not a .pt2");
  const auto& archive = *model.exported->archive;
  const auto dtype = detail::parseDtype(options.dtype);
  const detail::ScopedThreads threads(options.threads);
  auto report = detail::startReport(model, folded.report, options, "interpreter", kInterpreterExecutor, progress);

  // Both programs compiled once, their state cast to the timing dtype and moved to the device once;
  // float32 keeps the program's own dtypes (as the TorchScript bench keeps the trace's).
  progress << "[bench] compiling both programs for the interpreter (" << options.dtype << " on " << options.device
           << ")\n"
           << std::flush;
  std::map<std::string, at::Tensor> state;
  for (const auto& t : archive.tensors) state[t.name] = t.tensor;
  const ExportRunOptions run{dtype == at::kFloat ? std::nullopt : std::optional<at::ScalarType>(dtype),
                             detail::deviceOf(options)};
  c10::InferenceMode inference;
  const ExportInterpreter original(archive.program, state, run);
  const ExportInterpreter foldedProgram(folded.program, folded.state, run);
  // The null fold: the original program again, over its own copy of the state (a float32 CPU run
  // keeps the archive's tensors, so without the clones both would read the same bytes).
  std::optional<ExportInterpreter> control;
  std::vector<at::Tensor> stateTensors;
  for (const auto& entry : state) stateTensors.push_back(entry.second);
  // As the TorchScript bench: a copy that would not fit is left out, and said.
  report.nullControlSkipped = options.nullControl && detail::deviceOf(options).is_cpu()
                                  ? nullControlRefusal(distinctStorageBytes(stateTensors), availableMemoryBytes())
                                  : "";
  if (!report.nullControlSkipped.empty()) {
    progress << "[bench] null fold skipped: " << report.nullControlSkipped << "\n";
  } else if (options.nullControl) {
    std::map<std::string, at::Tensor> copied;
    for (const auto& [name, tensor] : state) copied[name] = tensor.clone();
    control.emplace(archive.program, copied, run);
  }
  if (options.layouts > 1)
    progress << "[bench] parameter layouts: the interpreter holds its programs' state, so each keeps where "
                "it was allocated (layouts 1)\n";
  const auto ranges = userInputRanges(archive.program);
  detail::Runners runners{bindProgram(original), bindProgram(foldedProgram),
                          [ranges](const std::vector<InputSpec>& specs) { return refusal(ranges, specs); },
                          control ? bindProgram(*control) : detail::Bind{}, {}};
  detail::timeCases(report, model, runners, options, progress);
  return report;
}

ModelBenchReport benchModel(const ImportedModel& model, const AnalysisResult& analysis,
                            const BenchModelOptions& options, std::ostream& progress) {
  checkOptions(options);
  detail::requireSomethingFolds(model, analysis);
  const ModelFold fold = Model::borrow(model).fold(analysis, detail::foldOptionsFor(options, progress));
  // Each format's fold to its own timer (runModelBench's two overloads).
  return std::visit([&](const auto& folded) { return runModelBench(model, *folded, options, progress); },
                    fold.parts());
}

}  // namespace foldnorm::bench
