// Synthetic .pt2 archives for tests: written with LibTorch's own zip writer (the class
// torch.export.save writes through), so no Python is needed.
#pragma once

#include <caffe2/serialize/inline_container.h>

#include <string>
#include <utility>
#include <vector>

namespace foldnorm::test {

using Records = std::vector<std::pair<std::string, std::string>>;

/// A zip at `path` (root folder: the file's stem, as torch.export.save names it) with these records.
inline void writeArchive(const std::string& path, const Records& records) {
  caffe2::serialize::PyTorchStreamWriter writer(path);
  for (const auto& [name, data] : records) writer.writeRecord(name, data.data(), data.size());
  writer.writeEndOfFile();
}

/// The records of a 2.9+ archive around `program` (models/model.json); `weights` is the weights
/// config's "config" object. Indices: 4 the weights config, 5 the constants config.
inline Records minimalRecords(const std::string& program, const std::string& weights = "{}") {
  return {{"archive_format", "pt2"}, {"archive_version", "0"}, {"byteorder", "little"},
          {"models/model.json", program},
          {"data/weights/model_weights_config.json", "{\"config\": " + weights + "}"},
          {"data/constants/model_constants_config.json", "{\"config\": {}}"},
          {"data/sample_inputs/model.pt", ""}};
}

}  // namespace foldnorm::test
