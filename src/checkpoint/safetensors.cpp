// Safetensors headers and the checkpoint index (include/foldnorm/checkpoint/safetensors.h).
#include "foldnorm/checkpoint/safetensors.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>

#include "foldnorm/common/error.h"

namespace fs = std::filesystem;

namespace foldnorm::checkpoint {

int64_t dtypeBytes(const std::string& d) {
  if (d == "F64" || d == "I64" || d == "U64") return 8;
  if (d == "F32" || d == "I32" || d == "U32") return 4;
  if (d == "F16" || d == "BF16" || d == "I16" || d == "U16") return 2;
  if (d == "I8" || d == "U8" || d == "BOOL" || d == "F8_E4M3" || d == "F8_E5M2") return 1;
  return 0;
}

bool isFloatDtype(const std::string& d) { return d == "BF16" || d == "F16" || d == "F32" || d == "F64"; }

int64_t CheckpointIndex::totalBytes() const {
  int64_t n = 0;
  for (const auto& [_, t] : tensors) n += t.end - t.begin;
  return n;
}

int64_t CheckpointIndex::largestTensorBytes() const {
  int64_t n = 0;
  for (const auto& [_, t] : tensors) n = std::max(n, t.end - t.begin);
  return n;
}

namespace {

// A header is JSON of at most 100 MB (the safetensors library's own limit).
constexpr uint64_t kMaxHeaderBytes = 100u << 20;

int64_t elementCount(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

}  // namespace

Shard readShardHeader(const std::string& folder, const std::string& file,
                      std::map<std::string, TensorEntry>& into) {
  const auto path = (fs::path(folder) / file).string();
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("cannot open shard " + path);
  Shard shard;
  shard.file = file;
  std::error_code ec;
  shard.fileBytes = static_cast<int64_t>(fs::file_size(path, ec));
  unsigned char len[8];
  if (!in.read(reinterpret_cast<char*>(len), 8)) throw Error(path + " is not a safetensors file (shorter than 8 bytes)");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | len[i];
  if (n == 0 || n > kMaxHeaderBytes || static_cast<int64_t>(n) + 8 > shard.fileBytes)
    throw Error(path + " is not a safetensors file (header length " + std::to_string(n) + " does not fit its " +
                std::to_string(shard.fileBytes) + " bytes)");
  std::string text(n, '\0');
  if (!in.read(text.data(), static_cast<std::streamsize>(n))) throw Error(path + ": truncated header");
  shard.dataStart = 8 + static_cast<int64_t>(n);
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw Error(path + ": the safetensors header is not JSON (" + std::string(e.what()) + ")");
  }
  if (!header.is_object()) throw Error(path + ": the safetensors header is not a JSON object");
  const int64_t dataBytes = shard.fileBytes - shard.dataStart;
  std::vector<TensorEntry> entries;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") {
      shard.metadata = it.value();
      continue;
    }
    const auto& v = it.value();
    TensorEntry t;
    t.name = it.key();
    t.shard = file;
    try {
      t.dtype = v.at("dtype").get<std::string>();
      t.shape = v.at("shape").get<std::vector<int64_t>>();
      auto off = v.at("data_offsets").get<std::vector<int64_t>>();
      if (off.size() != 2) throw Error("");
      t.begin = off[0];
      t.end = off[1];
    } catch (const std::exception&) {
      throw Error(path + ": tensor " + t.name + " has no valid dtype, shape and data_offsets in the header");
    }
    const int64_t size = dtypeBytes(t.dtype);
    if (size == 0) throw Error(path + ": tensor " + t.name + " has dtype " + t.dtype + ", which foldnorm does not know");
    if (t.begin < 0 || t.end < t.begin || t.end > dataBytes)
      throw Error(path + ": tensor " + t.name + " lies outside the file (offsets " + std::to_string(t.begin) + ".." +
                  std::to_string(t.end) + ", " + std::to_string(dataBytes) + " data bytes): truncated?");
    if (t.end - t.begin != elementCount(t.shape) * size)
      throw Error(path + ": tensor " + t.name + " has " + std::to_string(t.end - t.begin) + " bytes for shape of " +
                  std::to_string(elementCount(t.shape)) + " " + t.dtype + " elements");
    entries.push_back(std::move(t));
  }
  std::sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) { return a.begin < b.begin; });
  for (std::size_t i = 1; i < entries.size(); ++i)
    if (entries[i].begin < entries[i - 1].end)
      throw Error(path + ": tensors " + entries[i - 1].name + " and " + entries[i].name + " overlap");
  for (auto& t : entries) {
    if (into.count(t.name)) throw Error(path + ": tensor " + t.name + " is also in shard " + into[t.name].shard);
    shard.tensors.push_back(t.name);
    into[t.name] = std::move(t);
  }
  return shard;
}

