// What `foldnorm rotate` and `foldnorm fold --absorb-affine` ask of the absorb + rotate stage
// (fold/rotate.h); both commands run it through runRotateStage (cmd_rotate.cpp).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace foldnorm::cli {

struct RotateCliRequest {
  std::string model, out, rotation = "hadamard";
  std::vector<std::string> inputs, only;
  uint64_t seed = 0;
  int random = 1;
  bool rotate = true, json = false, noInsertedRotations = false;
};

/// Runs the stage, prints the fold's and the stage's reports and saves; returns the exit code
/// (3: the float64 check failed, nothing written).
int runRotateStage(const RotateCliRequest& request);

}  // namespace foldnorm::cli
