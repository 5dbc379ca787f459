// The .pt2 reader (import/export_archive.h): what it finds in a real torch.export.save archive
// (made in Python by tests/fixtures/export_models.py, tag [export]) and the one line it says for
// archives it cannot read (synthetic archives written here with LibTorch's own zip writer).
#include <catch2/catch.hpp>
#include <torch/script.h>

#include <fstream>

#include "foldnorm/common/error.h"
#include "foldnorm/import/export_archive.h"
#include "export_test_helpers.h"
#include "helpers.h"
#include "skip.h"

using namespace foldnorm;
using foldnorm::test::fixturePath;
using foldnorm::test::haveFixture;
using foldnorm::test::minimalRecords;
using foldnorm::test::writeArchive;

namespace {

std::string errorOf(const std::string& path) {
  try {
    readExportArchive(path);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST_CASE("a torch.export.save archive is read: versions, weights by FQN with ties by storage, example inputs",
          "[export]") {
  if (!haveFixture("tied.pt2") || !haveFixture("tied.pt"))
    return test::skipTest("no export fixtures (ctest fixture make_export_models)");
  const auto archive = readExportArchive(fixturePath("tied.pt2"));
  CHECK(archive.prefix == "tied");
  CHECK(archive.archiveFormat == "pt2");
  CHECK(archive.archiveVersion == "0");
  CHECK(archive.schemaMajor == 8);
  CHECK(archive.schemaMinor >= 17);
  CHECK(archive.torchVersion.rfind("2.", 0) == 0);
  CHECK(archive.dialects == std::vector<std::string>{"TRAINING"});
  CHECK(archive.atenOpset > 0);
  CHECK(archive.program.contains("graph_module"));
  CHECK(std::find(archive.records.begin(), archive.records.end(), "models/model.json") != archive.records.end());

  // Every tensor equals the traced twin's (same prepared model), by FQN.
  auto twin = torch::jit::load(fixturePath("tied.pt"));
  std::map<std::string, at::Tensor> expected;
  for (const auto& p : twin.named_parameters()) expected[p.name] = p.value;
  for (const auto& b : twin.named_buffers()) expected[b.name] = b.value;
  REQUIRE(archive.tensors.size() == 5);  // emb.weight, head.weight (tied), ln.weight, ln.bias, pos
  for (const auto& t : archive.tensors) {
    INFO(t.name);
    REQUIRE(expected.count(t.name));
    CHECK(t.tensor.sizes() == expected[t.name].sizes());
    CHECK(t.tensor.dtype() == expected[t.name].dtype());
    CHECK(torch::equal(t.tensor, expected[t.name]));
  }
  const auto* emb = archive.find("emb.weight");
  const auto* head = archive.find("head.weight");
  const auto* pos = archive.find("pos");
  REQUIRE((emb && head && pos));
  CHECK(emb->isParameter);
  CHECK_FALSE(pos->isParameter);
  CHECK(emb->file == head->file);  // one storage: the tie
  CHECK(emb->tensor.data_ptr() == head->tensor.data_ptr());
  const auto groups = archive.sharedStorage();
  REQUIRE(groups.size() == 1);
  CHECK(groups[0].size() == 2);

  REQUIRE(archive.hasExampleInputs);
  REQUIRE(archive.exampleInputs.size() == 1);
  CHECK(archive.exampleInputs[0].sizes() == at::IntArrayRef{2, 6});
  CHECK(archive.exampleInputs[0].scalar_type() == at::kLong);
  CHECK(archive.exampleInputNames == std::vector<std::string>{""});
}

TEST_CASE("keyword-only exports keep the keyword of each example input", "[export]") {
  if (!haveFixture("hf-bert-kw.pt2")) return test::skipTest("no hf-bert-kw.pt2 export fixture");
  const auto archive = readExportArchive(fixturePath("hf-bert-kw.pt2"));
  CHECK(archive.exampleInputNames == std::vector<std::string>{"input_ids", "attention_mask"});
  CHECK(archive.exampleInputs.size() == 2);
}

TEST_CASE("a truncated .pt2 is refused in one line", "[export]") {
  if (!haveFixture("tied.pt2")) return test::skipTest("no export fixtures (ctest fixture make_export_models)");
  test::ScratchDir dir;
  std::ifstream in(fixturePath("tied.pt2"), std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  for (double keep : {0.3, 0.9}) {
    auto path = (dir.path / ("cut" + std::to_string(keep) + ".pt2")).string();
    std::ofstream(path, std::ios::binary) << bytes.substr(0, static_cast<std::size_t>(bytes.size() * keep));
    const auto msg = errorOf(path);
    INFO(msg);
    CHECK(msg.find("damaged or truncated torch.export archive") != std::string::npos);
    CHECK(msg.find('\n') == std::string::npos);
  }
}

TEST_CASE("archives that are not 2.9+ torch.export archives are named in one line") {
  test::ScratchDir dir;
  auto at = [&](const std::string& name) { return (dir.path / name).string(); };

  std::ofstream(at("text.pt2")) << "not a zip at all";
  CHECK(errorOf(at("text.pt2")).find("not a zip file") != std::string::npos);
  CHECK(errorOf(at("missing.pt2")).find("no such file") != std::string::npos);

  writeArchive(at("plain.pt2"), {{"readme.txt", "hello"}});
  CHECK(errorOf(at("plain.pt2")).find("not a torch.export archive (no models/model.json; entries: readme.txt") !=
        std::string::npos);

  writeArchive(at("legacy.pt2"), {{"serialized_exported_program.json", "{}"}, {"version", "8.7"}});
  const auto legacy = errorOf(at("legacy.pt2"));
  CHECK(legacy.find("pre-2.8 layout (serialized_exported_program.json, export schema 8.7)") != std::string::npos);
  CHECK(legacy.find("load and re-save it with torch >= 2.9") != std::string::npos);
  // torch 2.5 wrote schema 7.3, which torch 2.9 to 2.11 refuse to load: re-saving is no way out
  // (the torch-version sweep, docs/held-out.md).
  writeArchive(at("schema7.pt2"), {{"serialized_exported_program.json", "{}"}, {"version", "7.3"}});
  const auto schema7 = errorOf(at("schema7.pt2"));
  INFO(schema7);
  CHECK(schema7.find("export schema 7.3); foldnorm reads the layout of torch >= 2.9: torch >= 2.9 cannot load "
                     "schema 7.3 either, so export the model again") != std::string::npos);
  CHECK(schema7.find("re-save") == std::string::npos);
  CHECK(schema7.find('\n') == std::string::npos);

  auto v28 = minimalRecords(R"({"graph_module": {}, "schema_version": {"major": 8, "minor": 5}})");
  v28.erase(v28.begin() + 4, v28.begin() + 6);
  v28.push_back({"data/weights/model.pt", "x"});
  writeArchive(at("v28.pt2"), v28);
  CHECK(errorOf(at("v28.pt2")).find("torch 2.8 layout") != std::string::npos);

  writeArchive(at("major9.pt2"),
               minimalRecords(R"({"graph_module": {}, "schema_version": {"major": 9, "minor": 0},
                                 "torch_version": "2.15.0"})"));
  const auto major = errorOf(at("major9.pt2"));
  INFO(major);
  CHECK(major.find("export schema 9.0 (written by torch 2.15.0); foldnorm reads schema major 8") != std::string::npos);

  auto badFormat = minimalRecords(R"({"graph_module": {}, "schema_version": {"major": 8, "minor": 17}})");
  badFormat[0].second = "zip";
  writeArchive(at("format.pt2"), badFormat);
  CHECK(errorOf(at("format.pt2")).find("archive_format is 'zip'") != std::string::npos);

  writeArchive(at("json.pt2"), minimalRecords("{not json"));
  CHECK(errorOf(at("json.pt2")).find("models/model.json is not valid JSON") != std::string::npos);

  // A weight whose view reaches past its file.
  auto overrun = minimalRecords(R"({"graph_module": {}, "schema_version": {"major": 8, "minor": 17}})");
  overrun[4].second = R"({"config": {"w": {"path_name": "weight_0", "is_param": true, "use_pickle": false,
      "tensor_meta": {"dtype": 7, "sizes": [{"as_int": 4}], "strides": [{"as_int": 1}],
                      "storage_offset": {"as_int": 0}, "requires_grad": true}}}})";
  overrun.push_back({"data/weights/weight_0", std::string(8, '\0')});
  writeArchive(at("overrun.pt2"), overrun);
  CHECK(errorOf(at("overrun.pt2")).find("entry 'w' reaches past the end of data/weights/weight_0") !=
        std::string::npos);

