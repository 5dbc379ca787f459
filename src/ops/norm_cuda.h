// The CUDA launcher of foldnorm::rms_norm / foldnorm::layer_norm. Plain pointers only, so that
// norm_cuda.cu needs no LibTorch headers; norm_cuda_register.cpp turns tensors into a call.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace foldnorm::ops::cuda {

enum class NormDtype { kFloat32, kFloat64, kBFloat16, kFloat16 };

struct NormCudaCall {
  bool layerNorm = false;
  NormDtype dataType = NormDtype::kFloat32;
  NormDtype paramType = NormDtype::kFloat32;  // the input's type, or float32 for 16-bit inputs
  const void* x = nullptr;
  const void* weight = nullptr;  // may be null
  const void* bias = nullptr;    // may be null
  void* y = nullptr;
  // foldnorm::add_rms_norm (RMS only): the row normalized is x + residual rounded to the data
  // type, written to `sum` too.
  const void* residual = nullptr;
  void* sum = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;
  double eps = 0;
};

/// Which kernel and launch shape a call takes; the tests and the benchmark print it.
struct NormCudaPlan {
  bool registerRow = false;  // row held in registers (fast path); else warp-per-row fallback
  int threadsPerRow = 0;
  int itemsPerThread = 0;  // 16-byte vectors per thread (register path)
  int vectorElements = 0;  // elements per 16-byte vector (register path)
  bool alignedVectors = false;  // every pointer 16-byte aligned: vector loads (else element loads)
  int rowsPerBlock = 0;
  int64_t blocks = 0;
};

NormCudaPlan planNorm(const NormCudaCall& call);

/// Launches on `stream`; returns the launch error (cudaSuccess when none).
cudaError_t launchNorm(const NormCudaCall& call, cudaStream_t stream);

/// The backward of one norm call (norm_cuda_backward.cu). gradInput, gradWeightPartial and
/// gradBiasPartial may be null. `stats` holds 2 * rows values of the accumulation type (float;
/// double for float64) for the per-row mean and rstd; the partial buffers one row of it per block
/// of rowsPerBlock rows, zeroed, summed by the caller in block order.
struct NormBackwardCudaCall {
  bool layerNorm = false;
  NormDtype dataType = NormDtype::kFloat32;
  NormDtype paramType = NormDtype::kFloat32;
  const void* gradOut = nullptr;
  const void* x = nullptr;
  const void* weight = nullptr;
  void* gradInput = nullptr;
  void* gradWeightPartial = nullptr;
  void* gradBiasPartial = nullptr;
  void* stats = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t rowsPerBlock = 1;
  double eps = 0;
};

cudaError_t launchNormBackward(const NormBackwardCudaCall& call, cudaStream_t stream);

}  // namespace foldnorm::ops::cuda
