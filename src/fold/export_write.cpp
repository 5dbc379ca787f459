// Writing a folded .pt2 atomically, untouched records copied byte for byte (see fold/fold_export.h).
#include <caffe2/serialize/inline_container.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <unordered_map>

#include "export_internal.h"
#include "fold_internal.h"
#include "foldnorm/common/error.h"
#include "foldnorm/common/write_file.h"
#include "foldnorm/fold/fold_support.h"
#include "foldnorm/import/export.h"
#include "foldnorm/import/export_archive.h"

namespace foldnorm {

using nlohmann::json;
using export_fold::flatStorage;
using export_fold::storageOf;
using export_fold::tensorMeta;

namespace {

// Records the writer itself adds when it closes the archive (PyTorchStreamWriter::writeEndOfFile).
bool writtenByWriter(const std::string& record) {
  return record == ".data/version" || record == "version" || record == "byteorder" || record == ".data/serialization_id";
}

/// The device the program records for the graph input of `fqn` (a tensor the fold added: its
/// graph input took the device of the one it copies); cpu when there is none.
json inputDevice(const json& program, const std::string& fqn) {
  const auto& gm = program.at("graph_module");
  const auto& values = gm.at("graph").at("tensor_values");
  for (const auto& spec : gm.at("signature").at("input_specs")) {
    const json& s = spec.begin().value();
    for (const char* key : {"parameter_name", "buffer_name", "tensor_constant_name"})
      if (s.contains(key) && s.at(key) == fqn && s.contains("arg")) {
        auto name = s.at("arg").value("name", std::string());
        if (values.contains(name) && values.at(name).contains("device")) return values.at(name).at("device");
      }
  }
  return {{"type", "cpu"}, {"index", nullptr}};
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

SavedFileCheck saveFoldedExport(const FoldedExport& folded, const ImportedModel& model, const std::string& outPath) {
  namespace fs = std::filesystem;
  if (!model.exported || !model.exported->archive) throw std::logic_error("fold: the model is not a .pt2 import");
  const auto& original = *model.exported->archive;
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
    // The device the original recorded (a model exported on a GPU loads there), not ours.
    const json device = entry.contains("tensor_meta") && entry.at("tensor_meta").contains("device")
                            ? entry.at("tensor_meta").at("device")
                            : inputDevice(folded.program, name);
    entry["tensor_meta"] = tensorMeta(t, requiresGrad, device);
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
  removeStaleTemporaries(dir.string(), ".foldnorm-tmp-");  // what a killed save left
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
  // What torch.export.load gets must be what was verified: read back before it is put in place.
  SavedFileCheck check;
  if (folded.runs) {
    try {
      check = fold_detail::checkSavedExport(tmp.string(), folded, *folded.runs);
    } catch (...) {
      cleanup();
      throw;
    }
  }
  fs::rename(tmp, outPath, ec);
  if (ec) {
    cleanup();
    throw Error("cannot move the output into place at '" + outPath + "': " + ec.message());
  }
  cleanup();
  return check;
}

}  // namespace foldnorm
