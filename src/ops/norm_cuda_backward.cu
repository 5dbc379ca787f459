// CUDA backward of foldnorm::rms_norm / foldnorm::layer_norm (the formulas of
// norm_cpu_backward_rows.h). Two kernels, plain pointers only (norm_cuda.h):
//   1. one warp per row: the row's mean and rstd again (the forward keeps none), stored for
//      kernel 2, then mean(gw) and mean(gw * xhat) and dx = rstd * (gw - [mean(gw)] - xhat *
//      mean(gw * xhat)), gw = dy * w. Scalar, strided loads; accumulation in float (double).
//   2. one thread per column and row block: dw += dy * xhat and db += dy over the block's rows
//      (coalesced across the columns), into that block's partial row. The caller sums the partial
//      rows in block order, so the result is deterministic.
// Built for training-time correctness on every dtype; the forward kernels are the tuned ones.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "norm_cuda.h"
#include "norm_cuda_convert.cuh"

namespace foldnorm::ops::cuda {
namespace {

constexpr int kWarpsPerBlock = 8;
constexpr int kColumnThreads = 128;

template <typename Acc>
__device__ __forceinline__ Acc warpAllSum(Acc s) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) s += __shfl_xor_sync(0xffffffffu, s, offset);
  return s;
}

template <typename T, typename P, bool kLayer>
__global__ void __launch_bounds__(kWarpsPerBlock * 32)
    normBackwardRowKernel(const T* __restrict__ g, const T* __restrict__ x,
                          const P* __restrict__ w, T* __restrict__ dx,
                          typename Convert<T>::Acc* __restrict__ stats, int64_t rows, int64_t cols,
                          typename Convert<T>::Acc eps) {
  using Acc = typename Convert<T>::Acc;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x & 31;
  if (row >= rows) return;  // whole warps leave together
  const T* xr = x + row * cols;
  const T* gr = g + row * cols;
  const Acc count = static_cast<Acc>(cols);

  Acc mean = 0;
  if constexpr (kLayer) {
    Acc s = 0;
    for (int64_t j = lane; j < cols; j += 32) s += Convert<T>::load(xr[j]);
    mean = warpAllSum(s) / count;
  }
  Acc q = 0;
  for (int64_t j = lane; j < cols; j += 32) {
    const Acc d = Convert<T>::load(xr[j]) - mean;
    q += d * d;
  }
  const Acc rstd = Acc(1) / sqrt(warpAllSum(q) / count + eps);
  if (lane == 0) {
    stats[2 * row] = mean;
    stats[2 * row + 1] = rstd;
  }
  if (dx == nullptr) return;

  Acc dot = 0, sumGw = 0;
  for (int64_t j = lane; j < cols; j += 32) {
    Acc gw = Convert<T>::load(gr[j]);
    if (w) gw *= static_cast<Acc>(Convert<P>::load(w[j]));
    dot += gw * (Convert<T>::load(xr[j]) - mean);
    sumGw += gw;
  }
  const Acc meanGwXhat = warpAllSum(dot) * rstd / count;
  const Acc meanGw = kLayer ? warpAllSum(sumGw) / count : Acc(0);
  T* dxr = dx + row * cols;
  for (int64_t j = lane; j < cols; j += 32) {
    Acc gw = Convert<T>::load(gr[j]);
    if (w) gw *= static_cast<Acc>(Convert<P>::load(w[j]));
    const Acc hat = (Convert<T>::load(xr[j]) - mean) * rstd;
    dxr[j] = Convert<T>::store((gw - meanGw - hat * meanGwXhat) * rstd);
  }
}

