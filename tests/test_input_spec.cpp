#include <catch2/catch.hpp>

#include "foldnorm/common/error.h"
#include "foldnorm/import/input_spec.h"

using foldnorm::InputSpec;
using foldnorm::parseInputSpec;

TEST_CASE("input specs parse shape, dtype and range", "[input-spec]") {
  SECTION("integer tokens with a range") {
    auto s = parseInputSpec("2x16:int64[0,1000)");
    CHECK(s.shape == std::vector<int64_t>{2, 16});
    CHECK(s.dtype == "int64");
    CHECK(*s.low == 0);
    CHECK(*s.high == 1000);
  }
  SECTION("an image without a range defaults to standard normal") {
    auto s = parseInputSpec("1x3x224x224:float32");
    CHECK(s.shape == std::vector<int64_t>{1, 3, 224, 224});
    CHECK_FALSE(s.low.has_value());
    CHECK(s.isFloating());
  }
  SECTION("dtype defaults to float32, scalar is a 0-dim tensor") {
    CHECK(parseInputSpec("4x8").dtype == "float32");
    CHECK(parseInputSpec("scalar:float64").shape.empty());
  }
  SECTION("text form round-trips") {
    for (auto text : {"2x16:int64[0,50257)", "1x3x32x32:float32", "3:float64[-0.5,0.5)"}) {
      auto s = parseInputSpec(text);
      CHECK(parseInputSpec(s.toString()) == s);
    }
  }
}

TEST_CASE("bad input specs are rejected with a message naming the part", "[input-spec]") {
  auto [text, fragment] = GENERATE(table<const char*, const char*>({
      {"", "missing shape"},
      {"2xx3", "empty dimension"},
      {"2x-3", "negative dimension"},
      {"2x3:float8", "unknown dtype 'float8'"},
      {"2x3:int64[5,1)", "empty range"},
      {"2x3:int64[0,10]", "range must look like"},
      {"2xa", "'a' is not a number"},
  }));
  INFO(text);
  CHECK_THROWS_WITH(parseInputSpec(text), Catch::Contains(fragment));
}

TEST_CASE("embedded specs are JSON with a format tag", "[input-spec]") {
  std::vector<InputSpec> specs{parseInputSpec("2x16:int64[0,100)"), parseInputSpec("2x16:int64[1,2)")};
  auto json = foldnorm::inputSpecsToJson(specs);
  CHECK(foldnorm::inputSpecsFromJson(json) == specs);
  CHECK_THROWS_AS(foldnorm::inputSpecsFromJson("{\"inputs\": 3}"), foldnorm::Error);
  CHECK_THROWS_AS(foldnorm::inputSpecsFromJson("not json"), foldnorm::Error);
}
