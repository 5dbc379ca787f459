// The fold rewrite and its verification (see include/foldnorm/fold/fold.h).
#include "foldnorm/fold/fold.h"

#include <cstdarg>
#include <cstdio>
#include <torch/csrc/jit/passes/dead_code_elimination.h>
#include <torch/csrc/jit/passes/inliner.h>
#include <torch/csrc/jit/serialization/import.h>
#include <unistd.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "foldnorm/common/error.h"
#include "foldnorm/common/setting_error.h"
#include "foldnorm/fold/fold_support.h"
#include "foldnorm/ops/rms_norm.h"
#include "foldnorm/torch/model_surgery.h"
#include "foldnorm/torch/torch_model.h"

namespace foldnorm {
namespace {

namespace jit = torch::jit;

// printf-style formatting: fmt's headers here would be LibTorch's bundled copy, whose symbols
// the system libfmt does not have.
std::string strf(const char* format, ...) {
  va_list args;
  va_start(args, format);
  char buffer[1024];
  std::vsnprintf(buffer, sizeof(buffer), format, args);
  va_end(args);
  return buffer;
}

/// Node and value tables of `graph` in the order the importer walked them, checked against the
/// imported model's tables (same code, same inlining => same order).
struct GraphTables {
  std::vector<jit::Node*> nodes;    // by Node::origin
  std::vector<jit::Value*> values;  // by ValueId
};

GraphTables tablesFor(const std::shared_ptr<jit::Graph>& graph, const TorchModel& reference) {
  GraphTables t;
  t.nodes.push_back(graph->param_node());
  for (auto* v : graph->inputs()) t.values.push_back(v);
  for (auto* n : graph->nodes()) {
    t.nodes.push_back(n);
    for (auto* v : n->outputs()) t.values.push_back(v);
  }
  t.nodes.push_back(graph->return_node());
  if (t.nodes.size() != reference.nodes.size() || t.values.size() != reference.values.size())
    throw std::logic_error("fold: the copy's graph does not match the analysed graph");
  for (std::size_t i = 0; i < t.nodes.size(); ++i)
    if (t.nodes[i]->kind() != reference.nodes[i]->kind())
      throw std::logic_error("fold: node " + std::to_string(i) + " differs between copies");
  return t;
}

/// Owner module and attribute name of a dotted attribute path.
std::pair<jit::Module, std::string> ownerOf(jit::Module root, const std::string& path) {
  jit::Module cur = root;
  std::size_t start = 0;
  while (true) {
    auto dot = path.find('.', start);
    if (dot == std::string::npos) return {cur, path.substr(start)};
    cur = cur.attr(path.substr(start, dot - start)).toModule();
    start = dot + 1;
  }
}

std::string sanitized(const std::string& path) {
  std::string s = "foldnorm_centered_";
  for (char c : path) s += (std::isalnum(static_cast<unsigned char>(c)) ? c : '_');
  return s;
}

/// The rewrite on a fresh module `m` (forward inlined in place): centering, untie, LN -> RMS.
/// It executes the analysis' plan as it stands: the untie mode and the covered reads were
/// decided there (ParameterPlan); nothing is re-derived here.
void applyPlan(jit::Module& m, const std::shared_ptr<jit::Graph>& graph, const ImportedModel& model,
               const AnalysisResult& analysis, FoldReport* report) {
  const Graph& g = model.graph;
  auto tables = tablesFor(graph, *model.torch);
  at::NoGradGuard noGrad;
  auto redirectCoveredReads = [&](const ParameterPlan& plan, jit::Value* centeredValue) {
    for (const auto& [read, node] : plan.coveredReads)
      tables.nodes.at(g.node(node).origin)->replaceInputWith(tables.values.at(read), centeredValue);
  };

  for (const auto& plan : analysis.plan) {
    const auto& param = g.parameter(plan.param);
    if (param.isConstant) {
      auto* constant = tables.nodes.at(g.node(g.value(param.reads.at(0)).producer).origin);
      auto value = centeredCopy(constant->t(c10::attr::value), plan.actions);
      if (plan.untieMode != UntieMode::RedirectReads) {
        constant->t_(c10::attr::value, value);
      } else {
        auto* copy = graph->create(c10::prim::Constant);
        copy->t_(c10::attr::value, value);
        copy->output()->inferTypeFrom(value);
        copy->insertBefore(constant);
        redirectCoveredReads(plan, copy->output());
      }
    } else {
      auto [owner, name] = ownerOf(m, param.path);
      auto original = owner.attr(name).toTensor();
      auto value = centeredCopy(original, plan.actions);
      value.set_requires_grad(original.requires_grad());
      switch (plan.untieMode) {
        case UntieMode::InPlace:
          original.detach().copy_(value);  // names sharing this storage are all centered
          break;
        case UntieMode::OwnAttribute:
          owner.setattr(name, value);      // this name gets the copy; the other names keep the original
          break;
        case UntieMode::RedirectReads: {
          // A new attribute on the root module (whose type is this model's alone).
          auto fresh = sanitized(param.path);
          while (m.hasattr(fresh)) fresh += "_";
          if (param.isBuffer) m.register_buffer(fresh, value);
          else m.register_parameter(fresh, value, false);
          auto* self = graph->inputs().at(0);
          auto* get = graph->createGetAttr(self, fresh);
          get->output()->setType(c10::TensorType::get());
          get->insertAfter(graph->param_node());
          redirectCoveredReads(plan, get->output());
          break;
        }
      }
    }
    if (report) reportCentered(*report, param.path, plan);
  }

  const auto rmsKind = c10::Symbol::fromQualString(ops::kRmsNormOp);
  for (const auto& verdict : analysis.layerNorms) {
    if (!verdict.foldable) {
      if (report) reportKept(*report, verdict);
      continue;
    }
    auto* ln = tables.nodes.at(g.node(verdict.info.node).origin);
    auto* rms = graph->create(rmsKind, {ln->input(0), ln->input(1), ln->input(2), ln->input(3), ln->input(4)}, 1);
    rms->insertBefore(ln);
    rms->setSourceRange(ln->sourceRange());
    rms->output()->setType(ln->output()->type());
    ln->output()->replaceAllUsesWith(rms->output());
    ln->destroy();
    if (report) report->folded.push_back(verdict.info.modulePath);
  }
  jit::EliminateDeadCode(graph);
}

Verification verify(const ImportedModel& model, const AnalysisResult& analysis,
                    const jit::Module& folded, const std::shared_ptr<jit::Graph>& foldedGraph,
                    const FoldOptions& options) {
  Verification v;
  v.ran = true;
  v.device = options.device;
  c10::Device device(options.device == "cuda" ? c10::kCUDA : c10::kCPU);
  if (device.is_cuda() && !torch::cuda::is_available())
    throw SettingError("device", "no CUDA device is available here to verify on");
  auto progress = [&](const std::string& m) { if (options.progress) options.progress(m); };
  const auto& tm = *model.torch;

  std::vector<std::vector<at::Tensor>> inputSets{tm.exampleInputs};
  for (int i = 1; i <= options.randomInputs; ++i)
    inputSets.push_back(makeInputs(model.inputSpecs, options.seed + 1000 + i));
  v.runs = static_cast<int>(inputSets.size());

  // float32 (the model's own dtype): original vs folded.
  jit::Module original32 = tm.module;
  jit::Module folded32 = folded;
  if (device.is_cuda()) {
    original32 = loadModule(serializeModule(tm.module));
    original32.to(device);
    folded32 = loadModule(serializeModule(folded));
    folded32.to(device);
  }
  auto folded32Graph = device.is_cuda() ? inlinedForward(folded32) : foldedGraph;
  for (std::size_t r = 0; r < inputSets.size(); ++r) {
    progress(strf("verifying in the model's dtype: input set %zu/%zu", r + 1, inputSets.size()));
    auto in = retargetInputs(inputSets[r], {std::nullopt, device});
    compareOutputs(runGraph(original32, tm.graph, in), runGraph(folded32, folded32Graph, in), "float32", v.checks);
  }

  // float64: the plan applied to a float64 copy of the original.
  progress("verifying in float64 (copies of both models)");
  const RetargetOptions float64{at::kDouble, device};
  auto original64 = freshCopy(tm);
  auto graph64 = inlineForwardInPlace(original64);
  auto folded64 = freshCopy(tm);
  auto foldedGraph64 = inlineForwardInPlace(folded64);
  retargetAttributes(original64, float64);
  retargetAttributes(folded64, float64);
  // The plan maps onto the graph by node order: apply it before retargeting inserts constants.
  applyPlan(folded64, foldedGraph64, model, analysis, nullptr);
  retargetGraph(graph64, float64);
  retargetGraph(foldedGraph64, float64);
  for (std::size_t r = 0; r < inputSets.size(); ++r) {
    progress(strf("verifying in float64: input set %zu/%zu", r + 1, inputSets.size()));
    auto in = retargetInputs(inputSets[r], float64);
    compareOutputs(runGraph(original64, graph64, in), runGraph(folded64, foldedGraph64, in), "float64", v.checks);
  }
  summarizeChecks(v, options.float64Tolerance);
  return v;
}

}  // namespace

FoldedModel foldModel(const ImportedModel& model, const AnalysisResult& analysis, const FoldOptions& options) {
  auto progress = [&](const std::string& m) { if (options.progress) options.progress(m); };
  progress("copying the model");
  auto m = freshCopy(*model.torch);
  auto graph = inlineForwardInPlace(m);
  FoldedModel result;
  result.report.input = model.path;
  progress(strf("centering %zu parameter(s), replacing %zu LayerNorm(s)", analysis.plan.size(),
                analysis.foldableCount()));
  applyPlan(m, graph, model, analysis, &result.report);
  auto tm = std::make_shared<TorchModel>();
  tm->module = m;
  tm->graph = graph;
  tm->exampleInputs = model.torch->exampleInputs;
  result.torch = tm;
  if (options.verify) result.report.verification = verify(model, analysis, m, graph, options);
  return result;
}

void checkOutputPath(const std::string& inputPath, const std::string& outPath) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (outPath.empty()) throw Error("no output path (-o OUT.pt)");
  if (fs::exists(outPath, ec) && fs::exists(inputPath, ec) && fs::equivalent(inputPath, outPath, ec))
    throw Error("refusing to overwrite the input model '" + inputPath + "': choose another -o");
  if (fs::weakly_canonical(inputPath, ec) == fs::weakly_canonical(outPath, ec))
    throw Error("refusing to overwrite the input model '" + inputPath + "': choose another -o");
  auto dir = fs::path(outPath).parent_path();
  if (dir.empty()) dir = ".";
  if (!fs::is_directory(dir, ec)) throw Error("output directory '" + dir.string() + "' does not exist");
  if (::access(dir.c_str(), W_OK) != 0) throw Error("output directory '" + dir.string() + "' is not writable");
  if (fs::is_directory(outPath, ec)) throw Error("output path '" + outPath + "' is a directory");
}

