// Facts of the floating dtypes, by the names the Graph records ("float32", "bfloat16", ...).
#pragma once

#include <cmath>
#include <string>

namespace foldnorm {

/// Unit roundoff of a floating dtype: 2^-53, 2^-24, 2^-11, 2^-8 for float64, float32, float16,
/// bfloat16; 0 for any other name. Used by the scaled-leaf rule (its float32 error budget) and the
/// fold's verification (the saved file's bound for the dtype its weights are saved in).
inline double unitRoundoff(const std::string& dtype) {
  if (dtype == "float64") return std::ldexp(1.0, -53);
  if (dtype == "float32") return std::ldexp(1.0, -24);
  if (dtype == "float16") return std::ldexp(1.0, -11);
  if (dtype == "bfloat16") return std::ldexp(1.0, -8);
  return 0;
}

}  // namespace foldnorm
