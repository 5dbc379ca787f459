// CUDA kernels of foldnorm::rms_norm / foldnorm::layer_norm (design: docs/kernels.md, after
// /work/shared/gpu-kernels.md section 2).
//
// Fast path (float32/bfloat16/float16, parameters of the input's type, 16-byte aligned rows):
//   128-thread blocks; a group of threadsPerRow threads per row (8/16/32/64/128 by hidden size,
//   QuACK's Hopper ladder), so a block holds 128 / threadsPerRow rows. Each thread loads its
//   itemsPerThread 16-byte vectors of the row (interleaved across the group, so a warp's loads are
//   coalesced) into registers, all loads issued before any use; the row is read from memory once.
//   float sums per thread in a fixed order, xor-shuffle across the group (every lane gets the same
//   bits), one shared-memory step when a row spans several warps. rstd = 1 / sqrtf(mean + eps)
//   with IEEE sqrt and division (the CPU kernel's formula, not rsqrt.approx). y = (x*rstd)*w + b
//   (LayerNorm: ((x - mean)*rstd)*w + b) in
//   float with one rounding to the output type, 16-byte stores. Vectors past the row's end are
//   predicated off, so any hidden size divisible by the vector width works.
// Fallback (float64, mixed parameter dtype, odd hidden sizes, misaligned pointers, rows too long
//   for registers): one warp per row, scalar loads, x read twice (stats, then output; the second
//   read mostly hits L1/L2). Same formulas, double accumulation for float64.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "norm_cuda.h"
#include "norm_cuda_convert.cuh"

namespace foldnorm::ops::cuda {
namespace {

constexpr int kBlockThreads = 128;
constexpr int kFallbackWarpsPerBlock = 8;

template <typename T>
struct alignas(16) Vec16 {
  static constexpr int kElements = 16 / sizeof(T);
  T v[kElements];
};

template <typename Acc>
__device__ __forceinline__ Acc warpSum(Acc s) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) s += __shfl_xor_sync(0xffffffffu, s, offset);
  return s;
}

// Sum over the kTpr threads of one row group. A butterfly of commutative additions, so every
// lane ends with the same bits; with several warps per row, the warp sums are added in warp order.
template <int kTpr>
__device__ __forceinline__ float groupSum(float s, float* partials) {
  constexpr int kLanes = kTpr < 32 ? kTpr : 32;
#pragma unroll
  for (int offset = kLanes / 2; offset > 0; offset /= 2) {
    s += __shfl_xor_sync(0xffffffffu, s, offset);
  }
  if constexpr (kTpr > 32) {
    constexpr int kWarpsPerRow = kTpr / 32;
    const int group = threadIdx.x / kTpr;
    const int warpInRow = (threadIdx.x % kTpr) / 32;
    if ((threadIdx.x & 31) == 0) partials[group * kWarpsPerRow + warpInRow] = s;
    __syncthreads();
    s = 0.f;
#pragma unroll
    for (int i = 0; i < kWarpsPerRow; ++i) s += partials[group * kWarpsPerRow + i];
    __syncthreads();  // the next reduction reuses `partials`
  }
  return s;
}

// x + r as aten::add computes it (float, alpha 1), rounded to T and back: add_rms_norm normalizes
// exactly the tensor aten::add would write.
template <typename T>
__device__ __forceinline__ typename Convert<T>::Acc roundedSum(T x, T r) {
  using Acc = typename Convert<T>::Acc;
  return Convert<T>::load(Convert<T>::store(static_cast<Acc>(Convert<T>::load(x)) +
                                            static_cast<Acc>(Convert<T>::load(r))));
}

