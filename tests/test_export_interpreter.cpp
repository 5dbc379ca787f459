// The torch.export interpreter against Python: the programs of tests/fixtures/export_fold_models.py,
// whose reference outputs are what torch.export.load(...).module() computes.
#include <catch2/catch.hpp>

#include "foldnorm/common/error.h"
#include "export_fold_fixtures.h"
#include "foldnorm/import/export_archive.h"
#include "foldnorm/interpreter/export_interpreter.h"
#include "skip.h"

using namespace foldnorm;
using namespace foldnorm::test;


TEST_CASE("the export interpreter computes what torch.export.load computes", "[python][export]") {
  auto dir = exportFixtures();
  if (dir.empty()) return skipTest("no Python here to export the fixtures with");
  for (const auto& name : kExportPrograms) {
    SECTION(name) {
      auto archive = readExportArchive(dir + "/" + name + ".pt2");
      auto ref = readReference(dir + "/" + name + ".ref.pt");
      ExportInterpreter run32(archive.program, stateOf(archive));
      ExportInterpreter run64(archive.program, stateOf(archive), {at::kDouble, c10::kCPU});
      REQUIRE(ref.inputs.size() == 2);
      for (std::size_t s = 0; s < ref.inputs.size(); ++s) {
        auto out = run32.run(ref.inputs[s]);
        auto out64 = run64.run(ref.inputs[s]);
        REQUIRE(out.size() == ref.outputs[s].size());
        REQUIRE(out64.size() == ref.outputs[s].size());
        for (std::size_t i = 0; i < out.size(); ++i) {
          INFO(name << " input set " << s << " output " << i);
          REQUIRE(out[i].sizes() == ref.outputs[s][i].sizes());
          REQUIRE(out[i].scalar_type() == ref.outputs[s][i].scalar_type());
          CHECK(relativeError(out[i], ref.outputs[s][i]) <= 1e-6);
          if (ref.outputs[s][i].is_floating_point()) {
            // float64 really ran in float64 and computes the same function.
            CHECK(out64[i].scalar_type() == at::kDouble);
            CHECK(relativeError(out64[i], ref.outputs[s][i]) <= 1e-4);
          }
        }
      }
      // The outputs depend on the input (the two sets differ somewhere).
      bool differ = false;
      for (std::size_t i = 0; i < ref.outputs[0].size(); ++i)
        differ = differ || !ref.outputs[0][i].equal(ref.outputs[1][i]);
      CHECK(differ);
    }
  }
}

TEST_CASE("the export interpreter names the node it cannot run", "[python][export]") {
  auto dir = exportFixtures();
  if (dir.empty()) return skipTest("no Python here to export the fixtures with");
  auto archive = readExportArchive(dir + "/tied_lm.pt2");
  auto program = archive.program;
  auto& nodes = program["graph_module"]["graph"]["nodes"];
  nodes[1]["target"] = "torch.ops.aten.no_such_op.default";
  try {
    ExportInterpreter run(program, stateOf(archive));
    FAIL("an unknown op was accepted");
  } catch (const Error& e) {
    CHECK_THAT(e.what(), Catch::Contains("node 1") && Catch::Contains("aten::no_such_op"));
  }
  auto missing = stateOf(archive);
  missing.erase("fc.weight");
  CHECK_THROWS_WITH(ExportInterpreter(archive.program, missing), Catch::Contains("fc.weight"));
}