void saveFolded(const FoldedModel& folded, const ImportedModel& original, const std::string& outPath) {
  namespace fs = std::filesystem;
  checkOutputPath(original.path, outPath);
  jit::ExtraFilesMap extra;
  extra[kInputSpecExtraFile] = inputSpecsToJson(original.inputSpecs);
  extra[kFoldReportExtraFile] = toJson(folded.report).dump(2);
  auto tmp = outPath + ".tmp-" + std::to_string(::getpid());
  try {
    folded.torch->module.save(tmp, extra);
  } catch (const c10::Error& e) {
    std::error_code ec;
    fs::remove(tmp, ec);
    throw Error("cannot write '" + outPath + "': " + e.what_without_backtrace());
  }
  std::error_code ec;
  fs::rename(tmp, outPath, ec);
  if (ec) {
    fs::remove(tmp, ec);
    throw Error("cannot move the output into place at '" + outPath + "': " + ec.message());
  }
}

nlohmann::json toJson(const FoldReport& r) {
  nlohmann::json j;
  j["schema"] = "foldnorm-fold/1";
  j["input"] = r.input;
  j["folded"] = r.folded;
  auto kept = nlohmann::json::array();
  for (std::size_t i = 0; i < r.kept.size(); ++i) kept.push_back({{"module", r.kept[i]}, {"reason", r.keptReasons[i]}});
  j["kept"] = kept;
  j["centered"] = r.centered;
  j["untied"] = r.untied;
  j["untie_bytes"] = r.untieBytes;
  const auto& v = r.verification;
  nlohmann::json vj{{"ran", v.ran}};
  if (v.ran) {
    vj["device"] = v.device;
    vj["input_sets"] = v.runs;
    vj["float64_equivalent"] = v.float64Equivalent;
    vj["predictions_unchanged"] = v.predictionsUnchanged;
    vj["worst_relative_float64"] = v.worstRelative64;
    vj["worst_relative_float32"] = v.worstRelative32;
    auto checks = nlohmann::json::array();
    for (const auto& c : v.checks) {
      nlohmann::json cj{{"dtype", c.dtype}, {"output", c.output}, {"shape", c.shape},
                        {"max_abs", c.maxAbs}, {"max_rel", c.maxRel}};
      if (c.hasPredictions) cj["argmax_agreement"] = c.argmaxAgreement;
      checks.push_back(cj);
    }
    vj["checks"] = checks;
  }
  j["verification"] = vj;
  return j;
}

