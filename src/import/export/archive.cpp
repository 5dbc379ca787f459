// Reading a .pt2 archive with LibTorch's own zip reader (the class torch.export.save writes
// through): layout checks, the program's JSON, weights and constants as views of their storage
// files, the example inputs. What is not a 2.9+ export archive is said in one line.
#include <ATen/ATen.h>
#include <caffe2/serialize/inline_container.h>
#include <torch/csrc/jit/serialization/import_read.h>
#include <torch/csrc/jit/serialization/pickle.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include "export_steps.h"
#include "foldnorm/common/error.h"
#include "foldnorm/import/export_archive.h"

namespace foldnorm {
namespace {

std::string readFile(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::exists(path, ec)) throw Error("no such file: '" + path + "'");
  if (fs::is_directory(path, ec)) throw Error("'" + path + "' is a directory, not a .pt2 file");
  std::ifstream file(path, std::ios::binary);
  if (!file) throw Error("cannot read '" + path + "' (permission?)");
  return std::string(std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>());
}

/// The root folder of the zip's first entry (its local header: name length at 26, name at 30).
std::string rootFolder(const std::string& bytes) {
  if (bytes.size() < 30 || bytes.compare(0, 4, "PK\x03\x04") != 0) return {};
  auto len = static_cast<std::size_t>(static_cast<unsigned char>(bytes[26]) |
                                      (static_cast<unsigned char>(bytes[27]) << 8));
  if (bytes.size() < 30 + len) return {};
  auto name = bytes.substr(30, len);
  auto slash = name.find('/');
  return slash == std::string::npos ? std::string{} : name.substr(0, slash);
}

/// The `version` record of a pre-2.8 archive (the export schema, "7.3"), found through the zip's
/// central directory (LibTorch's reader refuses a zip without a root folder); empty when absent,
/// compressed or not where the directory says.
std::string legacyVersionRecord(const std::string& bytes) {
  auto u16 = [&](std::size_t i) {
    return static_cast<std::size_t>(static_cast<unsigned char>(bytes[i])) |
           (static_cast<std::size_t>(static_cast<unsigned char>(bytes[i + 1])) << 8);
  };
  auto u32 = [&](std::size_t i) { return u16(i) | (u16(i + 2) << 16); };
  const auto end = bytes.rfind("PK\x05\x06");
  if (end == std::string::npos || end + 22 > bytes.size()) return {};
  std::size_t at = u32(end + 16);
  for (std::size_t n = u16(end + 10); n > 0 && at + 46 <= bytes.size() && bytes.compare(at, 4, "PK\x01\x02") == 0; --n) {
    const auto method = u16(at + 10), size = u32(at + 20), nameLen = u16(at + 28), local = u32(at + 42);
    const auto name = bytes.substr(at + 46, nameLen);
    const auto slash = name.find('/');
    if (method == 0 && size <= 16 && (name == "version" || (slash != std::string::npos && name.substr(slash) == "/version"))) {
      if (local + 30 > bytes.size()) return {};
      const auto data = local + 30 + u16(local + 26) + u16(local + 28);
      return data + size <= bytes.size() ? bytes.substr(data, size) : std::string{};
    }
    at += 46 + nameLen + u16(at + 30) + u16(at + 32);
  }
  return {};
}

std::string recordText(caffe2::serialize::PyTorchStreamReader& reader, const std::string& name) {
  auto [data, size] = reader.getRecord(name);
  return std::string(static_cast<const char*>(data.get()), size);
}

nlohmann::json parseJson(const std::string& text, const std::string& what, const std::string& path) {
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw Error("'" + path + "': " + what + " is not valid JSON (a damaged archive?): " + firstLine(e.what()));
  }
}

/// The tensor leaves of a pytree of example inputs, in pytree order.
void flattenInputs(const c10::IValue& v, const std::string& key, ExportArchive& out) {
  if (v.isTensor()) {
    out.exampleInputs.push_back(v.toTensor());
    out.exampleInputNames.push_back(key);
  } else if (v.isTuple()) {
    for (const auto& e : v.toTupleRef().elements()) flattenInputs(e, key, out);
  } else if (v.isList()) {
    for (const auto& e : v.toListRef()) flattenInputs(e, key, out);
  } else if (v.isGenericDict()) {
    for (const auto& kv : v.toGenericDict())
      flattenInputs(kv.value(), kv.key().isString() ? kv.key().toStringRef() : key, out);
  }
  // ints, floats, None: specialised into the program (constant inputs), not fed
}

