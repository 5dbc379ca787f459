// CUDA kernels of foldnorm::rms_norm / foldnorm::layer_norm (design: docs/kernels.md, after
// /work/shared/gpu-kernels.md section 2).
//
// Fast path (float32/bfloat16/float16; parameters of the input's type, or float32 for a 16-bit
//   input; hidden size a multiple of the 16-byte vector):
//   128-thread blocks; a group of threadsPerRow threads per row (8/16/32/64/128 by hidden size,
//   QuACK's Hopper ladder), so a block holds 128 / threadsPerRow rows. Each thread loads its
//   itemsPerThread 16-byte vectors of the row (interleaved across the group, so a warp's loads are
//   coalesced) into registers, all loads issued before any use; the row is read from memory once.
//   float sums per thread in a fixed order, xor-shuffle across the group (every lane gets the same
//   bits), one shared-memory step when a row spans several warps. rstd = 1 / sqrtf(mean + eps)
//   with IEEE sqrt and division (the CPU kernel's formula, not rsqrt.approx). y = (x*rstd)*w + b
//   (LayerNorm: ((x - mean)*rstd)*w + b) in
//   float with one rounding to the output type, 16-byte stores. Vectors past the row's end are
//   predicated off, so any hidden size divisible by the vector width works. float32 parameters of
//   a 16-bit input are two 16-byte loads per vector of x. A misaligned view (any pointer not
//   16-byte aligned) takes the same kernel with element loads and stores: the same elements per
//   thread and the same sums, so the same bits as an aligned copy.
// Fallback (float64, hidden sizes off the vector width, rows too long for registers): one warp
//   per row, scalar loads, x read twice (stats, then output; the second read mostly hits L1/L2).
//   Same formulas, double accumulation for float64.
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

// The weight or bias values for one 16-byte vector of x: one 16-byte load when P is T, two when
// T is 16-bit and P float32 (autocast-style parameters).
template <typename P, int kN>
struct alignas(16) ParamVec {
  P v[kN];
};

// Vector `i` of `base` (vectors of V, elements of E): one vector access when the call's pointers
// are all 16-byte aligned, element accesses otherwise. Which elements a thread holds, and so the
// order of every sum, does not depend on the alignment: a misaligned view gets the bits of an
// aligned copy (add_rms_norm on a view equals aten::add + rms_norm on the fresh sum).
template <typename V, typename E>
__device__ __forceinline__ V loadVector(const E* base, int64_t i, bool aligned) {
  constexpr int kN = static_cast<int>(sizeof(V) / sizeof(E));
  if (aligned) return reinterpret_cast<const V*>(base)[i];
  V out;
#pragma unroll
  for (int k = 0; k < kN; ++k) out.v[k] = base[i * kN + k];
  return out;
}

template <typename V, typename E>
__device__ __forceinline__ void storeVector(E* base, int64_t i, const V& v, bool aligned) {
  constexpr int kN = static_cast<int>(sizeof(V) / sizeof(E));
  if (aligned) {
    reinterpret_cast<V*>(base)[i] = v;
    return;
  }
#pragma unroll
  for (int k = 0; k < kN; ++k) base[i * kN + k] = v.v[k];
}

