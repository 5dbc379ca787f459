// The torch.export fixture programs of the interpreter and .pt2 fold tests
// (tests/fixtures/export_fold_models.py) and their Python reference outputs.
#pragma once

#include <torch/csrc/jit/serialization/pickle.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "foldnorm/import/export_archive.h"
#include "helpers.h"

namespace foldnorm::test {

inline const std::vector<std::string> kExportPrograms{"tied_lm",     "prenorm",    "decomposed", "conv_ln",
                                                     "keywords",    "grad_region", "layerscale", "embed_ln",
                                                     "grad_tied",   "grad_nested", "view_write",
                                                     "position_ids", "dead_reader"};

/// The fixture folder, made once per build (into a private folder, then renamed, so parallel
/// tests never read a half-written one). Empty when there is no Python here; a failing fixture
/// script throws (a broken fixture is a failure, not a skip).
inline std::string exportFixtures() {
  static const std::string dir = [] {
    namespace fs = std::filesystem;
    // Keyed by the script's text: a build folder made before the script changed would otherwise
    // keep serving the old programs (and miss the new ones).
    const std::string script = std::string(FOLDNORM_SOURCE_DIR) + "/tests/fixtures/export_fold_models.py";
    std::ifstream scriptFile(script);
    const std::string scriptText((std::istreambuf_iterator<char>(scriptFile)), std::istreambuf_iterator<char>());
    std::ostringstream key;
    key << std::hex << std::hash<std::string>{}(scriptText);
    const std::string target = std::string(FOLDNORM_TEST_MODELS) + "/export-fold-" + key.str();
    if (fs::exists(target + "/done")) return target;
    fs::create_directories(FOLDNORM_TEST_MODELS);
    const std::string tmp = target + ".tmp-" + std::to_string(::getpid());
    const std::string command = std::string(FOLDNORM_PYTHON) + " " + script + " --out " + tmp + " > " + tmp + ".log 2>&1";
    if (!fs::exists(FOLDNORM_PYTHON)) return std::string();
    if (std::system(command.c_str()) != 0) {
      std::ifstream log(tmp + ".log");
      std::string text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
      throw std::runtime_error("export_fold_models.py failed: " + text.substr(text.size() > 2000 ? text.size() - 2000 : 0));
    }
    std::ofstream(tmp + "/done") << "ok\n";
    std::error_code ec;
    fs::rename(tmp, target, ec);  // another test process may have won: its copy is as good
    if (ec) removeFlatDir(tmp);
    return target;
  }();
  return dir;
}

struct Reference {
  std::vector<std::vector<at::Tensor>> inputs, outputs;
};

inline Reference readReference(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto dict = torch::pickle_load(bytes).toGenericDict();
  auto sets = [&](const char* key) {
    std::vector<std::vector<at::Tensor>> out;
    for (const auto& set : dict.at(key).toListRef()) {
      out.emplace_back();
      for (const auto& t : set.toListRef()) out.back().push_back(t.toTensor());
    }
    return out;
  };
  return {sets("inputs"), sets("outputs")};
}

inline std::map<std::string, at::Tensor> stateOf(const ExportArchive& archive) {
  std::map<std::string, at::Tensor> state;
  for (const auto& t : archive.tensors) state[t.name] = t.tensor;
  return state;
}

inline double relativeError(const at::Tensor& got, const at::Tensor& want) {
  auto g = got.to(at::kDouble), w = want.to(at::kDouble);
  return (g - w).abs().max().item<double>() / std::max(w.abs().max().item<double>(), 1e-30);
}

}  // namespace foldnorm::test