CheckpointIndex readCheckpointIndex(const std::string& folder) {
  CheckpointIndex index;
  index.folder = folder;
  if (!fs::is_directory(folder)) throw Error(folder + " is not a folder (a Hugging Face checkpoint folder is expected)");
  const auto indexPath = fs::path(folder) / "model.safetensors.index.json";
  const auto single = fs::path(folder) / "model.safetensors";
  if (fs::exists(indexPath)) {
    index.sharded = true;
    nlohmann::json j;
    try {
      std::ifstream in(indexPath);
      j = nlohmann::json::parse(in);
    } catch (const nlohmann::json::exception& e) {
      throw Error(indexPath.string() + " is not JSON (" + std::string(e.what()) + ")");
    }
    if (!j.contains("weight_map") || !j["weight_map"].is_object())
      throw Error(indexPath.string() + " has no \"weight_map\" object");
    if (j.contains("metadata")) index.indexMetadata = j["metadata"];
    std::vector<std::string> files;
    std::set<std::string> seen;
    for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
      if (!it.value().is_string()) throw Error(indexPath.string() + ": weight_map[" + it.key() + "] is not a file name");
      const auto f = it.value().get<std::string>();
      if (f.find('/') != std::string::npos || f == ".." || f.empty())
        throw Error(indexPath.string() + ": weight_map[" + it.key() + "] = " + f + " is not a file in the folder");
      if (seen.insert(f).second) files.push_back(f);
    }
    std::sort(files.begin(), files.end());
    for (const auto& f : files) {
      if (!fs::exists(fs::path(folder) / f))
        throw Error(indexPath.string() + " names shard " + f + ", which is not in " + folder);
      index.shards.push_back(readShardHeader(folder, f, index.tensors));
    }
    for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
      auto t = index.tensors.find(it.key());
      if (t == index.tensors.end() || t->second.shard != it.value().get<std::string>())
        throw Error(indexPath.string() + " places tensor " + it.key() + " in " + it.value().get<std::string>() +
                    ", whose header does not have it");
    }
    if (index.tensors.size() != j["weight_map"].size())
      for (const auto& [name, t] : index.tensors)
        if (!j["weight_map"].contains(name))
          throw Error("shard " + t.shard + " holds tensor " + name + ", which " + indexPath.string() + " does not list");
  } else if (fs::exists(single)) {
    index.shards.push_back(readShardHeader(folder, "model.safetensors", index.tensors));
  } else {
    std::string found;
    for (const auto& e : fs::directory_iterator(folder)) {
      const auto ext = e.path().extension().string();
      if (ext == ".bin" || ext == ".pt" || ext == ".pth" || ext == ".safetensors" || ext == ".h5" || ext == ".msgpack")
        found += (found.empty() ? "" : ", ") + e.path().filename().string();
    }
    throw Error(folder + " has neither model.safetensors.index.json nor model.safetensors" +
                (found.empty() ? std::string(" (no weight files at all)")
                               : " (it has " + found + ": convert to safetensors with save_pretrained first)"));
  }
  return index;
}

std::string makeShardHeader(std::vector<TensorEntry>& entries, const nlohmann::json& metadata) {
  nlohmann::json header = nlohmann::json::object();
  if (!metadata.is_null()) header["__metadata__"] = metadata;
  int64_t offset = 0;
  for (auto& t : entries) {
    const int64_t bytes = t.end - t.begin;
    t.begin = offset;
    t.end = offset + bytes;
    offset = t.end;
    header[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {t.begin, t.end}}};
  }
  std::string text = header.dump();
  while ((8 + text.size()) % 8 != 0) text += ' ';
  std::string out(8, '\0');
  uint64_t n = text.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out + text;
}

}  // namespace foldnorm::checkpoint
