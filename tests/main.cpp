// The test runner: Catch2's session, with the exit code of tests/skip.h (skipped is not passed).
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include "skip.h"

int main(int argc, char* argv[]) {
  return foldnorm::test::runnerExitCode(Catch::Session().run(argc, argv));
}
