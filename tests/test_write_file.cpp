// The one file writer (common/write_file.h): atomic, never over a protected input, one clear
// error for each bad target, and no temporary file left behind when it refuses.
#include <catch2/catch.hpp>

#include <dirent.h>

#include <fstream>
#include <sstream>

#include "foldnorm/common/error.h"
#include "foldnorm/common/write_file.h"
#include "helpers.h"

using Catch::Contains;
using foldnorm::Error;
using foldnorm::writeFileAtomically;

namespace {

std::string readAll(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

int filesIn(const std::filesystem::path& dir) {
  int n = 0;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (const dirent* e = ::readdir(d))
      if (std::string(e->d_name) != "." && std::string(e->d_name) != "..") ++n;
    ::closedir(d);
  }
  return n;
}

}  // namespace

TEST_CASE("writeFileAtomically writes, replaces and leaves no temporary file", "[unit][write_file]") {
  foldnorm::test::ScratchDir dir("write-file");
  auto target = (dir.path / "out.json").string();
  writeFileAtomically(target, "first\n");
  CHECK(readAll(target) == "first\n");
  writeFileAtomically(target, "second, longer\n");
  CHECK(readAll(target) == "second, longer\n");
  CHECK(filesIn(dir.path) == 1);
}

TEST_CASE("writeFileAtomically refuses bad targets with one line and writes nothing", "[unit][write_file]") {
  foldnorm::test::ScratchDir dir("write-file");
  auto model = (dir.path / "model.pt").string();
  std::ofstream(model) << "the input";
  SECTION("the input model, also by another spelling") {
    CHECK_THROWS_WITH(writeFileAtomically(model, "x", {model}), Contains("refusing to overwrite"));
    auto other = (dir.path / "." / "model.pt").string();
    CHECK_THROWS_WITH(writeFileAtomically(other, "x", {model}), Contains("it is the input model"));
    CHECK(readAll(model) == "the input");
  }
  SECTION("a folder") {
    CHECK_THROWS_WITH(writeFileAtomically(dir.path.string(), "x"), Contains("it is a folder"));
  }
  SECTION("a missing folder") {
    auto missing = (dir.path / "no" / "out.json").string();
    CHECK_THROWS_AS(writeFileAtomically(missing, "x"), Error);
    CHECK_THROWS_WITH(foldnorm::checkOutputFile(missing), Contains("does not exist"));
  }
  CHECK(filesIn(dir.path) == 1);
}

TEST_CASE("removeStaleTemporaries removes a killed save's file and folder, nothing else", "[unit][write_file]") {
  foldnorm::test::ScratchDir dir("write-file");
  const auto dead = std::to_string(foldnorm::test::deadProcessId());
  auto at = [&](const std::string& name) { return (dir.path / name).string(); };
  std::ofstream(at("out.pt.tmp-" + dead)) << "half a model";              // fold.cpp's temporary
  std::filesystem::create_directory(at(".foldnorm-tmp-" + dead));           // export_write.cpp's
  std::ofstream(at(".foldnorm-tmp-" + dead + "/out.pt2")) << "half an archive";
  std::ofstream(at("out.pt.tmp-1")) << "a running process's save";         // pid 1 runs
  std::ofstream(at("out.pt.tmp-" + dead + "x")) << "not a process id";
  std::ofstream(at("other.pt.tmp-" + dead)) << "another output's";
  foldnorm::removeStaleTemporaries(dir.path.string(), "out.pt.tmp-");
  foldnorm::removeStaleTemporaries(dir.path.string(), ".foldnorm-tmp-");
  CHECK_FALSE(std::filesystem::exists(at("out.pt.tmp-" + dead)));
  CHECK_FALSE(std::filesystem::exists(at(".foldnorm-tmp-" + dead)));
  CHECK(std::filesystem::exists(at("out.pt.tmp-1")));
  CHECK(std::filesystem::exists(at("out.pt.tmp-" + dead + "x")));
  CHECK(std::filesystem::exists(at("other.pt.tmp-" + dead)));
  CHECK(filesIn(dir.path) == 3);
  foldnorm::removeStaleTemporaries((dir.path / "missing").string(), "x");  // no folder: nothing, no throw
}
