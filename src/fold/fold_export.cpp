// The .pt2 fold: the plan on the program JSON and the archive's tensors (see fold/fold_export.h).
#include "foldnorm/fold/fold_export.h"

#include <ATen/ATen.h>
#include <caffe2/serialize/inline_container.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>

#include <set>
#include <unordered_map>

#include "foldnorm/common/error.h"
#include "foldnorm/common/setting_error.h"
#include "foldnorm/fold/fold_support.h"
#include "foldnorm/import/export.h"
#include "foldnorm/import/export_archive.h"
#include "foldnorm/torch/export_interpreter.h"
#include "foldnorm/torch/torch_model.h"

namespace foldnorm {

using nlohmann::json;

namespace {

using State = std::map<std::string, at::Tensor>;

const at::StorageImpl* storageOf(const at::Tensor& t) { return t.storage().unsafeGetStorageImpl(); }

// The whole storage of `t` as a flat tensor of t's dtype.
at::Tensor flatStorage(const at::Tensor& t) {
  auto n = static_cast<int64_t>(t.storage().nbytes() / t.element_size());
  return at::empty({0}, t.options()).set_(t.storage(), 0, {n}, {1});
}

/// `state` with every floating tensor in `dtype`; names sharing a storage share the new one
/// (same views), so ties and in-place centering behave as in the original.
State castState(const State& state, at::ScalarType dtype) {
  std::unordered_map<const at::StorageImpl*, at::Tensor> bases;
  State out;
  for (const auto& [name, t] : state) {
    if (!t.is_floating_point()) {
      out[name] = t;
      continue;
    }
    auto& base = bases[storageOf(t)];
    if (!base.defined()) base = flatStorage(t).to(dtype);
    out[name] = base.as_strided(t.sizes(), t.strides(), t.storage_offset());
  }
  return out;
}

/// Every name the program uses for a value or a node, so new ones can be made unique.
class Names {
 public:
  explicit Names(const json& graph) { collect(graph); }
  void collect(const json& graph) {
    for (const char* table : {"tensor_values", "sym_int_values", "sym_bool_values", "sym_float_values"})
      if (graph.contains(table))
        for (const auto& [name, _] : graph.at(table).items()) used_.insert(name);
    for (const auto& node : graph.at("nodes")) {
      if (node.contains("name") && node.at("name").is_string()) used_.insert(node.at("name").get<std::string>());
      for (const auto& o : node.at("outputs"))
        if (o.contains("as_tensor")) used_.insert(o.at("as_tensor").at("name").get<std::string>());
      for (const auto& in : node.at("inputs"))
        if (in.at("arg").contains("as_graph")) collect(in.at("arg").at("as_graph").at("graph"));
    }
  }
  std::string fresh(const std::string& base) {
    auto name = base;
    for (int i = 1; used_.count(name); ++i) name = base + "_" + std::to_string(i);
    used_.insert(name);
    return name;
  }

