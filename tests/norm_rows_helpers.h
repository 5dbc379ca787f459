// Shared by the CPU RMS row-schedule tests (test_norm_pipelined.cpp, test_norm_paired.cpp): raw
// bits to compare, and rows whose scales differ, so a row normalized with another row's
// statistics shows.
#pragma once

#include <torch/torch.h>

#include <cstdint>

namespace foldnorm::test {

/// The tensor's elements as integers of the same width (bitwise comparison; -0 != +0).
inline at::Tensor rawBits(const at::Tensor& t) {
  const auto c = t.contiguous();
  return c.element_size() == 2 ? c.view(torch::kInt16) : c.element_size() == 4 ? c.view(torch::kInt32) : c.view(torch::kInt64);
}

/// [rows, cols] starting `offset` elements into a larger buffer (rows not 32-byte aligned for an
/// odd offset); row k scaled by 4^(k % 5 - 2).
inline at::Tensor scaledRows(int64_t rows, int64_t cols, int64_t offset, torch::Dtype dtype, uint64_t seed) {
  torch::manual_seed(seed);
  auto scales = torch::pow(4.0, torch::arange(rows, torch::kFloat64).remainder(5) - 2).unsqueeze(1);
  auto values = (torch::randn({rows, cols}, torch::kFloat64) * scales).to(dtype);
  auto storage = torch::zeros({rows * cols + offset}, dtype);
  auto view = storage.narrow(0, offset, rows * cols).view({rows, cols});
  view.copy_(values);
  return view;
}

}  // namespace foldnorm::test
