// Loading a .pt file: what is not a loadable TorchScript archive is said in the user's terms.
#include <caffe2/serialize/inline_container.h>
#include <torch/csrc/jit/serialization/import.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>

#include "foldnorm/common/error.h"
#include "foldnorm/import/export_archive.h"
#include "foldnorm/torch/model_surgery.h"
#include "steps.h"

namespace foldnorm {
namespace {

namespace jit = torch::jit;


/// Failures of torch::jit::load, said in the user's terms.
[[noreturn]] void throwLoadError(const std::string& path, const std::string& archive, const c10::Error& e) {
  std::string msg = e.what_without_backtrace();
  if (looksLikeExportArchive(archive))
    throw Error("'" + path + "' is a torch.export archive (.pt2), not a TorchScript module; this step reads "
                "TorchScript (.pt) only");
  // A readable zip without TorchScript code: a torch.save file (state dict, pickled tensors or a
  // pickled nn.Module), which jit::load reports as a corrupted checkpoint.
  try {
    std::istringstream in(archive);
    caffe2::serialize::PyTorchStreamReader reader(&in);
    bool code = false, data = false;
    for (const auto& r : reader.getAllRecords()) {
      code = code || r.rfind("code/", 0) == 0;
      data = data || r == "data.pkl";
    }
    if (!code && data)
      throw Error("'" + path + "' is a torch.save file (pickled tensors, a state dict or a pickled "
                  "module), not a TorchScript module: save the model with "
                  "torch.jit.trace(model, example_inputs).save(path)");
  } catch (const c10::Error&) {
    // not even a readable zip: the messages below say so
  }
  // Any message below quotes only the first line of LibTorch's.
  if (msg.find("central directory") != std::string::npos ||
      msg.find("failed reading zip archive") != std::string::npos ||
      msg.find("file in archive is not in a subdirectory") != std::string::npos)
    throw Error("'" + path + "' is not a TorchScript archive (no readable zip directory: not a "
                "torch.jit.save file, or truncated)");
  if (msg.find("istream reader failed") != std::string::npos)
    throw Error("'" + path + "' is a truncated or damaged TorchScript archive (" +
                std::to_string(archive.size()) + " bytes; the zip ends early): " + firstLine(msg));
  if (msg.find("PytorchStreamReader") != std::string::npos || msg.find("crc") != std::string::npos)
    throw Error("'" + path + "' is a damaged or truncated TorchScript archive: " + firstLine(msg));
  if (msg.find("constants.pkl") != std::string::npos || msg.find("code/") != std::string::npos ||
      msg.find("not found") != std::string::npos)
    throw Error("'" + path + "' is a PyTorch archive but not a TorchScript module (was it saved "
                "with torch.save instead of torch.jit.save?): " + firstLine(msg));
  throw Error("cannot load '" + path + "' as TorchScript: " + firstLine(msg));
}

/// The file's bytes (read only to say why a load failed: a loaded model never needs them).
std::string readBytes(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>()};
}

/// The checks a missing, unreadable or non-zip path fails, before LibTorch reads it.
void checkArchiveFile(const std::string& path, const ProgressFn& progress) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::exists(path, ec)) throw Error("no such file: '" + path + "'");
  if (fs::is_directory(path, ec)) throw Error("'" + path + "' is a directory, not a .pt file");
  std::ifstream file(path, std::ios::binary);
  if (!file) throw Error("cannot read '" + path + "' (permission?)");
  if (progress) progress("loading " + path);
  const auto size = fs::file_size(path, ec);
  char magic[4] = {};
  file.read(magic, sizeof magic);
  // torch.jit.save writes a zip archive: anything else is said plainly, before LibTorch's
  // stream reader reports it as "getting the current position".
  if (ec || size < 22 || std::string(magic, sizeof magic) != "PK\x03\x04")
    throw Error("'" + path + "' is not a TorchScript archive (" + std::to_string(ec ? 0 : size) +
                " bytes, not a zip file; torch.jit.save writes a zip archive)");
}

/// Loads the module from the file itself: LibTorch's file reader reads each record into the
/// tensor that keeps it, so the file's bytes are never held beside the model (a copy of them
/// would be as much again as the model, at the import's peak).
jit::Module loadFromFile(const std::string& path, jit::ExtraFilesMap& extra, bool loadDebugFiles) {
  try {
    return jit::load(path, c10::Device(c10::kCPU), extra, loadDebugFiles);
  } catch (const std::exception&) {
    // A load that fails is said from the bytes, as LibTorch's in-memory reader words it (the
    // messages below tell truncated from damaged archives by those words).
    const auto bytes = readBytes(path);
    try {
      return loadModule(bytes, extra, loadDebugFiles);
    } catch (const c10::Error& e) {
      throwLoadError(path, bytes, e);
    }
  }
}

/// Fresh copies load the file again, refused if it changed since the import (its code would
/// not be the graph the analysis walked).
std::function<jit::Module()> reloader(const std::string& path, bool loadDebugFiles) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const auto size = fs::file_size(path, ec);
  const auto written = fs::last_write_time(path, ec);
  return [path, loadDebugFiles, size, written] {
    std::error_code e;
    if (fs::file_size(path, e) != size || fs::last_write_time(path, e) != written || e)
      throw Error("'" + path + "' changed (or went away) since it was imported: import it again");
    jit::ExtraFilesMap none;
    return jit::load(path, c10::Device(c10::kCPU), none, loadDebugFiles);
  };
}

}  // namespace

ImportedModel importTorchScript(const std::string& path, const ImportOptions& options) {
  checkArchiveFile(path, options.progress);
  // Source ranges are read from the debug records the first time a node's is looked up, and
  // LibTorch trusts them: damaged ones are left out (the model itself does not need them).
  const auto damaged = torchscript::damagedDebugRecord(path);
  if (!damaged.empty() && options.progress)
    options.progress("the archive's debug records are damaged (" + damaged +
                     "): loading without them, so source locations name the archive's code, not the model's source");
  jit::ExtraFilesMap extra{{kInputSpecExtraFile, ""}};
  jit::Module module;
  try {
    module = loadFromFile(path, extra, /*loadDebugFiles=*/damaged.empty());
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {  // the TorchScript parser's ErrorReport: damaged code/
    throw Error("cannot load '" + path + "' as TorchScript: its code does not parse (a damaged archive?): " +
                firstLine(e.what()));
  }
  std::vector<InputSpec> specs = options.inputs;
  bool fromModel = false;
  if (specs.empty() && !extra[kInputSpecExtraFile].empty()) {
    specs = inputSpecsFromJson(extra[kInputSpecExtraFile]);
    fromModel = true;
  }
  if (options.progress) options.progress("importing the forward graph");
  auto result = torchscript::importModule(std::move(module), nullptr, path, std::move(specs), fromModel, options);
  result.torch->debugRecords = damaged.empty();
  result.torch->makeCopy = reloader(path, damaged.empty());
  return result;
}

}  // namespace foldnorm