 private:
  std::set<std::string> used_;
};

std::string sanitized(const std::string& path) {
  std::string s;
  for (char c : path) s += (std::isalnum(static_cast<unsigned char>(c)) ? c : '_');
  return s;
}

json symInts(at::IntArrayRef v) {
  auto a = json::array();
  for (auto x : v) a.push_back({{"as_int", x}});
  return a;
}

json tensorMeta(const at::Tensor& t, bool requiresGrad) {
  return {{"dtype", exportScalarTypeCode(t.scalar_type())}, {"sizes", symInts(t.sizes())},
          {"requires_grad", requiresGrad}, {"device", {{"type", "cpu"}, {"index", nullptr}}},
          {"strides", symInts(t.strides())}, {"storage_offset", {{"as_int", t.storage_offset()}}},
          {"layout", 7}};
}

// Renames tensor references `from` -> `to` inside one serialized Argument.
void renameTensor(json& arg, const std::string& from, const std::string& to) {
  auto one = [&](json& t) {
    if (t.at("name") == from) t["name"] = to;
  };
  if (arg.contains("as_tensor")) one(arg["as_tensor"]);
  if (arg.contains("as_tensors"))
    for (auto& t : arg["as_tensors"]) one(t);
  if (arg.contains("as_optional_tensor") && arg["as_optional_tensor"].contains("as_tensor"))
    one(arg["as_optional_tensor"]["as_tensor"]);
  if (arg.contains("as_optional_tensors"))
    for (auto& t : arg["as_optional_tensors"])
      if (t.contains("as_tensor")) one(t["as_tensor"]);
}

bool readsTensor(const json& arg, const std::string& name) {
  auto copy = arg;
  renameTensor(copy, name, name + "\x01");
  return copy != arg;
}

const json* namedInput(const json& node, const std::string& name) {
  for (const auto& in : node.at("inputs"))
    if (in.at("name") == name) return &in.at("arg");
  return nullptr;
}

// The graph whose node list holds the node at `location` (a higher-order op's subgraph for a
// location longer than one: {hop index, index in its subgraph, ...}).
json& graphHolding(json& top, const std::vector<std::size_t>& location) {
  json* g = &top;
  for (std::size_t k = 0; k + 1 < location.size(); ++k) {
    json* sub = nullptr;
    for (auto& in : g->at("nodes").at(location[k]).at("inputs"))
      if (in.at("arg").contains("as_graph")) sub = &in["arg"]["as_graph"]["graph"];
    if (!sub) throw std::logic_error("fold: node location does not lead into a subgraph");
    g = sub;
  }
  return *g;
}

json positional(const std::string& name, json arg) { return {{"name", name}, {"arg", std::move(arg)}, {"kind", 1}}; }

json newNode(const json& like, const std::string& target, json inputs, const std::string& output) {
  json meta = json::object();
  for (const char* key : {"stack_trace", "nn_module_stack"})
    if (like.at("metadata").contains(key)) meta[key] = like.at("metadata").at(key);
  return {{"target", target}, {"inputs", std::move(inputs)}, {"outputs", json::array({{{"as_tensor", {{"name", output}}}}})},
          {"metadata", meta}, {"is_hop_single_tensor_return", nullptr}, {"name", output}};
}

/// The plan on a copy of the program and of `state` (whose dtype decides the centered dtype).
struct PlanResult {
  json program;
  State state;
  std::map<std::string, std::string> added;  // new names -> parameter | buffer | constant
};

PlanResult applyPlan(const ImportedModel& model, const json& program, const State& state,
                     const AnalysisResult& analysis, ExportRmsOp rmsOp, FoldReport* report) {
  const Graph& g = model.graph;
  PlanResult r{program, state, {}};
  auto& gm = r.program.at("graph_module");
  auto& graph = gm.at("graph");
  auto& specs = gm.at("signature").at("input_specs");
  Names names(graph);
  const auto& locations = model.exported->nodeLocation;
  auto location = [&](NodeId id) -> const std::vector<std::size_t>& {
    if (id >= locations.size() || locations[id].empty())
      throw std::logic_error("fold: node " + g.describeNode(id) + " is not a node of the program");
    return locations[id];
  };
  auto jsonNode = [&](NodeId id) -> json& {
    const auto& loc = location(id);
    return graphHolding(graph, loc).at("nodes").at(loc.back());
  };

  for (const auto& plan : analysis.plan) {
    const auto& param = g.parameter(plan.param);
    auto it = r.state.find(param.path);
    if (it == r.state.end()) throw std::logic_error("fold: the archive has no tensor '" + param.path + "'");
    const at::Tensor original = it->second;
    auto value = centeredCopy(original, plan.actions);
    switch (plan.untieMode) {
      case UntieMode::InPlace: {
        // As a write through the storage: every name viewing it sees the centered values.
        auto base = flatStorage(original).clone();
        base.as_strided(original.sizes(), original.strides(), original.storage_offset()).copy_(value);
        for (auto& [name, t] : r.state)
          if (t.defined() && storageOf(t) == storageOf(original) && name != param.path)
            t = base.as_strided(t.sizes(), t.strides(), t.storage_offset());
        r.state[param.path] = base.as_strided(original.sizes(), original.strides(), original.storage_offset());
        break;
      }
      case UntieMode::OwnAttribute:  // this FQN has its own placeholder: it alone gets the copy
        r.state[param.path] = value;
        break;
      case UntieMode::RedirectReads: {
        // A new lifted input of the same kind, placed after the spec it copies.
        std::size_t at = specs.size();
        json spec;
        for (std::size_t i = 0; i < specs.size() && at == specs.size(); ++i) {
          const json& s = specs[i].begin().value();
          for (const char* key : {"parameter_name", "buffer_name", "tensor_constant_name"})
            if (s.contains(key) && s.at(key) == param.path) {
              at = i;
              spec = specs[i];
            }
        }
        if (at == specs.size()) throw std::logic_error("fold: '" + param.path + "' is not in the program's signature");
        const std::string kind = spec.begin().key();
        json& s = spec.begin().value();
        auto fqn = "foldnorm_centered_" + sanitized(param.path);
        while (r.state.count(fqn)) fqn += "_";
        auto placeholder = names.fresh((kind == "parameter" ? "p_" : kind == "buffer" ? "b_" : "c_") + fqn);
        auto oldPlaceholder = s.at("arg").at("name").get<std::string>();
        s["arg"]["name"] = placeholder;
        for (const char* key : {"parameter_name", "buffer_name", "tensor_constant_name"})
          if (s.contains(key)) s[key] = fqn;
        specs.insert(specs.begin() + static_cast<std::ptrdiff_t>(at) + 1, spec);
        auto& inputs = graph.at("inputs");
        const json input = {{"as_tensor", {{"name", placeholder}}}};  // (a braced list would insert an array)
        inputs.insert(inputs.begin() + static_cast<std::ptrdiff_t>(at) + 1, input);
        graph["tensor_values"][placeholder] = tensorMeta(value, graph.at("tensor_values").at(oldPlaceholder).value("requires_grad", false));
        r.state[fqn] = value;
        r.added[fqn] = kind == "tensor_constant" || (kind == "buffer" && !s.value("persistent", true)) ? "constant" : kind;
        for (const auto& [read, consumer] : plan.coveredReads) {
          if (location(consumer).size() > 1)  // the subgraph names its operand otherwise
            throw Error("cannot untie '" + param.path + "': a read inside a higher-order op's subgraph");
          auto& node = jsonNode(consumer);
          for (auto& in : node.at("inputs")) renameTensor(in.at("arg"), g.value(read).name, placeholder);
        }
        break;
      }
    }
    if (report) reportCentered(*report, param.path, plan);
  }

  // LayerNorms: each foldable node is replaced by one or two nodes, in place.
  std::map<std::vector<std::size_t>, std::vector<json>> replacements;
  for (const auto& verdict : analysis.layerNorms) {
    if (!verdict.foldable) {
      if (report) reportKept(*report, verdict);
      continue;
    }
    const auto& loc = location(verdict.info.node);
    auto& holder = graphHolding(graph, loc);
    const json& ln = jsonNode(verdict.info.node);
    const auto target = ln.at("target").get<std::string>();
    const bool native = target == "torch.ops.aten.native_layer_norm.default";
    if (!native && target != "torch.ops.aten.layer_norm.default")
      throw std::logic_error("fold: node " + g.describeNode(verdict.info.node) + " is " + target + ", not a LayerNorm");
    const auto& outs = ln.at("outputs");
    if (native) {
      // Only the normalized output may be used: mean and rstd have no RMSNorm counterpart.
      for (std::size_t k = 1; k < outs.size(); ++k) {
        const auto name = outs[k].at("as_tensor").at("name").get<std::string>();
        bool used = false;
        for (const auto& n : holder.at("nodes"))
          for (const auto& in : n.at("inputs")) used = used || readsTensor(in.at("arg"), name);
        for (const auto& o : holder.at("outputs")) used = used || readsTensor(o, name);
        if (used)
          throw Error("cannot fold the LayerNorm at " + verdict.info.modulePath + ": its mean/rstd output '" + name +
                      "' is used by the program");
      }
    }
    const auto out = outs.at(0).at("as_tensor").at("name").get<std::string>();
    const json none = {{"as_none", true}};
    const json* weight = namedInput(ln, "weight");
    const json* bias = namedInput(ln, "bias");
    const json* eps = namedInput(ln, "eps");
    json w = weight ? *weight : none;
    json b = bias ? *bias : none;
    json e = eps ? *eps : json{{"as_float", 1e-5}};  // layer_norm's default; rms_norm's would be dtype eps
    json input = *namedInput(ln, "input"), shape = *namedInput(ln, "normalized_shape");
    std::vector<json> repl;
    if (rmsOp == ExportRmsOp::Foldnorm) {
      repl.push_back(newNode(ln, "torch.ops.foldnorm.rms_norm.default",
                             {positional("input", input), positional("normalized_shape", shape), positional("weight", w),
                              positional("bias", b), positional("eps", e)}, out));
    } else {
      const bool hasBias = b.contains("as_tensor");
      auto rmsOut = hasBias ? names.fresh(out + "_rms") : out;
      if (hasBias) holder["tensor_values"][rmsOut] = holder.at("tensor_values").at(out);
      repl.push_back(newNode(ln, "torch.ops.aten.rms_norm.default",
                             {positional("input", input), positional("normalized_shape", shape), positional("weight", w),
                              positional("eps", e)}, rmsOut));
      if (hasBias)
        repl.push_back(newNode(ln, "torch.ops.aten.add.Tensor",
                               {positional("self", {{"as_tensor", {{"name", rmsOut}}}}), positional("other", b)}, out));
    }
    if (native)  // its unused outputs are gone: drop their metadata too
      for (std::size_t k = 1; k < outs.size(); ++k) holder["tensor_values"].erase(outs[k].at("as_tensor").at("name").get<std::string>());
    replacements[loc] = std::move(repl);
    if (report) report->folded.push_back(verdict.info.modulePath);
  }
  // Deepest subgraphs first, so the locations of the graphs holding them stay valid; in each
  // graph from the last node back, so earlier indices stay valid.
  std::vector<std::vector<std::size_t>> order;
  for (const auto& [loc, _] : replacements) order.push_back(loc);
  std::sort(order.begin(), order.end(),
            [](const auto& a, const auto& b) { return a.size() != b.size() ? a.size() > b.size() : a > b; });
  for (auto it = order.begin(); it != order.end(); ++it) {
    auto& nodes = graphHolding(graph, *it).at("nodes");
    auto& repl = replacements.at(*it);
    nodes.erase(nodes.begin() + static_cast<std::ptrdiff_t>(it->back()));
    for (auto n = repl.rbegin(); n != repl.rend(); ++n) nodes.insert(nodes.begin() + static_cast<std::ptrdiff_t>(it->back()), *n);
  }
  return r;
}

std::vector<std::vector<at::Tensor>> inputSets(const ImportedModel& model, const ExportArchive& archive,
                                               const FoldOptions& options) {
  std::vector<std::vector<at::Tensor>> sets;
  if (archive.hasExampleInputs) sets.push_back(archive.exampleInputs);
  for (int i = 1; i <= options.randomInputs; ++i) sets.push_back(makeInputs(model.inputSpecs, options.seed + 1000 + i));
  if (sets.empty()) sets.push_back(makeInputs(model.inputSpecs, options.seed));
  return sets;
}

Verification verify(const ImportedModel& model, const ExportArchive& archive, const AnalysisResult& analysis,
                    const FoldedExport& folded, const State& state, const FoldOptions& options, ExportRmsOp rmsOp) {
  Verification v;
  v.ran = true;
  v.device = options.device;
  c10::Device device(options.device == "cuda" ? c10::kCUDA : c10::kCPU);
  if (device.is_cuda() && !torch::cuda::is_available())
    throw SettingError("device", "no CUDA device is available here to verify on");
  auto progress = [&](const std::string& m) { if (options.progress) options.progress(m); };
  auto sets = inputSets(model, archive, options);
  v.runs = static_cast<int>(sets.size());

  ExportInterpreter original32(archive.program, state, {std::nullopt, device});
  ExportInterpreter folded32(folded.program, folded.state, {std::nullopt, device});
  for (std::size_t r = 0; r < sets.size(); ++r) {
    progress("verifying in the model's dtype: input set " + std::to_string(r + 1) + "/" + std::to_string(sets.size()));
    compareOutputs(original32.run(sets[r]), folded32.run(sets[r]), "float32", v.checks);
  }
  // float64: the plan applied to float64 state, so the centering is never rounded to float32.
  progress("verifying in float64 (copies of both programs)");
  auto state64 = castState(state, at::kDouble);
  auto plan64 = applyPlan(model, archive.program, state64, analysis, rmsOp, nullptr);
  ExportInterpreter original64(archive.program, state64, {at::kDouble, device});
  ExportInterpreter folded64(plan64.program, plan64.state, {at::kDouble, device});
  for (std::size_t r = 0; r < sets.size(); ++r) {
    progress("verifying in float64: input set " + std::to_string(r + 1) + "/" + std::to_string(sets.size()));
    compareOutputs(original64.run(sets[r]), folded64.run(sets[r]), "float64", v.checks);
  }
  summarizeChecks(v, options.float64Tolerance, options.savedFloat64Bound);
  return v;
}

const ExportArchive& archiveOf(const ImportedModel& model) {
  if (!model.exported || !model.exported->archive) throw std::logic_error("fold: the model is not a .pt2 import");
  return *model.exported->archive;
}

}  // namespace

ExportRmsOp exportRmsOpFromName(const std::string& name) {
  if (name == "aten") return ExportRmsOp::Aten;
  if (name == "foldnorm") return ExportRmsOp::Foldnorm;
  throw SettingError("rms_op", "unknown RMSNorm op '" + name + "' for a .pt2 fold (aten | foldnorm)");
}

FoldedExport foldExport(const ImportedModel& model, const AnalysisResult& analysis, const FoldOptions& options,
                        ExportRmsOp rmsOp) {
  const auto& archive = archiveOf(model);
  State state;
  for (const auto& t : archive.tensors) state[t.name] = t.tensor;
  if (options.progress)
    options.progress("centering " + std::to_string(analysis.plan.size()) + " parameter(s), replacing " +
                     std::to_string(analysis.foldableCount()) + " LayerNorm(s)");
  FoldedExport folded;
  folded.report.input = model.path;
  auto r = applyPlan(model, archive.program, state, analysis, rmsOp, &folded.report);
  folded.program = std::move(r.program);
  folded.state = std::move(r.state);
  folded.added = std::move(r.added);
  if (options.verify) folded.report.verification = verify(model, archive, analysis, folded, state, options, rmsOp);
  return folded;
}

namespace {

// Records the writer itself adds when it closes the archive (PyTorchStreamWriter::writeEndOfFile).
bool writtenByWriter(const std::string& record) {
  return record == ".data/version" || record == "version" || record == "byteorder" || record == ".data/serialization_id";
}

int nextIndex(const json& config, const std::string& prefix) {
  int next = 0;
  const json entries = config.value("config", json::object());  // (items() of a temporary would dangle)
  for (const auto& [_, entry] : entries.items()) {
    const auto name = entry.value("path_name", std::string());
    if (name.rfind(prefix, 0) == 0 && name.size() > prefix.size() &&
        name.find_first_not_of("0123456789", prefix.size()) == std::string::npos)
      next = std::max(next, std::stoi(name.substr(prefix.size())) + 1);
  }
  return next;
}

}  // namespace

void saveFoldedExport(const FoldedExport& folded, const ImportedModel& model, const std::string& outPath) {
  namespace fs = std::filesystem;
  const auto& original = archiveOf(model);
  checkOutputPath(original.path, outPath);
  json weights = original.weightsConfig, constants = original.constantsConfig;
  std::map<std::string, const ExportTensor*> before;
  for (const auto& t : original.tensors) before[t.name] = &t;

  // Changed or new tensors get new storage records; names sharing a storage share the record.
  std::map<std::string, at::Tensor> newRecords;  // record -> flat storage
  std::unordered_map<const at::StorageImpl*, std::string> recordOf;
  int nextWeight = nextIndex(weights, "weight_"), nextConstant = nextIndex(constants, "tensor_");
  for (const auto& [name, t] : folded.state) {
    auto b = before.find(name);
    if (b != before.end() && b->second->tensor.unsafeGetTensorImpl() == t.unsafeGetTensorImpl()) continue;
    const bool isConstant = b != before.end() ? b->second->isConstant : folded.added.at(name) == "constant";
    auto& config = (isConstant ? constants : weights)["config"];
    auto& record = recordOf[storageOf(t)];
    if (record.empty()) {
      record = isConstant ? "tensor_" + std::to_string(nextConstant++) : "weight_" + std::to_string(nextWeight++);
      newRecords[(isConstant ? "data/constants/" : "data/weights/") + record] = flatStorage(t).cpu().contiguous();
    }
    json entry = config.contains(name) ? config.at(name) : json{{"is_param", folded.added.at(name) == "parameter"}};
    const bool requiresGrad = entry.contains("tensor_meta") ? entry.at("tensor_meta").value("requires_grad", false)
                                                            : entry.at("is_param").get<bool>();
    entry["path_name"] = record;
    entry["use_pickle"] = false;
    entry["tensor_meta"] = tensorMeta(t, requiresGrad);
    config[name] = entry;
  }

  auto report = toJson(folded.report).dump(2);
  auto program = folded.program.dump();
  auto weightsText = weights.dump(), constantsText = constants.dump();
  auto referenced = [](const json& config, const std::string& dir) {
    std::vector<std::string> out;
    const json entries = config.value("config", json::object());
    for (const auto& [_, entry] : entries.items()) {
      auto r = dir + entry.at("path_name").get<std::string>();
      if (std::find(out.begin(), out.end(), r) == out.end()) out.push_back(r);
    }
    return out;
  };

  // The archive's root folder is named after the file, so the temporary file has the output's
  // name, in a private folder next to it (same file system: the rename is atomic).
  auto dir = fs::path(outPath).parent_path();
  auto tmpDir = (dir.empty() ? fs::path(".") : dir) / (".foldnorm-tmp-" + std::to_string(::getpid()));
  auto tmp = tmpDir / fs::path(outPath).filename();
  std::error_code ec;
  // POSIX calls: libtorch exports its own std::filesystem::remove_all, which crashes here.
  auto cleanup = [&] {
    ::unlink(tmp.c_str());
    ::rmdir(tmpDir.c_str());
  };
  try {
    if (::mkdir(tmpDir.c_str(), 0700) != 0) throw Error("cannot create a temporary folder " + tmpDir.string());
    caffe2::serialize::PyTorchStreamReader reader(original.path);
    caffe2::serialize::PyTorchStreamWriter writer(tmp.string());
    writer.setMinVersion(6);  // as torch's PT2ArchiveWriter
    auto copy = [&](const std::string& record) {
      auto [data, size] = reader.getRecord(record);
      writer.writeRecord(record, data.get(), size);
    };
    auto writeTensors = [&](const json& config, const std::string& dir) {
      for (const auto& record : referenced(config, dir)) {
        auto n = newRecords.find(record);
        if (n == newRecords.end()) copy(record);
        else writer.writeRecord(record, n->second.data_ptr(), n->second.nbytes());
      }
    };
    writeTensors(weights, "data/weights/");
    writer.writeRecord("data/weights/model_weights_config.json", weightsText.data(), weightsText.size());
    writeTensors(constants, "data/constants/");
    writer.writeRecord("data/constants/model_constants_config.json", constantsText.data(), constantsText.size());
    writer.writeRecord("models/model.json", program.data(), program.size());
    const std::string reportRecord = std::string("extra/") + kFoldReportExtraFile;
    for (const auto& record : original.records) {
      if (writtenByWriter(record) || record == reportRecord || writer.getAllWrittenRecords().count(record)) continue;
      if (record.rfind("data/weights/", 0) == 0 || record.rfind("data/constants/", 0) == 0) continue;  // unreferenced now
      copy(record);
    }
    writer.writeRecord(reportRecord, report.data(), report.size());
    writer.writeEndOfFile();
  } catch (const c10::Error& e) {
    cleanup();
    throw Error("cannot write '" + outPath + "': " + e.what_without_backtrace());
  } catch (const std::exception& e) {
    cleanup();
    throw Error("cannot write '" + outPath + "': " + e.what());
  }
  fs::rename(tmp, outPath, ec);
  if (ec) {
    cleanup();
    throw Error("cannot move the output into place at '" + outPath + "': " + ec.message());
  }
  cleanup();
}

}  // namespace foldnorm