/// One config (weights or constants) into tensors over the archive's storage files.
void readTensors(caffe2::serialize::PyTorchStreamReader& reader, const nlohmann::json& config,
                 const std::string& folder, bool constants, std::map<std::string, c10::Storage>& storages,
                 ExportArchive& out) {
  const auto where = "'" + out.path + "': " + folder + " config";
  if (!config.is_object() || !config.contains("config") || !config["config"].is_object())
    throw Error(where + " has no \"config\" object (a damaged archive?)");
  for (const auto& [name, meta] : config["config"].items()) {
    const auto entry = where + " entry '" + name + "'";
    try {
      if (meta.value("use_pickle", false))
        throw Error(entry + " is a pickled tensor subclass; foldnorm reads plain tensors only");
      const auto file = folder + meta.at("path_name").get<std::string>();
      if (!reader.hasRecord(file)) throw Error(entry + " names " + file + ", which the archive lacks");
      export_detail::TensorShape shape = export_detail::tensorShape(meta.at("tensor_meta"), entry);
      const auto elem = static_cast<int64_t>(c10::elementSize(shape.dtype));
      auto found = storages.find(file);
      if (found == storages.end()) {
        auto [data, size] = reader.getRecord(file);
        if (size % elem != 0)
          throw Error(entry + ": its file " + file + " holds " + std::to_string(size) +
                      " bytes, not a multiple of the element size " + std::to_string(elem));
        found = storages.emplace(file, c10::Storage(c10::Storage::use_byte_size_t(), size, std::move(data),
                                                    nullptr, false)).first;
      }
      auto& storage = found->second;
      // The furthest element the view reaches must lie inside the file (an empty file: the loader
      // allocates zeros of the recorded size, so do we).
      int64_t extent = shape.offset + 1;
      bool empty = false;
      for (std::size_t d = 0; d < shape.sizes.size(); ++d) {
        if (shape.sizes[d] == 0) empty = true;
        if (shape.sizes[d] < 0 || shape.strides[d] < 0) throw Error(entry + " has a negative size or stride");
        extent += (shape.sizes[d] - 1) * shape.strides[d];
      }
      at::Tensor t;
      if (storage.nbytes() == 0 && !empty) {
        t = at::zeros(shape.sizes, at::TensorOptions().dtype(shape.dtype));
      } else {
        if (!empty && extent * elem > static_cast<int64_t>(storage.nbytes()))
          throw Error(entry + " reaches past the end of " + file + " (" + std::to_string(extent * elem) +
                      " > " + std::to_string(storage.nbytes()) + " bytes)");
        t = at::empty({0}, at::TensorOptions().dtype(shape.dtype));
        t.set_(storage, shape.offset, shape.sizes, shape.strides);
      }
      ExportTensor et;
      et.name = name;
      et.file = file;
      et.isParameter = meta.value("is_param", false);
      et.isConstant = constants;
      et.requiresGrad = meta.at("tensor_meta").value("requires_grad", false);
      et.tensor = t;
      out.tensors.push_back(std::move(et));
    } catch (const nlohmann::json::exception& e) {
      throw Error(entry + " is malformed: " + firstLine(e.what()));
    }
  }
}

std::string recordList(const std::vector<std::string>& records) {
  std::string s;
  for (std::size_t i = 0; i < records.size() && i < 4; ++i) s += (i ? ", " : "") + records[i];
  if (records.size() > 4) s += ", ... (" + std::to_string(records.size()) + " entries)";
  return s;
}

}  // namespace

const ExportTensor* ExportArchive::find(const std::string& name) const {
  for (const auto& t : tensors)
    if (t.name == name) return &t;
  return nullptr;
}

std::vector<std::vector<std::size_t>> ExportArchive::sharedStorage() const {
  std::map<std::string, std::vector<std::size_t>> byFile;
  for (std::size_t i = 0; i < tensors.size(); ++i) byFile[tensors[i].file].push_back(i);
  std::vector<std::vector<std::size_t>> groups;
  for (auto& [file, ids] : byFile)
    if (ids.size() > 1) groups.push_back(ids);
  return groups;
}