// kAdd (add_rms_norm): the row is x + residual, rounded, written to `sum` as it is loaded; the
// statistics and the output then see exactly what the unfused kernel would read back.
template <typename T, int kTpr, int kItems, bool kLayer, bool kAdd>
__global__ void __launch_bounds__(kBlockThreads)
    normRegisterRowKernel(const T* __restrict__ x, const T* __restrict__ weight,
                          const T* __restrict__ bias, T* __restrict__ y, int64_t rows, int cols,
                          float eps, const T* __restrict__ residual, T* __restrict__ sum) {
  using V = Vec16<T>;
  constexpr int kVec = V::kElements;
  constexpr int kRowsPerBlock = kBlockThreads / kTpr;
  constexpr int kWarpsPerRow = kTpr > 32 ? kTpr / 32 : 1;
  __shared__ float partials[kRowsPerBlock * kWarpsPerRow];

  const int lane = threadIdx.x % kTpr;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kTpr;
  // Threads of a row past the end stay to the end: the multi-warp reduction has block barriers.
  const bool rowValid = row < rows;
  const int vectorsPerRow = cols / kVec;
  const V* xRow = reinterpret_cast<const V*>(x) + (rowValid ? row : 0) * vectorsPerRow;

  float v[kItems][kVec];
#pragma unroll
  for (int i = 0; i < kItems; ++i) {
    const int idx = i * kTpr + lane;
    if (rowValid && idx < vectorsPerRow) {
      const V raw = xRow[idx];
      if constexpr (kAdd) {
        const int64_t at = row * vectorsPerRow + idx;
        const V res = reinterpret_cast<const V*>(residual)[at];
        V s;
#pragma unroll
        for (int k = 0; k < kVec; ++k) {
          s.v[k] = Convert<T>::store(Convert<T>::load(raw.v[k]) + Convert<T>::load(res.v[k]));
          v[i][k] = Convert<T>::load(s.v[k]);
        }
        reinterpret_cast<V*>(sum)[at] = s;
      } else {
#pragma unroll
        for (int k = 0; k < kVec; ++k) v[i][k] = Convert<T>::load(raw.v[k]);
      }
    } else {
#pragma unroll
      for (int k = 0; k < kVec; ++k) v[i][k] = 0.f;
    }
  }

  const float count = static_cast<float>(cols);
  float scale, mean = 0.f;
  if constexpr (kLayer) {
    float s = 0.f;
#pragma unroll
    for (int i = 0; i < kItems; ++i)
#pragma unroll
      for (int k = 0; k < kVec; ++k) s += v[i][k];
    mean = groupSum<kTpr>(s, partials) / count;
    float q = 0.f;
#pragma unroll
    for (int i = 0; i < kItems; ++i) {
      if (i * kTpr + lane < vectorsPerRow) {  // padding is 0, not mean: leave it out
#pragma unroll
        for (int k = 0; k < kVec; ++k) {
          const float d = v[i][k] - mean;
          q = fmaf(d, d, q);
        }
      }
    }
    const float var = groupSum<kTpr>(q, partials) / count;
    scale = 1.0f / sqrtf(var + eps);
  } else {
    float s = 0.f;
#pragma unroll
    for (int i = 0; i < kItems; ++i)
#pragma unroll
      for (int k = 0; k < kVec; ++k) s = fmaf(v[i][k], v[i][k], s);
    const float meanSquare = groupSum<kTpr>(s, partials) / count;
    scale = 1.0f / sqrtf(meanSquare + eps);
  }
  if (!rowValid) return;

  const V* wVec = reinterpret_cast<const V*>(weight);
  const V* bVec = reinterpret_cast<const V*>(bias);
  V* yRow = reinterpret_cast<V*>(y) + row * vectorsPerRow;
#pragma unroll
  for (int i = 0; i < kItems; ++i) {
    const int idx = i * kTpr + lane;
    if (idx >= vectorsPerRow) continue;
    V w, b, out;
    if (weight) w = wVec[idx];
    if (bias) b = bVec[idx];
#pragma unroll
    for (int k = 0; k < kVec; ++k) {
      float t = (kLayer ? v[i][k] - mean : v[i][k]) * scale;
      if (weight && bias) {
        t = fmaf(t, Convert<T>::load(w.v[k]), Convert<T>::load(b.v[k]));
      } else if (weight) {
        t *= Convert<T>::load(w.v[k]);
      } else if (bias) {
        t += Convert<T>::load(b.v[k]);
      }
      out.v[k] = Convert<T>::store(t);
    }
    yRow[idx] = out;
  }
}