template <typename T>
__global__ void __launch_bounds__(kColumnThreads)
    normBackwardColumnKernel(const T* __restrict__ g, const T* __restrict__ x,
                             const typename Convert<T>::Acc* __restrict__ stats,
                             typename Convert<T>::Acc* __restrict__ dwPartial,
                             typename Convert<T>::Acc* __restrict__ dbPartial, int64_t rows,
                             int64_t cols, int64_t rowsPerBlock) {
  using Acc = typename Convert<T>::Acc;
  const int64_t col = static_cast<int64_t>(blockIdx.x) * kColumnThreads + threadIdx.x;
  if (col >= cols) return;
  const int64_t block = blockIdx.y;
  const int64_t first = block * rowsPerBlock;
  const int64_t last = first + rowsPerBlock < rows ? first + rowsPerBlock : rows;
  Acc dw = 0, db = 0;
  for (int64_t r = first; r < last; ++r) {
    const Acc gv = Convert<T>::load(g[r * cols + col]);
    const Acc hat = (Convert<T>::load(x[r * cols + col]) - stats[2 * r]) * stats[2 * r + 1];
    dw += gv * hat;
    db += gv;
  }
  if (dwPartial) dwPartial[block * cols + col] = dw;
  if (dbPartial) dbPartial[block * cols + col] = db;
}

template <typename T, typename P>
void launchBackwardTyped(const NormBackwardCudaCall& c, cudaStream_t stream) {
  using Acc = typename Convert<T>::Acc;
  const auto* g = static_cast<const T*>(c.gradOut);
  const auto* x = static_cast<const T*>(c.x);
  const auto* w = static_cast<const P*>(c.weight);
  auto* dx = static_cast<T*>(c.gradInput);
  auto* stats = static_cast<Acc*>(c.stats);
  const int64_t rowBlocks = (c.rows + kWarpsPerBlock - 1) / kWarpsPerBlock;
  const auto eps = static_cast<Acc>(c.eps);
  if (c.layerNorm) {
    normBackwardRowKernel<T, P, true><<<rowBlocks, kWarpsPerBlock * 32, 0, stream>>>(
        g, x, w, dx, stats, c.rows, c.cols, eps);
  } else {
    normBackwardRowKernel<T, P, false><<<rowBlocks, kWarpsPerBlock * 32, 0, stream>>>(
        g, x, w, dx, stats, c.rows, c.cols, eps);
  }
  if (c.gradWeightPartial == nullptr && c.gradBiasPartial == nullptr) return;
  const int64_t partialRows = (c.rows + c.rowsPerBlock - 1) / c.rowsPerBlock;
  const dim3 grid(static_cast<unsigned>((c.cols + kColumnThreads - 1) / kColumnThreads),
                  static_cast<unsigned>(partialRows));
  normBackwardColumnKernel<T><<<grid, kColumnThreads, 0, stream>>>(
      g, x, stats, static_cast<Acc*>(c.gradWeightPartial), static_cast<Acc*>(c.gradBiasPartial),
      c.rows, c.cols, c.rowsPerBlock);
}

template <typename T>
void launchBackwardReduced(const NormBackwardCudaCall& c, cudaStream_t stream) {
  if (c.paramType == NormDtype::kFloat32) return launchBackwardTyped<T, float>(c, stream);
  launchBackwardTyped<T, T>(c, stream);
}

}  // namespace

cudaError_t launchNormBackward(const NormBackwardCudaCall& c, cudaStream_t stream) {
  if (c.rows == 0 || c.cols == 0) return cudaSuccess;
  if ((c.rows + kWarpsPerBlock - 1) / kWarpsPerBlock > 0x7fffffff ||
      (c.rows + c.rowsPerBlock - 1) / c.rowsPerBlock > 65535) {
    return cudaErrorInvalidConfiguration;
  }
  switch (c.dataType) {
    case NormDtype::kFloat32: launchBackwardTyped<float, float>(c, stream); break;
    case NormDtype::kFloat64: launchBackwardTyped<double, double>(c, stream); break;
    case NormDtype::kBFloat16: launchBackwardReduced<__nv_bfloat16>(c, stream); break;
    case NormDtype::kFloat16: launchBackwardReduced<__half>(c, stream); break;
  }
  return cudaGetLastError();
}

}  // namespace foldnorm::ops::cuda