  for (const auto* name : {"text.pt2", "plain.pt2", "legacy.pt2", "v28.pt2", "major9.pt2", "format.pt2",
                           "json.pt2", "overrun.pt2"})
    CHECK(errorOf(at(name)).find('\n') == std::string::npos);
}

TEST_CASE("a minimal synthetic archive reads: a weight as a view of its storage, two FQNs tied") {
  test::ScratchDir dir;
  auto path = (dir.path / "ok.pt2").string();
  auto records = minimalRecords(R"({"graph_module": {}, "schema_version": {"major": 8, "minor": 20},
                                    "torch_version": "2.12.0", "verifiers": ["TRAINING"]})");
  records[4].second = R"({"config": {
      "a": {"path_name": "weight_0", "is_param": true, "use_pickle": false,
            "tensor_meta": {"dtype": 8, "sizes": [{"as_int": 2}, {"as_int": 2}], "strides": [{"as_int": 1}, {"as_int": 2}],
                            "storage_offset": {"as_int": 0}, "requires_grad": true}},
      "b": {"path_name": "weight_0", "is_param": true, "use_pickle": false,
            "tensor_meta": {"dtype": 8, "sizes": [{"as_int": 2}], "strides": [{"as_int": 1}],
                            "storage_offset": {"as_int": 2}, "requires_grad": true}}}})";
  std::vector<double> data{1, 2, 3, 4};
  records.push_back({"data/weights/weight_0", std::string(reinterpret_cast<const char*>(data.data()), 32)});
  writeArchive(path, records);
  const auto archive = readExportArchive(path);
  CHECK(archive.schemaMinor == 20);
  const auto* a = archive.find("a");
  const auto* b = archive.find("b");
  REQUIRE((a && b));
  CHECK(torch::equal(a->tensor, torch::tensor({1.0, 3.0, 2.0, 4.0}, torch::kDouble).view({2, 2})));  // transposed view
  CHECK(torch::equal(b->tensor, torch::tensor({3.0, 4.0}, torch::kDouble)));
  CHECK(archive.sharedStorage().size() == 1);
  CHECK_FALSE(archive.hasExampleInputs);
  CHECK(looksLikeExportArchive(*archive.bytes));
}
