// Reading a torch.export archive (.pt2, torch.export.save of torch 2.9 and later): the program's
// JSON and its weights, constants and example inputs, as the file has them. The importer
// (import/export.h) turns the program into our Graph; the .pt2 fold rewrites this archive.
//
// Torch-facing: the tensors are at::Tensor, so only torch-facing code (src/import/export/,
// fold/, cli/, tests/) includes this header; the Graph side stays torch-free.
//
// The layout (torch/export/pt2_archive/_package.py, checked against the 2.11 wheel): every entry
// under one root folder named after the file; `archive_format` = "pt2", `archive_version` = "0",
// `models/model.json` (the ExportedProgram), `data/weights/weight_<N>` raw storages described by
// `data/weights/model_weights_config.json`, `data/constants/tensor_<N>` by
// `data/constants/model_constants_config.json`, `data/sample_inputs/model.pt` (torch.save of
// (args, kwargs), possibly empty). Each config entry gives dtype, sizes, strides and storage
// offset of one FQN over its file; FQNs naming one file are views of one storage (tied).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace foldnorm {

/// The schema major this reader understands (torch/_export/serde/schema.py SCHEMA_VERSION;
/// torch 2.11 writes 8.17). Minor versions add fields with defaults and are read as 8.
inline constexpr int kExportSchemaMajor = 8;

/// One weight or constant of the archive, as the config describes it.
struct ExportTensor {
  std::string name;      // FQN ("encoder.layer.0.attention.output.dense.weight") or constant name
  std::string file;      // its storage record ("data/weights/weight_3"): equal file = one storage
  bool isParameter = false;  // config `is_param`: loaded as nn.Parameter
  bool isConstant = false;   // from the constants config (lifted constants, non-persistent buffers)
  bool requiresGrad = false;
  at::Tensor tensor;         // a view over the file's storage (shared by every entry of `file`)
};

struct ExportArchive {
  std::string path;     // the file read
  std::string prefix;   // the root folder of every entry ("model" for model.pt2), without '/'
  std::vector<std::string> records;  // every entry name, without the prefix, in archive order
  std::shared_ptr<const std::string> bytes;  // the whole file, for a writer that copies records

  // Versions, as written.
  std::string archiveFormat;   // "pt2"
  std::string archiveVersion;  // "0"
  std::string torchVersion;    // ExportedProgram.torch_version, e.g. "2.11.0+cu130"
  int schemaMajor = 0;
  int schemaMinor = 0;
  std::vector<std::string> dialects;  // ExportedProgram.verifiers, e.g. {"TRAINING"}
  int64_t atenOpset = -1;             // opset_version.aten, -1 when absent

  nlohmann::json program;          // models/model.json: the whole ExportedProgram
  nlohmann::json weightsConfig;    // data/weights/model_weights_config.json
  nlohmann::json constantsConfig;  // data/constants/model_constants_config.json

  /// Every weight (parameters, persistent buffers) and constant, in config order (weights
  /// first). Names are unique across both.
  std::vector<ExportTensor> tensors;

  /// The example inputs (data/sample_inputs/model.pt): the tensor leaves of (args, kwargs)
  /// flattened in pytree order (tuples and lists in order, dicts in insertion order), which is
  /// the order of the program's tensor user inputs. `exampleInputNames` holds the keyword of
  /// each leaf passed by keyword, "" for positional ones. Empty when the archive has none.
  std::vector<at::Tensor> exampleInputs;
  std::vector<std::string> exampleInputNames;
  bool hasExampleInputs = false;

  /// The entry for a name, or nullptr.
  const ExportTensor* find(const std::string& name) const;
  /// Groups of names (indices into `tensors`) that share one storage file (ties), size > 1.
  std::vector<std::vector<std::size_t>> sharedStorage() const;
};

/// Reads and checks the archive. Throws foldnorm::Error with one clear line for anything that
/// is not a readable 2.9+ torch.export archive: a missing file, no zip, a truncated zip, the
/// pre-2.9 layouts (named, with "re-save with torch >= 2.9"), another archive kind, a schema
/// major other than 8, a config entry that does not fit its storage.
ExportArchive readExportArchive(const std::string& path);

/// The device the program names ("cuda:0" for a model exported on a GPU): the first device other
/// than the CPU in its device arguments (as_device) or its tensors' metadata, else "cpu". The
/// interpreter runs every program on the device it is asked for; this is what the file says.
std::string namedDevice(const ExportArchive& archive);

/// Whether `bytes` (a file's content, or its head and tail) is a zip whose entries under one root
/// folder include models/model.json, archive_format or data/weights/ (also true of a truncated
/// archive): the test importModel dispatches on. Never throws.
bool looksLikeExportArchive(const std::string& bytes);

}  // namespace foldnorm
