// Docs generated from code must not drift from it.
#include <catch2/catch.hpp>

#include <fstream>
#include <sstream>

#include "foldnorm/analysis/rules.h"

TEST_CASE("docs/rules.md is the registry's own table", "[docs][analysis]") {
  std::ifstream in(std::string(FOLDNORM_SOURCE_DIR) + "/docs/rules.md");
  REQUIRE(in);
  std::stringstream text;
  text << in.rdbuf();
  INFO("regenerate with: build/bin/foldnorm rules > docs/rules.md");
  CHECK(text.str() == foldnorm::rulesMarkdown());
}