// kAdd: pass 1 writes the rounded sum, which pass 2 then reads back (the same lane wrote it).
template <typename T, typename P, bool kLayer, bool kAdd>
__global__ void __launch_bounds__(kFallbackWarpsPerBlock * 32)
    normWarpRowKernel(const T* x, const P* __restrict__ weight, const P* __restrict__ bias,
                      T* __restrict__ y, int64_t rows, int64_t cols, typename Convert<T>::Acc eps,
                      const T* __restrict__ residual, T* sum) {
  using Acc = typename Convert<T>::Acc;
  const int64_t row =
      static_cast<int64_t>(blockIdx.x) * kFallbackWarpsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x & 31;
  if (row >= rows) return;  // whole warps leave together; only warp-level sync below
  if constexpr (kAdd) {
    const T* rRow = residual + row * cols;
    T* sRow = sum + row * cols;
    for (int64_t j = lane; j < cols; j += 32) {
      sRow[j] = Convert<T>::store(roundedSum(x[row * cols + j], rRow[j]));
    }
    x = sum;  // pass 2 and the statistics read the sum
  }
  const T* xRow = x + row * cols;
  T* yRow = y + row * cols;
  const Acc count = static_cast<Acc>(cols);

  Acc s = 0;
  for (int64_t j = lane; j < cols; j += 32) {
    const Acc v = Convert<T>::load(xRow[j]);
    s += kLayer ? v : v * v;
  }
  s = warpSum(s);
  Acc scale, mean = 0;
  if constexpr (kLayer) {
    mean = s / count;
    Acc q = 0;
    for (int64_t j = lane; j < cols; j += 32) {
      const Acc d = Convert<T>::load(xRow[j]) - mean;
      q += d * d;
    }
    q = warpSum(q);
    scale = Acc(1) / sqrt(q / count + eps);
  } else {
    scale = Acc(1) / sqrt(s / count + eps);
  }
  for (int64_t j = lane; j < cols; j += 32) {
    Acc t = Convert<T>::load(xRow[j]);
    if (kLayer) t -= mean;
    t *= scale;
    if (weight && bias) {
      t = fma(t, static_cast<Acc>(Convert<P>::load(weight[j])),
              static_cast<Acc>(Convert<P>::load(bias[j])));
    } else if (weight) {
      t *= static_cast<Acc>(Convert<P>::load(weight[j]));
    } else if (bias) {
      t += static_cast<Acc>(Convert<P>::load(bias[j]));
    }
    yRow[j] = Convert<T>::store(t);
  }
}

// The itemsPerThread values compiled for one threadsPerRow, ascending; a row uses the smallest
// that covers it and predicates the rest. One list serves the plan and the launch.
template <int... kItems>
struct ItemLadder {
  static int pick(int needed) {
    int chosen = 0;
    ((chosen = (chosen == 0 && needed <= kItems) ? kItems : chosen), ...);
    return chosen;
  }
  template <typename T, int kTpr, bool kLayer, bool kAdd>
  static void launch(int items, const NormCudaCall& c, int64_t blocks, cudaStream_t stream) {
    ((items == kItems
          ? (normRegisterRowKernel<T, kTpr, kItems, kLayer, kAdd>
             <<<blocks, kBlockThreads, 0, stream>>>(
                 static_cast<const T*>(c.x), static_cast<const T*>(c.weight),
                 static_cast<const T*>(c.bias), static_cast<T*>(c.y), c.rows,
                 static_cast<int>(c.cols), static_cast<float>(c.eps),
                 static_cast<const T*>(c.residual), static_cast<T*>(c.sum)),
             0)
          : 0),
     ...);
  }
};

template <int kTpr>
struct LadderFor;
template <>
struct LadderFor<8> {
  using type = ItemLadder<1, 2>;
};
template <>
struct LadderFor<16> {
  using type = ItemLadder<1, 2>;
};
template <>
struct LadderFor<32> {
  using type = ItemLadder<1, 2, 3, 4, 6, 8, 12, 16, 24>;
};
template <>
struct LadderFor<64> {
  using type = ItemLadder<8, 12, 16, 24>;
};
template <>
struct LadderFor<128> {
  using type = ItemLadder<8, 12, 16, 24>;
};

int threadsPerRowFor(int64_t cols) {
  if (cols <= 64) return 8;
  if (cols <= 128) return 16;
  if (cols <= 3072) return 32;
  if (cols <= 6144) return 64;
  return 128;
}

int pickItems(int threadsPerRow, int needed) {
  switch (threadsPerRow) {
    case 8: return LadderFor<8>::type::pick(needed);
    case 16: return LadderFor<16>::type::pick(needed);
    case 32: return LadderFor<32>::type::pick(needed);
    case 64: return LadderFor<64>::type::pick(needed);
    default: return LadderFor<128>::type::pick(needed);
  }
}

int elementBytes(NormDtype t) {
  switch (t) {
    case NormDtype::kFloat64: return 8;
    case NormDtype::kFloat32: return 4;
    default: return 2;
  }
}

bool aligned16(const void* p) { return p == nullptr || reinterpret_cast<uintptr_t>(p) % 16 == 0; }

template <typename T, bool kLayer, bool kAdd>
void launchRegisterRow(const NormCudaPlan& plan, const NormCudaCall& c, cudaStream_t stream) {
  const int items = plan.itemsPerThread;
  switch (plan.threadsPerRow) {
    case 8: return LadderFor<8>::type::launch<T, 8, kLayer, kAdd>(items, c, plan.blocks, stream);
    case 16: return LadderFor<16>::type::launch<T, 16, kLayer, kAdd>(items, c, plan.blocks, stream);
    case 32: return LadderFor<32>::type::launch<T, 32, kLayer, kAdd>(items, c, plan.blocks, stream);
    case 64: return LadderFor<64>::type::launch<T, 64, kLayer, kAdd>(items, c, plan.blocks, stream);
    default:
      return LadderFor<128>::type::launch<T, 128, kLayer, kAdd>(items, c, plan.blocks, stream);
  }
}

