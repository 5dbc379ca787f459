// Element conversions shared by the CUDA norm kernels (norm_cuda.cu, norm_cuda_backward.cu):
// each storage type, its accumulation type (float; double for double) and round-to-nearest-even
// stores.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace foldnorm::ops::cuda {

template <typename T>
struct Convert;
template <>
struct Convert<float> {
  using Acc = float;
  __device__ static float load(float v) { return v; }
  __device__ static float store(float v) { return v; }
};
template <>
struct Convert<double> {
  using Acc = double;
  __device__ static double load(double v) { return v; }
  __device__ static double store(double v) { return v; }
};
template <>
struct Convert<__nv_bfloat16> {
  using Acc = float;
  __device__ static float load(__nv_bfloat16 v) { return __bfloat162float(v); }
  __device__ static __nv_bfloat16 store(float v) { return __float2bfloat16_rn(v); }
};
template <>
struct Convert<__half> {
  using Acc = float;
  __device__ static float load(__half v) { return __half2float(v); }
  __device__ static __half store(float v) { return __float2half_rn(v); }
};

}  // namespace foldnorm::ops::cuda
