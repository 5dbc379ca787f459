// Example-input specs: how to make the tensors a model is run on to record shapes and verify.
//
// Text form (CLI `--input`, and one per line in the model's embedded spec):
//   SHAPE:DTYPE[RANGE]
//   SHAPE  = dims joined by 'x', e.g. 2x16 or 1x3x224x224 (a 0-dim tensor: "scalar")
//   DTYPE  = float32 | float64 | float16 | bfloat16 | int64 | int32 | bool   (default float32)
//   RANGE  = optional "[lo,hi)": integers drawn uniformly from [lo, hi); floats uniform in
//            [lo, hi). Without a range floats are standard normal and integers are in [0, 2).
// Examples: "2x16:int64[0,50257)", "1x3x224x224:float32", "2x16:int64[1,2)" (all ones).
//
// Embedded form: a TorchScript extra file named kInputSpecExtraFile holding JSON
//   {"format": "foldnorm-input-spec", "version": 1, "inputs": ["2x16:int64[0,50257)", ...]}
// written by the built-in models; anyone can add it with torch.jit.save(..., _extra_files=...).
#pragma once

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

namespace foldnorm {

inline constexpr const char* kInputSpecExtraFile = "foldnorm_input_spec.json";

struct InputSpec {
  std::vector<int64_t> shape;
  std::string dtype = "float32";
  std::optional<double> low;   // with high: a uniform range [low, high)
  std::optional<double> high;

  bool isFloating() const;
  std::string toString() const;  // round-trips through parseInputSpec
  bool operator==(const InputSpec& o) const {
    return shape == o.shape && dtype == o.dtype && low == o.low && high == o.high;
  }
};

inline std::ostream& operator<<(std::ostream& os, const InputSpec& s) { return os << s.toString(); }

/// Throws foldnorm::Error naming the bad part and the expected form.
InputSpec parseInputSpec(const std::string& text);

/// The JSON of the embedded form, and its reader (throws foldnorm::Error on bad JSON).
std::string inputSpecsToJson(const std::vector<InputSpec>& specs);
std::vector<InputSpec> inputSpecsFromJson(const std::string& json);

}  // namespace foldnorm
