// The Hugging Face safetensors layout, read and written tensor by tensor (issue 29): a file is an
// 8-byte little-endian header length, a JSON header ({name: {dtype, shape, data_offsets}} plus an
// optional "__metadata__" of strings) and the raw bytes; a checkpoint folder is either one
// `model.safetensors` or `model.safetensors.index.json` (its "weight_map": name -> shard file)
// with the shards. Only headers are parsed here: no tensor data is read, so the index of a
// checkpoint of any size costs the size of its headers.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace foldnorm::checkpoint {

/// One tensor's entry in a shard header.
struct TensorEntry {
  std::string name;
  std::string dtype;            // safetensors spelling: BF16, F16, F32, F64, I64, BOOL, ...
  std::vector<int64_t> shape;
  int64_t begin = 0, end = 0;   // data_offsets, relative to the end of the header
  std::string shard;            // the shard's file name within the folder
};

/// One shard file: where its data starts and its tensors in file order (by offset).
struct Shard {
  std::string file;             // file name within the folder
  int64_t dataStart = 0;        // 8 + header length
  int64_t fileBytes = 0;
  nlohmann::json metadata;      // "__metadata__" (null when absent)
  std::vector<std::string> tensors;  // names, by increasing offset
};

/// A checkpoint folder's tensors, from its index and shard headers.
struct CheckpointIndex {
  std::string folder;
  bool sharded = false;         // model.safetensors.index.json (else one model.safetensors)
  nlohmann::json indexMetadata; // the index's "metadata" (null when absent)
  std::vector<Shard> shards;    // in the order the index names them
  std::map<std::string, TensorEntry> tensors;
  int64_t totalBytes() const;   // tensor data bytes, all shards
  int64_t largestTensorBytes() const;
};

/// Bytes per element of a safetensors dtype; 0 for one this module does not know.
int64_t dtypeBytes(const std::string& dtype);
/// The float dtypes the fold can center: BF16, F16, F32, F64.
bool isFloatDtype(const std::string& dtype);

/// Reads one shard's header (8-byte length, JSON) and checks it: offsets inside the file, each
/// tensor's byte size = product of its shape times its dtype size, no overlap. One-line Error
/// naming the file and the tensor otherwise.
Shard readShardHeader(const std::string& folder, const std::string& file,
                      std::map<std::string, TensorEntry>& into);

/// The checkpoint in `folder`: the index and every shard's header (no tensor data). Refuses a
/// folder with neither model.safetensors.index.json nor model.safetensors (naming what it found),
/// an index naming a missing shard, a tensor the index places in a shard that lacks it.
CheckpointIndex readCheckpointIndex(const std::string& folder);

/// A shard header for `entries` (in that order, contiguous from offset 0), padded with spaces to
/// a multiple of 8 bytes as the safetensors library writes it. Returns the bytes to write before
/// the data (length + JSON); sets each entry's begin/end.
std::string makeShardHeader(std::vector<TensorEntry>& entries, const nlohmann::json& metadata);

}  // namespace foldnorm::checkpoint
