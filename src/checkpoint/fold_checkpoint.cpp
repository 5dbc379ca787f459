// The checkpoint fold: shards in, shards out, one tensor in memory at a time (fold_checkpoint.h).
#include "foldnorm/checkpoint/fold_checkpoint.h"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <cstring>

#include "foldnorm/common/dtype.h"
#include "foldnorm/common/error.h"

namespace fs = std::filesystem;

namespace foldnorm::checkpoint {
namespace {

constexpr int64_t kCopyChunk = 16 << 20;  // the fixed copy buffer

std::string gb(int64_t bytes) {
  char buf[32];
  const double b = static_cast<double>(bytes);
  if (b >= 1e9) std::snprintf(buf, sizeof buf, "%.2f GB", b / 1e9);
  else if (b >= 1e6) std::snprintf(buf, sizeof buf, "%.1f MB", b / 1e6);
  else std::snprintf(buf, sizeof buf, "%.1f kB", b / 1e3);
  return buf;
}

std::string torchDtype(const std::string& d) {
  if (d == "BF16") return "bfloat16";
  if (d == "F16") return "float16";
  if (d == "F32") return "float32";
  if (d == "F64") return "float64";
  return d;
}

/// An open file descriptor, closed on scope exit.
struct Fd {
  int fd = -1;
  Fd(const std::string& path, int flags, mode_t mode = 0644) : fd(::open(path.c_str(), flags | O_CLOEXEC, mode)) {
    if (fd < 0) throw Error("cannot open " + path + ": " + std::strerror(errno));
  }
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
};

void readAt(int fd, char* dst, int64_t bytes, int64_t offset, const std::string& what) {
  while (bytes > 0) {
    const ssize_t n = ::pread(fd, dst, static_cast<size_t>(bytes), offset);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw Error("cannot read " + what + (n < 0 ? std::string(": ") + std::strerror(errno) : ": unexpected end of file"));
    dst += n;
    bytes -= n;
    offset += n;
  }
}

void writeAll(int fd, const char* src, int64_t bytes, const std::string& what) {
  while (bytes > 0) {
    const ssize_t n = ::write(fd, src, static_cast<size_t>(bytes));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw Error("cannot write " + what + ": " + std::strerror(errno));
    src += n;
    bytes -= n;
  }
}

/// Progress on `options.progress`, about once a second, with a linear estimate of what is left.
struct Progress {
  const FoldCheckpointOptions& options;
  int64_t total = 0, done = 0;
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now(), last = start;
  void advance(int64_t bytes, const std::string& tensor) {
    done += bytes;
    if (options.interrupted && options.interrupted()) throw Error("interrupted: nothing was written (the partial output was removed)");
    const auto now = std::chrono::steady_clock::now();
    if (!options.progress || now - last < std::chrono::seconds(1)) return;
    last = now;
    const double elapsed = std::chrono::duration<double>(now - start).count();
    const double frac = total > 0 ? static_cast<double>(done) / static_cast<double>(total) : 1.0;
    char buf[256];
    std::snprintf(buf, sizeof buf, "fold-checkpoint: %s of %s (%.0f%%), %.0f s elapsed, about %.0f s left (%s)",
                  gb(done).c_str(), gb(total).c_str(), 100 * frac, elapsed,
                  frac > 0 ? elapsed * (1 - frac) / frac : 0.0, tensor.c_str());
    options.progress(buf);
  }
};

/// The output folder's temporary sibling: removed unless committed. It is flat (files only), and
/// removed with POSIX calls: libtorch exports its own std::filesystem::remove_all, which crashes
/// in our binaries (as src/common/write_file.cpp notes).
struct Staging {
  fs::path dir, target;
  bool committed = false;
  ~Staging() {
    if (committed || dir.empty()) return;
    if (DIR* d = ::opendir(dir.c_str())) {
      while (const dirent* e = ::readdir(d)) {
        const std::string name = e->d_name;
        if (name != "." && name != "..") ::unlink((dir / name).c_str());
      }
      ::closedir(d);
    }
    ::rmdir(dir.c_str());
  }
};

}  // namespace

void checkOutputFolder(const std::string& src, const std::string& out) {
  if (out.empty()) throw Error("no output folder given");
  std::error_code ec;
  if (fs::exists(out)) throw Error(out + " exists: foldnorm writes a new folder (remove it or choose another name)");
  const auto parent = fs::absolute(out).parent_path();
  if (!fs::is_directory(parent)) throw Error("the output's folder " + parent.string() + " does not exist");
  const auto a = fs::weakly_canonical(fs::absolute(src)), b = fs::weakly_canonical(fs::absolute(out));
  auto starts = [](const fs::path& p, const fs::path& q) {
    auto r = std::mismatch(q.begin(), q.end(), p.begin(), p.end());
    return r.first == q.end();
  };
  if (starts(b, a)) throw Error("the output " + out + " would be inside the input " + src);
}

namespace {

nlohmann::json readConfig(const std::string& src) {
  const auto path = fs::path(src) / "config.json";
  if (!fs::exists(path)) throw Error(src + " has no config.json (a Hugging Face checkpoint folder is expected)");
  try {
    std::ifstream in(path);
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw Error(path.string() + " is not JSON (" + std::string(e.what()) + ")");
  }
}

void writeText(const fs::path& path, const std::string& text) {
  Fd f(path.string(), O_WRONLY | O_CREAT | O_TRUNC);
  writeAll(f.fd, text.data(), static_cast<int64_t>(text.size()), path.string());
  ::fsync(f.fd);
}

/// Weight files other than the safetensors shards hold the unfolded weights: never copied.
bool isOtherWeightFile(const fs::path& p) {
  static const std::set<std::string> ext = {".bin", ".pt", ".pth", ".ckpt", ".h5", ".msgpack", ".safetensors", ".gguf"};
  return ext.count(p.extension().string()) > 0;
}

nlohmann::json baseResult(const std::string& src, const std::string& out, const CheckpointPlan& plan,
                          const CheckpointIndex& index, const ResolvedPlan& r, bool dryRun) {
  nlohmann::json j;
  j["schema"] = kResultSchema;
  j["source"] = src;
  j["output"] = out;
  j["dry_run"] = dryRun;
  j["architecture"] = plan.architecture;
  j["layers"] = r.layers;
  j["shards"] = index.shards.size();
  j["tensors"] = index.tensors.size();
  j["bytes"] = index.totalBytes();
  j["largest_tensor_bytes"] = index.largestTensorBytes();
  nlohmann::json centered = nlohmann::json::array(), dtypes = nlohmann::json::object();
  for (const auto& c : r.center) {
    nlohmann::json axes = nlohmann::json::array();
    for (auto [a, g] : c.center) axes.push_back({{"axis", a}, {"groups", g}});
    const auto& e = index.tensors.at(c.name);
    centered.push_back({{"name", c.name}, {"shape", e.shape}, {"dtype", e.dtype}, {"center", axes}});
    dtypes[e.dtype] = dtypes.value(e.dtype, 0) + 1;
  }
  j["centered"] = centered;
  j["centered_bytes"] = r.centerBytes;
  j["centered_dtypes"] = dtypes;
  nlohmann::json untied = nlohmann::json::array();
  for (const auto& [name, source] : r.untie) untied.push_back({{"name", name}, {"copy_of", source}});
  j["untied"] = untied;
  j["untied_bytes"] = r.untieBytes;
  j["rms_norms"] = r.rmsNorms;
  j["kept"] = plan.raw.value("kept", nlohmann::json::array());
  j["stripped_prefix"] = r.stripPrefix ? plan.baseModelPrefix : "";
  // One centered tensor, its column means, sums and magnitudes (float64 each; a float64 copy
  // when a tensor has several actions), and the copy buffer.
  int64_t largest = 0;
  for (const auto& c : r.center) {
    const auto& e = index.tensors.at(c.name);
    int64_t numel = 1;
    for (auto d : e.shape) numel *= d;
    const int64_t columns = numel / (e.shape[c.center.back().first] / c.center.back().second);
    largest = std::max(largest, (e.end - e.begin) + 3 * 8 * columns + (c.center.size() > 1 ? 8 * numel : 0));
  }
  j["memory_bound_bytes"] = largest + kCopyChunk;
  return j;
}

}  // namespace

nlohmann::json foldCheckpoint(const std::string& src, const std::string& out, const CheckpointPlan& plan,
                              const FoldCheckpointOptions& options) {
  const auto started = std::chrono::steady_clock::now();
  const auto index = readCheckpointIndex(src);
  auto config = readConfig(src);
  const auto r = resolvePlan(plan, index, config);
  if (!options.dryRun) checkOutputFolder(src, out);
  auto result = baseResult(src, out, plan, index, r, options.dryRun);
  if (options.dryRun) return result;

  Staging staging;
  staging.target = fs::absolute(out);
  staging.dir = staging.target.parent_path() /
                ("." + staging.target.filename().string() + ".foldnorm-partial-" + std::to_string(::getpid()));
  fs::create_directory(staging.dir);

  std::map<std::string, const CenterTensor*> toCenter;
  for (const auto& c : r.center) toCenter[c.name] = &c;
  std::map<std::string, std::vector<std::string>> untieAfter;  // source -> heads written after it
  for (const auto& [name, source] : r.untie) untieAfter[source].push_back(name);

  std::vector<char> buffer;  // the fixed copy buffer
  try {
    buffer.resize(kCopyChunk);
  } catch (const std::bad_alloc&) {
    throw Error("out of memory for the " + gb(kCopyChunk) + " copy buffer");
  }
  Progress progress{options};
  progress.total = index.totalBytes() + r.untieBytes;
  std::vector<char> tensor;  // the one centered tensor in memory
  double worstSum = 0;
  std::map<std::string, double> worstByDtype;
  nlohmann::json weightMap = nlohmann::json::object();
  int64_t written = 0;

  for (const auto& shard : index.shards) {
    // The output shard: the same tensors in the same order, untied heads after their source.
    std::vector<TensorEntry> entries;
    std::vector<std::string> sourceOf;  // the input tensor each output entry is read from
    for (const auto& name : shard.tensors) {
      entries.push_back(index.tensors.at(name));
      sourceOf.push_back(name);
      for (const auto& head : untieAfter[name]) {
        auto e = index.tensors.at(name);
        e.name = head;
        entries.push_back(e);
        sourceOf.push_back(name);
      }
    }
    const auto header = makeShardHeader(entries, shard.metadata);
    const auto inPath = (fs::path(src) / shard.file).string();
    Fd in(inPath, O_RDONLY);
    const auto outPath = (staging.dir / shard.file).string();
    Fd outFile(outPath, O_WRONLY | O_CREAT | O_EXCL);
    writeAll(outFile.fd, header.data(), static_cast<int64_t>(header.size()), outPath);
    for (std::size_t k = 0; k < entries.size(); ++k) {
      const auto& e = entries[k];
      const auto& source = index.tensors.at(sourceOf[k]);
      const int64_t bytes = e.end - e.begin, from = shard.dataStart + source.begin;
      const bool center = e.name == source.name && toCenter.count(e.name);
      if (center) {
        try {
          tensor.resize(bytes);
        } catch (const std::bad_alloc&) {
          throw Error("out of memory for tensor " + e.name + " (" + gb(bytes) + "): the fold holds the largest centered "
                      "tensor in memory (" + gb(result["memory_bound_bytes"].get<int64_t>()) + " with its means and buffer)");
        }
        readAt(in.fd, tensor.data(), bytes, from, inPath + " (" + e.name + ")");
        double w = 0;
        try {
          w = centerInPlace(tensor.data(), e.dtype, e.shape, toCenter.at(e.name)->center);
        } catch (const std::bad_alloc&) {
          throw Error("out of memory for the means of tensor " + e.name);
        }
        const double bound = 2 * unitRoundoff(torchDtype(e.dtype)) + 1e-13;
        if (!(w <= bound))  // the written values' sums along the axis, in float64
          throw Error("tensor " + e.name + " is not centered after rounding to " + e.dtype + " (|sum|/sum|x| = " +
                      std::to_string(w) + "): a bug, please report it");
        worstSum = std::max(worstSum, w);
        worstByDtype[e.dtype] = std::max(worstByDtype[e.dtype], w);
        writeAll(outFile.fd, tensor.data(), bytes, outPath);
        progress.advance(bytes, e.name);
      } else {  // copied byte for byte (an untied head: the original of the tensor it was tied to)
        for (int64_t off = 0; off < bytes; off += kCopyChunk) {
          const int64_t n = std::min(kCopyChunk, bytes - off);
          readAt(in.fd, buffer.data(), n, from + off, inPath + " (" + e.name + ")");
          writeAll(outFile.fd, buffer.data(), n, outPath);
          progress.advance(n, e.name);
        }
      }
      weightMap[e.name] = shard.file;
      written += bytes;
    }
    if (::fsync(outFile.fd) != 0) throw Error("cannot write " + outPath + ": " + std::strerror(errno));
    if (tensor.capacity() > (64 << 20)) std::vector<char>().swap(tensor);  // give large buffers back between shards
  }
  if (index.sharded) {
    nlohmann::json j;
    j["metadata"] = index.indexMetadata.is_object() ? index.indexMetadata : nlohmann::json::object();
    j["metadata"]["total_size"] = written;
    j["weight_map"] = weightMap;
    writeText(staging.dir / "model.safetensors.index.json", j.dump(2) + "\n");
  }
  // Also when the head was saved on its own already: a config that still says tied would make
  // from_pretrained tie it to the centered embedding again.
  if (!plan.untie.empty()) {
    config["tie_word_embeddings"] = false;
    for (const auto& key : {"text_config", "decoder"})
      if (config.contains(key) && config[key].is_object() && config[key].contains("tie_word_embeddings"))
        config[key]["tie_word_embeddings"] = false;
  }
  writeText(staging.dir / "config.json", config.dump(2) + "\n");
  nlohmann::json folded;
  folded["schema"] = "foldnorm-folded-checkpoint/1";
  folded["rms_norms"] = r.rmsNorms;
  folded["centered"] = result["centered"];
  folded["untied"] = result["untied"];
  folded["kept"] = result["kept"];
  folded["source"] = fs::absolute(src).string();
  folded["plan"] = plan.raw;
  writeText(staging.dir / kFoldedPlanFile, folded.dump(2) + "\n");
  // Tokenizer, generation config and the like come along; other weight files (the unfolded
  // weights in another format) do not.
  nlohmann::json skipped = nlohmann::json::array();
  std::set<std::string> ours = {"config.json", "model.safetensors.index.json", kFoldedPlanFile};
  for (const auto& s : index.shards) ours.insert(s.file);
  for (const auto& e : fs::directory_iterator(src)) {
    const auto name = e.path().filename().string();
    if (ours.count(name) || !e.is_regular_file()) continue;
    if (isOtherWeightFile(e.path())) {
      skipped.push_back(name);
      continue;
    }
    Fd from(e.path().string(), O_RDONLY), to((staging.dir / name).string(), O_WRONLY | O_CREAT | O_EXCL);
    for (int64_t off = 0;; off += kCopyChunk) {
      const ssize_t n = ::pread(from.fd, buffer.data(), kCopyChunk, off);
      if (n < 0) throw Error("cannot read " + e.path().string() + ": " + std::strerror(errno));
      if (n == 0) break;
      writeAll(to.fd, buffer.data(), n, (staging.dir / name).string());
    }
  }
  int dir = ::open(staging.dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir >= 0) {
    ::fsync(dir);
    ::close(dir);
  }
  if (options.interrupted && options.interrupted()) throw Error("interrupted: nothing was written (the partial output was removed)");
  if (fs::exists(staging.target)) throw Error(out + " appeared while folding: the fold was not moved there");
  std::error_code ec;
  fs::rename(staging.dir, staging.target, ec);
  if (ec) throw Error("cannot move the fold into " + out + ": " + ec.message());
  staging.committed = true;
  result["skipped_files"] = skipped;
  result["written_bytes"] = written;
  result["worst_axis_sum_relative"] = worstSum;
  nlohmann::json byDtype = nlohmann::json::object();
  for (const auto& [d, w] : worstByDtype) byDtype[d] = w;
  result["worst_axis_sum_relative_by_dtype"] = byDtype;
  result["seconds"] = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  return result;
}

std::string resultText(const nlohmann::json& j) {
  std::ostringstream s;
  const bool dry = j.value("dry_run", false);
  s << (dry ? "dry run: " : "folded: ") << j.value("architecture", std::string("?")) << ", " << j["layers"].get<int>()
    << " layers, " << j["tensors"].get<int64_t>() << " tensors in " << j["shards"].get<int64_t>() << " shard(s), "
    << gb(j["bytes"].get<int64_t>()) << "\n";
  s << "  center " << j["centered"].size() << " tensors (" << gb(j["centered_bytes"].get<int64_t>()) << "; ";
  bool first = true;
  for (const auto& [d, n] : j["centered_dtypes"].items()) {
    s << (first ? "" : ", ") << n.get<int>() << " " << d;
    first = false;
  }
  s << ")\n";
  const auto& c = j["centered"];
  for (std::size_t i = 0; i < c.size() && i < 6; ++i) {
    s << "    " << c[i]["name"].get<std::string>() << " " << c[i]["shape"].dump() << " " << c[i]["dtype"].get<std::string>()
      << ": axis";
    for (const auto& a : c[i]["center"]) s << " " << a["axis"].get<int>() << (a["groups"].get<int>() > 1 ? " in " + std::to_string(a["groups"].get<int>()) + " groups" : "");
    s << "\n";
  }
  if (c.size() > 6) s << "    ... and " << c.size() - 6 << " more\n";
  for (const auto& u : j["untied"])
    s << "  untie " << u["name"].get<std::string>() << " (written as its own tensor: the original "
      << u["copy_of"].get<std::string>() << "; config.json tie_word_embeddings = false)\n";
  s << "  LayerNorm -> RMSNorm: " << j["rms_norms"].size() << " module(s)";
  if (!j["rms_norms"].empty()) s << " (" << j["rms_norms"][0].get<std::string>() << ", ...)";
  s << "\n";
  for (const auto& k : j["kept"]) s << "  kept as LayerNorm: " << k.value("module", std::string("?")) << " (" << k.value("reason", std::string()) << ")\n";
  if (!j.value("stripped_prefix", std::string()).empty())
    s << "  (the checkpoint names its tensors without the prefix " << j["stripped_prefix"].get<std::string>() << ".)\n";
  s << "  peak memory bound: " << gb(j["memory_bound_bytes"].get<int64_t>()) << " (largest centered tensor, its means, a copy buffer)\n";
  if (!dry) {
    char buf[160];
    std::snprintf(buf, sizeof buf, "  written to %s in %.1f s; worst |sum|/sum|x| along a centered axis: %.2e\n",
                  j["output"].get<std::string>().c_str(), j["seconds"].get<double>(), j["worst_axis_sum_relative"].get<double>());
    s << buf;
    for (const auto& f : j["skipped_files"]) s << "  not copied (unfolded weights in another format): " << f.get<std::string>() << "\n";
  }
  return s.str();
}

}  // namespace foldnorm::checkpoint