template <typename T, typename P>
void launchWarpRow(const NormCudaPlan& plan, const NormCudaCall& c, cudaStream_t stream) {
  using Acc = typename Convert<T>::Acc;
  const auto* x = static_cast<const T*>(c.x);
  const auto* w = static_cast<const P*>(c.weight);
  const auto* b = static_cast<const P*>(c.bias);
  auto* y = static_cast<T*>(c.y);
  const auto eps = static_cast<Acc>(c.eps);
  const auto* r = static_cast<const T*>(c.residual);
  auto* s = static_cast<T*>(c.sum);
  constexpr int kThreads = kFallbackWarpsPerBlock * 32;
  if (c.layerNorm) {
    normWarpRowKernel<T, P, true, false><<<plan.blocks, kThreads, 0, stream>>>(
        x, w, b, y, c.rows, c.cols, eps, nullptr, nullptr);
  } else if (r != nullptr) {
    normWarpRowKernel<T, P, false, true><<<plan.blocks, kThreads, 0, stream>>>(
        x, w, b, y, c.rows, c.cols, eps, r, s);
  } else {
    normWarpRowKernel<T, P, false, false><<<plan.blocks, kThreads, 0, stream>>>(
        x, w, b, y, c.rows, c.cols, eps, nullptr, nullptr);
  }
}

template <typename T>
void launchTyped(const NormCudaPlan& plan, const NormCudaCall& c, cudaStream_t stream) {
  if constexpr (!std::is_same_v<T, double>) {
    if (plan.registerRow) {
      if (c.layerNorm) return launchRegisterRow<T, true, false>(plan, c, stream);
      if (c.residual != nullptr) return launchRegisterRow<T, false, true>(plan, c, stream);
      return launchRegisterRow<T, false, false>(plan, c, stream);
    }
  }
  if constexpr (!std::is_same_v<T, float> && !std::is_same_v<T, double>) {
    if (c.paramType == NormDtype::kFloat32) return launchWarpRow<T, float>(plan, c, stream);
  }
  launchWarpRow<T, T>(plan, c, stream);
}

}  // namespace

NormCudaPlan planNorm(const NormCudaCall& c) {
  NormCudaPlan plan;
  const int bytes = elementBytes(c.dataType);
  const int vec = 16 / bytes;
  const bool vectorizable = c.dataType != NormDtype::kFloat64 && c.paramType == c.dataType &&
                            c.cols % vec == 0 && aligned16(c.x) && aligned16(c.y) &&
                            aligned16(c.weight) && aligned16(c.bias) &&
                            aligned16(c.residual) && aligned16(c.sum);
  if (vectorizable) {
    const int tpr = threadsPerRowFor(c.cols);
    const int64_t vectors = c.cols / vec;
    const int64_t needed = (vectors + tpr - 1) / tpr;
    const int items = needed <= 64 ? pickItems(tpr, static_cast<int>(needed)) : 0;
    if (items > 0) {
      plan.registerRow = true;
      plan.threadsPerRow = tpr;
      plan.itemsPerThread = items;
      plan.vectorElements = vec;
      plan.rowsPerBlock = kBlockThreads / tpr;
      plan.blocks = (c.rows + plan.rowsPerBlock - 1) / plan.rowsPerBlock;
      return plan;
    }
  }
  plan.threadsPerRow = 32;
  plan.rowsPerBlock = kFallbackWarpsPerBlock;
  plan.blocks = (c.rows + kFallbackWarpsPerBlock - 1) / kFallbackWarpsPerBlock;
  return plan;
}

cudaError_t launchNorm(const NormCudaCall& c, cudaStream_t stream) {
  if (c.rows == 0 || c.cols == 0) return cudaSuccess;
  const NormCudaPlan plan = planNorm(c);
  if (plan.blocks > 0x7fffffff) return cudaErrorInvalidConfiguration;
  switch (c.dataType) {
    case NormDtype::kFloat32: launchTyped<float>(plan, c, stream); break;
    case NormDtype::kFloat64: launchTyped<double>(plan, c, stream); break;
    case NormDtype::kBFloat16: launchTyped<__nv_bfloat16>(plan, c, stream); break;
    case NormDtype::kFloat16: launchTyped<__half>(plan, c, stream); break;
  }
  return cudaGetLastError();
}

}  // namespace foldnorm::ops::cuda