// kAdd (add_rms_norm): the row is x + residual, rounded, written to `sum` as it is loaded; the
// statistics and the output then see exactly what the unfused kernel would read back.
// P: the parameters' type, T or (16-bit T) float32.
template <typename T, typename P, int kTpr, int kItems, bool kLayer, bool kAdd>
__global__ void __launch_bounds__(kBlockThreads)
    normRegisterRowKernel(const T* __restrict__ x, const P* __restrict__ weight,
                          const P* __restrict__ bias, T* __restrict__ y, int64_t rows, int cols,
                          float eps, const T* __restrict__ residual, T* __restrict__ sum,
                          bool aligned) {
  using V = Vec16<T>;
  constexpr int kVec = V::kElements;
  using W = ParamVec<P, kVec>;
  constexpr int kRowsPerBlock = kBlockThreads / kTpr;
  constexpr int kWarpsPerRow = kTpr > 32 ? kTpr / 32 : 1;
  __shared__ float partials[kRowsPerBlock * kWarpsPerRow];

  const int lane = threadIdx.x % kTpr;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kTpr;
  // Threads of a row past the end stay to the end: the multi-warp reduction has block barriers.
  const bool rowValid = row < rows;
  const int vectorsPerRow = cols / kVec;
  const int64_t rowStart = (rowValid ? row : 0) * static_cast<int64_t>(cols);

  float v[kItems][kVec];
#pragma unroll
  for (int i = 0; i < kItems; ++i) {
    const int idx = i * kTpr + lane;
    if (rowValid && idx < vectorsPerRow) {
      const V raw = loadVector<V>(x + rowStart, idx, aligned);
      if constexpr (kAdd) {
        const V res = loadVector<V>(residual + rowStart, idx, aligned);
        V s;
#pragma unroll
        for (int k = 0; k < kVec; ++k) {
          s.v[k] = Convert<T>::store(Convert<T>::load(raw.v[k]) + Convert<T>::load(res.v[k]));
          v[i][k] = Convert<T>::load(s.v[k]);
        }
        storeVector(sum + rowStart, idx, s, aligned);
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

#pragma unroll
  for (int i = 0; i < kItems; ++i) {
    const int idx = i * kTpr + lane;
    if (idx >= vectorsPerRow) continue;
    W w, b;
    if (weight) w = loadVector<W>(weight, idx, aligned);
    if (bias) b = loadVector<W>(bias, idx, aligned);
    V out;
#pragma unroll
    for (int k = 0; k < kVec; ++k) {
      float t = (kLayer ? v[i][k] - mean : v[i][k]) * scale;
      if (weight && bias) {
        t = fmaf(t, Convert<P>::load(w.v[k]), Convert<P>::load(b.v[k]));
      } else if (weight) {
        t *= Convert<P>::load(w.v[k]);
      } else if (bias) {
        t += Convert<P>::load(b.v[k]);
      }
      out.v[k] = Convert<T>::store(t);
    }
    storeVector(y + rowStart, idx, out, aligned);
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
  template <typename T, typename P, int kTpr, bool kLayer, bool kAdd>
  static void launch(const NormCudaPlan& plan, const NormCudaCall& c, cudaStream_t stream) {
    ((plan.itemsPerThread == kItems
          ? (normRegisterRowKernel<T, P, kTpr, kItems, kLayer, kAdd>
             <<<plan.blocks, kBlockThreads, 0, stream>>>(
                 static_cast<const T*>(c.x), static_cast<const P*>(c.weight),
                 static_cast<const P*>(c.bias), static_cast<T*>(c.y), c.rows,
                 static_cast<int>(c.cols), static_cast<float>(c.eps),
                 static_cast<const T*>(c.residual), static_cast<T*>(c.sum), plan.alignedVectors),
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

template <typename T, typename P, bool kLayer, bool kAdd>
void launchRegisterRowKind(const NormCudaPlan& plan, const NormCudaCall& c, cudaStream_t stream) {
  switch (plan.threadsPerRow) {
    case 8: return LadderFor<8>::type::launch<T, P, 8, kLayer, kAdd>(plan, c, stream);
    case 16: return LadderFor<16>::type::launch<T, P, 16, kLayer, kAdd>(plan, c, stream);
    case 32: return LadderFor<32>::type::launch<T, P, 32, kLayer, kAdd>(plan, c, stream);
    case 64: return LadderFor<64>::type::launch<T, P, 64, kLayer, kAdd>(plan, c, stream);
    default: return LadderFor<128>::type::launch<T, P, 128, kLayer, kAdd>(plan, c, stream);
  }
}

template <typename T, typename P>
void launchRegisterRow(const NormCudaPlan& plan, const NormCudaCall& c, cudaStream_t stream) {
  if (c.layerNorm) return launchRegisterRowKind<T, P, true, false>(plan, c, stream);
  if (c.residual != nullptr) return launchRegisterRowKind<T, P, false, true>(plan, c, stream);
  launchRegisterRowKind<T, P, false, false>(plan, c, stream);
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
      if constexpr (!std::is_same_v<T, float>) {
        if (c.paramType == NormDtype::kFloat32) return launchRegisterRow<T, float>(plan, c, stream);
      }
      return launchRegisterRow<T, T>(plan, c, stream);
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
  const bool reduced = c.dataType == NormDtype::kBFloat16 || c.dataType == NormDtype::kFloat16;
  const bool paramsFit =
      c.paramType == c.dataType || (reduced && c.paramType == NormDtype::kFloat32);
  // Alignment picks the load instructions only, never the path: the path fixes the order of the
  // row sums, and add_rms_norm on a misaligned view must give aten::add + rms_norm's bits.
  const bool vectorizable = c.dataType != NormDtype::kFloat64 && paramsFit && c.cols % vec == 0;
  plan.alignedVectors = aligned16(c.x) && aligned16(c.y) && aligned16(c.weight) &&
                        aligned16(c.bias) && aligned16(c.residual) && aligned16(c.sum);
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