bool looksLikeExportArchive(const std::string& bytes) {
  const auto root = rootFolder(bytes);
  if (root.empty()) return false;
  // Entry names (local headers, the central directory): models/model.json, archive_format or
  // data/weights/ under the root mark a PT2 archive, also a truncated one (TorchScript archives
  // have code/, constants.pkl and data/<N> instead).
  for (const char* mark : {"/models/model.json", "/archive_format", "/data/weights/"})
    if (bytes.find(root + mark) != std::string::npos) return true;
  return false;
}

ExportArchive readExportArchive(const std::string& path) {
  ExportArchive out;
  out.path = path;
  auto bytes = std::make_shared<std::string>(readFile(path));
  out.bytes = bytes;
  const auto quoted = "'" + path + "'";
  if (bytes->size() < 22 || bytes->compare(0, 4, "PK\x03\x04") != 0)
    throw Error(quoted + " is not a torch.export archive (" + std::to_string(bytes->size()) +
                " bytes, not a zip file; torch.export.save writes a zip archive)");
  // torch <= 2.7 wrote a flat zip (no root folder) that LibTorch's reader refuses outright. Its
  // `version` record is the export schema: torch >= 2.9 loads (and so re-saves) schema 8 only, so a
  // file of torch 2.5 (schema 7.3) must be exported again, not re-saved.
  if (bytes->find("serialized_exported_program.json") != std::string::npos) {
    auto version = legacyVersionRecord(*bytes);
    version.erase(version.find_last_not_of(" \n\r") + 1);
    if (version.find_first_not_of("0123456789.") != std::string::npos) version.clear();
    const auto what = quoted + " is a torch.export archive in the pre-2.8 layout (serialized_exported_program.json" +
                      (version.empty() ? "" : ", export schema " + version) + "); foldnorm reads the layout of torch >= 2.9: ";
    if (!version.empty() && version.rfind("8.", 0) != 0)
      throw Error(what + "torch >= 2.9 cannot load schema " + version + " either, so export the model again with "
                  "torch >= 2.9 (torch.export.export, then torch.export.save)");
    throw Error(what + "load and re-save it with torch >= 2.9");
  }
  std::istringstream in(*bytes);  // outlives the reader, which keeps a pointer to it
  std::unique_ptr<caffe2::serialize::PyTorchStreamReader> reader;
  try {
    reader = std::make_unique<caffe2::serialize::PyTorchStreamReader>(&in);
    out.records = reader->getAllRecords();
    out.prefix = rootFolder(*bytes);
    auto fail = [&](const std::string& what) { throw Error(quoted + " " + what); };
    auto has = [&](const std::string& r) { return reader->hasRecord(r); };
    if (!has("models/model.json")) {
      if (has("code/") || has("constants.pkl") || has("data.pkl"))
        fail("is a TorchScript or torch.save archive, not a torch.export archive (no models/model.json)");
      fail("is a zip archive but not a torch.export archive (no models/model.json; entries: " +
           recordList(out.records) + ")");
    }
    out.archiveFormat = has("archive_format") ? recordText(*reader, "archive_format") : "";
    out.archiveVersion = has("archive_version") ? recordText(*reader, "archive_version") : "";
    if (out.archiveFormat != "pt2")
      fail("has models/model.json but archive_format is '" + out.archiveFormat + "', not 'pt2'");
    if (out.archiveVersion != "0")
      fail("is a PT2 archive of version '" + out.archiveVersion + "'; foldnorm reads version 0 (written by torch 2.9 and newer; checked with 2.9 to 2.14)");
    if (has("byteorder")) {
      auto order = recordText(*reader, "byteorder");
      if (order != "little") fail("stores tensors in byte order '" + order + "'; foldnorm reads little-endian only");
    }
    const bool newWeights = has("data/weights/model_weights_config.json");
    if (!newWeights && has("data/weights/model.pt"))
      fail("is a torch.export archive in the torch 2.8 layout (pickled data/weights/model.pt); foldnorm "
           "reads the layout of torch >= 2.9: load and re-save it with torch >= 2.9");
    if (!newWeights) fail("lacks data/weights/model_weights_config.json (a damaged or incomplete archive?)");
    if (!has("data/constants/model_constants_config.json"))
      fail("lacks data/constants/model_constants_config.json (a damaged or incomplete archive?)");
    for (const auto& r : out.records)
      if (r.rfind("models/", 0) == 0 && r != "models/model.json" && r.size() > 12 &&
          r.compare(r.size() - 5, 5, ".json") == 0)
        fail("holds more than one program (" + r + "); foldnorm reads archives of one model named 'model'");

    out.program = parseJson(recordText(*reader, "models/model.json"), "models/model.json", path);
    const auto& p = out.program;
    if (!p.is_object() || !p.contains("graph_module") || !p.contains("schema_version"))
      fail("has a models/model.json without graph_module or schema_version (not an ExportedProgram)");
    try {
      out.schemaMajor = p["schema_version"].at("major").get<int>();
      out.schemaMinor = p["schema_version"].at("minor").get<int>();
      out.torchVersion = p.value("torch_version", std::string{});
      if (p.contains("verifiers") && p["verifiers"].is_array())
        for (const auto& v : p["verifiers"]) out.dialects.push_back(v.get<std::string>());
      if (p.contains("opset_version") && p["opset_version"].is_object() && p["opset_version"].contains("aten"))
        out.atenOpset = p["opset_version"]["aten"].get<int64_t>();
    } catch (const nlohmann::json::exception& e) {
      fail("has malformed version fields in models/model.json: " + firstLine(e.what()));
    }
    if (out.schemaMajor != kExportSchemaMajor)
      fail("uses export schema " + std::to_string(out.schemaMajor) + "." + std::to_string(out.schemaMinor) +
           " (written by torch " + (out.torchVersion.empty() ? "?" : out.torchVersion) +
           "); foldnorm reads schema major " + std::to_string(kExportSchemaMajor) + " (written by torch 2.9 and newer; checked with 2.9 to 2.14)");

    out.weightsConfig = parseJson(recordText(*reader, "data/weights/model_weights_config.json"),
                                  "data/weights/model_weights_config.json", path);
    out.constantsConfig = parseJson(recordText(*reader, "data/constants/model_constants_config.json"),
                                    "data/constants/model_constants_config.json", path);
    std::map<std::string, c10::Storage> storages;
    readTensors(*reader, out.weightsConfig, "data/weights/", false, storages, out);
    readTensors(*reader, out.constantsConfig, "data/constants/", true, storages, out);

    const std::string sample = "data/sample_inputs/model.pt";
    if (has(sample) && reader->getRecordSize(sample) > 0) {
      auto text = recordText(*reader, sample);
      c10::IValue inputs;
      try {
        // torch::pickle_load, with every tensor mapped to the CPU: a program exported on a GPU
        // pickles its example inputs as CUDA tensors, which a machine without one cannot create.
        std::istringstream bytes(text);
        caffe2::serialize::PyTorchStreamReader inner(&bytes);
        inputs = torch::jit::readArchiveAndTensors("data", "", "", std::nullopt, std::nullopt, at::Device(at::kCPU),
                                                   inner);
      } catch (const c10::Error& e) {
        fail("has unreadable example inputs (" + sample + "): " + firstLine(e.what_without_backtrace()));
      }
      flattenInputs(inputs, "", out);
      out.hasExampleInputs = true;
    }
  } catch (const Error&) {
    throw;
  } catch (const c10::Error& e) {
    const std::string msg = e.what_without_backtrace();
    if (msg.find("not in a subdirectory") != std::string::npos)
      throw Error(quoted + " is a zip archive but not a PyTorch archive (its entries lie in no root folder): " +
                  firstLine(msg));
    throw Error(quoted + " is a damaged or truncated torch.export archive (" + std::to_string(bytes->size()) +
                " bytes): " + firstLine(msg));
  }
  return out;
}

namespace {

/// The first serialized device {"type": ..., "index": ...} under `node` that is not the CPU.
std::optional<std::string> foreignDevice(const nlohmann::json& node) {
  if (node.is_object()) {
    if (node.size() <= 2 && node.contains("type") && node["type"].is_string() &&
        (node.size() == 1 || node.contains("index"))) {
      auto type = node["type"].get<std::string>();
      if (type == "cpu") return std::nullopt;
      if (node.contains("index") && node["index"].is_number_integer())
        type += ":" + std::to_string(node["index"].get<int64_t>());
      return type;
    }
    for (const auto& [key, value] : node.items())
      if (auto d = foreignDevice(value)) return d;
  } else if (node.is_array()) {
    for (const auto& value : node)
      if (auto d = foreignDevice(value)) return d;
  }
  return std::nullopt;
}

}  // namespace

std::string namedDevice(const ExportArchive& archive) {
  for (const auto* doc : {&archive.program, &archive.weightsConfig, &archive.constantsConfig})
    if (auto d = foreignDevice(*doc)) return *d;
  return "cpu";
}

}  // namespace foldnorm