std::string toText(const FoldReport& r) {
  std::string out;
  if (r.folded.empty()) {
    out += "nothing was folded: no LayerNorm is foldable (the output computes the input model's function)\n";
  } else {
    out += strf("folded %zu LayerNorm(s) into foldnorm::rms_norm; centered %zu parameter(s)", r.folded.size(),
                r.centered.size());
    if (!r.untied.empty())
      out += strf("; untied %zu (%.1f KiB copied)", r.untied.size(), r.untieBytes / 1024.0);
    out += "\n";
  }
  for (std::size_t i = 0; i < r.kept.size(); ++i)
    out += "  kept LayerNorm " + (r.kept[i].empty() ? std::string("<top>") : r.kept[i]) + ": " + r.keptReasons[i] + "\n";
  const auto& v = r.verification;
  if (!v.ran) {
    out += "verification: skipped (not asked for)\n";
    return out;
  }
  out += strf("verification on %s (%d input sets):\n", v.device.c_str(), v.runs);
  out += strf("  %-8s %6s  %-24s %12s %12s  %s\n", "dtype", "output", "shape", "max abs", "max rel",
              "argmax unchanged");
  for (const auto& c : v.checks)
    out += strf("  %-8s %6zu  %-24s %12.3e %12.3e  %s\n", c.dtype.c_str(), c.output, c.shape.c_str(), c.maxAbs,
                c.maxRel, c.hasPredictions ? strf("%.2f%%", 100 * c.argmaxAgreement).c_str() : "-");
  out += v.float64Equivalent
             ? strf("float64: equivalent (worst relative error %.2e: float64 rounding)\n", v.worstRelative64)
             : strf("float64: NOT equivalent (worst relative error %.2e): this is a bug\n", v.worstRelative64);
  out += strf("float32: worst relative error %.2e; predictions %s\n", v.worstRelative32,
              v.predictionsUnchanged ? "unchanged" : "CHANGED on some rows");
  return out;
}

}  // namespace foldnorm
