// Damaged archives: the importer must answer or refuse in one line, never crash (issue 13).
#include <catch2/catch.hpp>

#include <caffe2/serialize/inline_container.h>
#include <torch/csrc/jit/serialization/pickle.h>

#include <fstream>
#include <sstream>

#include "foldnorm/common/error.h"
#include "foldnorm/zoo/zoo.h"
#include "helpers.h"

using namespace foldnorm;

namespace {

std::string readFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

/// `archive` rewritten record by record, every .debug_pkl replaced by `debug`: a valid zip with
/// damaged debug records.
void writeWithDebugRecords(const std::string& archive, const std::vector<char>& debug, const std::string& out) {
  std::istringstream in(archive);
  caffe2::serialize::PyTorchStreamReader reader(&in);
  caffe2::serialize::PyTorchStreamWriter writer(out);
  // The same format version: an older one would bring in LibTorch's operator upgraders.
  writer.setMinVersion(reader.version());
  int replaced = 0;
  for (const auto& name : reader.getAllRecords()) {
    if (writer.getAllWrittenRecords().count(name) || name == "version" || name == ".data/version" ||
        name == ".data/serialization_id" || name == "byteorder")
      continue;  // the writer writes these itself
    if (name.size() > 10 && name.compare(name.size() - 10, 10, ".debug_pkl") == 0) {
      writer.writeRecord(name, debug.data(), debug.size());
      ++replaced;
      continue;
    }
    auto [data, size] = reader.getRecord(name);
    writer.writeRecord(name, data.get(), size);
  }
  writer.writeEndOfFile();
  REQUIRE(replaced > 0);
}

/// A debug record in LibTorch's own format (tag, string table, rows) whose one source range
/// points its lines at string-table entry `lineIndex`.
std::vector<char> debugRecord(int64_t lineIndex) {
  using c10::ivalue::Tuple;
  c10::List<int64_t> lines({lineIndex});
  auto source = Tuple::create({c10::IValue(lines), c10::IValue(int64_t{0}), c10::IValue(int64_t{1})});
  auto range = Tuple::create({c10::IValue(source), c10::IValue(int64_t{0}), c10::IValue(int64_t{4})});
  auto row = Tuple::create({c10::IValue(int64_t{0}), c10::IValue(range), c10::IValue(int64_t{-1})});
  auto table = Tuple::create({c10::IValue(std::string("")), c10::IValue(std::string("model.py"))});
  return torch::jit::pickle(Tuple::create({c10::IValue(std::string("FORMAT_WITH_STRING_TABLE")), c10::IValue(table),
                                           c10::IValue(Tuple::create({c10::IValue(row)}))}));
}

}  // namespace

TEST_CASE("debug records that unpickle but point outside their string table are not handed to LibTorch",
          "[import][robustness]") {
  test::ScratchDir dir;
  const auto intact = (dir.path / "gpt2.pt").string();
  ZooBuildOptions options;
  options.preset = "tiny";
  buildZooModel("gpt2", intact, options);
  const auto reference = analyzeFoldability(importTorchScript(intact).graph);

  // A line index far outside the two-entry table: LibTorch's deserializer indexes its table
  // unchecked and crashes (SIGSEGV) the first time a node's source range is looked up.
  const auto damaged = (dir.path / "damaged_debug.pt").string();
  writeWithDebugRecords(readFile(intact), debugRecord(int64_t{1} << 40), damaged);
  std::vector<std::string> notes;
  ImportOptions io;
  io.progress = [&](const std::string& m) { notes.push_back(m); };
  const auto model = importTorchScript(damaged, io);  // loads: code and weights are intact
  const auto analysis = analyzeFoldability(model.graph);
  CHECK(analysis.foldableCount() == reference.foldableCount());
  CHECK(analysis.layerNorms.size() == reference.layerNorms.size());
  bool said = false;
  for (const auto& n : notes) said = said || n.find("debug records are damaged") != std::string::npos;
  CHECK(said);

  // Control: a record in range is accepted, so the check is not refusing every rewritten file.
  const auto fine = (dir.path / "fine_debug.pt").string();
  writeWithDebugRecords(readFile(intact), debugRecord(1), fine);
  notes.clear();
  importTorchScript(fine, io);
  for (const auto& n : notes) CHECK(n.find("damaged") == std::string::npos);
}
