// The CPU row kernels of foldnorm::rms_norm / foldnorm::layer_norm, as templates. Included by
// exactly one translation unit per instruction set (norm_cpu_portable.cpp, norm_cpu_avx2.cpp),
// each of which first defines CPU_CAPABILITY (so at::vec::Vectorized takes that ISA's
// implementation) and FOLDNORM_NORM_CPU_ENTRY (the name of its entry point). Everything here has
// internal linkage, so the two copies never meet at link time.
//
// Per row (one thread per row, rows split over at::parallel_for):
//   RMS:   pass 1 reads x once for sum(x^2); pass 2 re-reads x (now in L1/L2) and writes
//          y = (x * rstd) * w + b, with w/b fused.
//   Layer: pass 1 sum(x) -> mean; pass 2 sum((x - mean)^2) from cache (two-pass, no cancellation);
//          pass 3 y = ((x - mean) * rstd) * w + b. (ATen's CPU form x * rstd + (-mean * rstd) loses
//          the exact zero of x == mean: with N = 1 it returns rounding noise times 1/sqrt(eps).)
// So both read x from memory once and write y once; the LayerNorm does one more pass over a row
// that is already in cache. Accumulation in float (double for double), in vectors of two
// independent accumulators, remainder in scalar code; no allocations.
#pragma once

#ifndef CPU_CAPABILITY
#error "define CPU_CAPABILITY (DEFAULT or AVX2) before including norm_cpu_rows.h"
#endif
#ifndef FOLDNORM_NORM_CPU_ENTRY
#error "define FOLDNORM_NORM_CPU_ENTRY before including norm_cpu_rows.h"
#endif

#include <ATen/Config.h>
#include <ATen/Parallel.h>

// With LibTorch's OpenMP backend, at::parallel_for is a `#pragma omp parallel` template: in a TU
// built without -fopenmp it silently runs every row on one thread (src/CMakeLists.txt).
#if AT_PARALLEL_OPENMP && !defined(_OPENMP) && !defined(FOLDNORM_SERIAL_CPU_KERNELS)
#error "compile the norm kernel TUs with OpenMP (-fopenmp), or at::parallel_for runs serially"
#endif
#include <ATen/cpu/vec/functional.h>
#include <ATen/cpu/vec/vec.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "norm_cpu_kernels.h"

namespace foldnorm::ops {
namespace {

using at::vec::Vectorized;

// Enough elements per parallel task that the fork/join cost is small next to the memory traffic
// (ATen's internal GRAIN_SIZE).
constexpr int64_t kMinElementsPerTask = 32768;

template <typename T>
struct AccumulateOf {
  using type = float;
};
template <>
struct AccumulateOf<double> {
  using type = double;
};

// A chunk is two accumulator vectors' worth of elements: for 16-bit types exactly one
// Vectorized<T>, which converts to two Vectorized<float>.
template <typename T>
struct ChunkOf {
  using Acc = typename AccumulateOf<T>::type;
  using AccVec = Vectorized<Acc>;
  static constexpr int64_t kWidth = AccVec::size();
  static constexpr int64_t kSize = 2 * kWidth;
};

static_assert(Vectorized<c10::BFloat16>::size() == 2 * Vectorized<float>::size());
static_assert(Vectorized<c10::Half>::size() == 2 * Vectorized<float>::size());

// Loads ChunkOf<.>::kSize elements of S from p into two accumulator vectors.
template <typename Acc, typename S>
inline void loadChunk(const S* p, Vectorized<Acc>& lo, Vectorized<Acc>& hi) {
  if constexpr (std::is_same_v<S, Acc>) {
    lo = Vectorized<Acc>::loadu(p);
    hi = Vectorized<Acc>::loadu(p + Vectorized<Acc>::size());
  } else {
    static_assert(std::is_same_v<Acc, float>, "16-bit types accumulate in float");
    auto halves = at::vec::convert_to_float<S>(Vectorized<S>::loadu(p));
    lo = std::get<0>(halves);
    hi = std::get<1>(halves);
  }
}

template <typename Acc, typename S>
inline void storeChunk(S* p, const Vectorized<Acc>& lo, const Vectorized<Acc>& hi) {
  if constexpr (std::is_same_v<S, Acc>) {
    lo.store(p);
    hi.store(p + Vectorized<Acc>::size());
  } else {
    // One rounding from the float result to the 16-bit output (round to nearest even).
    at::vec::convert_from_float<S>(lo, hi).store(p);
  }
}

#if defined(CPU_CAPABILITY_AVX2)
constexpr bool kHasStreamingStores = true;

// Non-temporal stores: the output goes to memory without first reading its cache lines (a plain
// store reads each line before writing it, so x -> y would move 3 bytes per 2 that a memcpy,
// which streams too, moves). p must be 32-byte aligned.
template <typename Acc, typename S>
inline void streamChunk(S* p, const Vectorized<Acc>& lo, const Vectorized<Acc>& hi) {
  if constexpr (std::is_same_v<S, float>) {
    _mm256_stream_ps(p, lo);
    _mm256_stream_ps(p + Vectorized<float>::size(), hi);
  } else if constexpr (std::is_same_v<S, double>) {
    _mm256_stream_pd(p, lo);
    _mm256_stream_pd(p + Vectorized<double>::size(), hi);
  } else {
    const __m256i packed = at::vec::convert_from_float<S>(lo, hi);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(p), packed);
  }
}

inline void streamingStoresDone() { _mm_sfence(); }
#else
constexpr bool kHasStreamingStores = false;

template <typename Acc, typename S>
inline void streamChunk(S* p, const Vectorized<Acc>& lo, const Vectorized<Acc>& hi) {
  storeChunk<Acc>(p, lo, hi);
}

inline void streamingStoresDone() {}
#endif

// Outputs at least this large cannot stay in this class of CPU's caches (a 32 MiB L3 shared by
// all cores), so they are written with streaming stores; smaller ones are left in cache for the
// next op to read.
constexpr int64_t kStreamingStoreMinBytes = int64_t{16} << 20;

// s = x + r as aten::add computes it (in the accumulation type, alpha = 1), rounded to T: the
// fused add_rms_norm normalizes exactly the tensor that aten::add would have written.
template <typename Acc, typename T>
inline void loadSumChunk(const T* x, const T* r, Vectorized<Acc>& lo, Vectorized<Acc>& hi) {
  Vectorized<Acc> rLo, rHi;
  loadChunk<Acc>(x, lo, hi);
  loadChunk<Acc>(r, rLo, rHi);
  lo = lo + rLo;
  hi = hi + rHi;
  if constexpr (!std::is_same_v<T, Acc>) {
    auto rounded = at::vec::convert_to_float<T>(at::vec::convert_from_float<T>(lo, hi));
    lo = std::get<0>(rounded);
    hi = std::get<1>(rounded);
  }
}

template <typename Acc, typename T>
inline Acc roundedSum(T x, T r) {
  return static_cast<Acc>(static_cast<T>(static_cast<Acc>(x) + static_cast<Acc>(r)));
}

template <typename Acc>
inline Acc horizontalSum(const Vectorized<Acc>& v) {
  return at::vec::vec_reduce_all<Acc>([](Vectorized<Acc>& a, Vectorized<Acc>& b) { return a + b; },
                                      v);
}

template <typename T>
typename ChunkOf<T>::Acc sumRow(const T* x, int64_t n) {
  using C = ChunkOf<T>;
  using Acc = typename C::Acc;
  typename C::AccVec a0(Acc(0)), a1(Acc(0)), lo, hi;
  int64_t j = 0;
  for (; j + C::kSize <= n; j += C::kSize) {
    loadChunk<Acc>(x + j, lo, hi);
    a0 = a0 + lo;
    a1 = a1 + hi;
  }
  Acc s = horizontalSum<Acc>(a0 + a1);
  for (; j < n; ++j) s += static_cast<Acc>(x[j]);
  return s;
}

// sum((x - center)^2); center = 0 gives RMSNorm's sum of squares. With kAdd the row is
// x + r (rounded to T), in the same order, so the fused op's statistics have the unfused bits.
template <typename T, bool kCentered, bool kAdd = false>
typename ChunkOf<T>::Acc sumSquaredDeviations(const T* x, int64_t n,
                                             typename ChunkOf<T>::Acc center,
                                             const T* r = nullptr) {
  using C = ChunkOf<T>;
  using Acc = typename C::Acc;
  typename C::AccVec a0(Acc(0)), a1(Acc(0)), lo, hi;
  const typename C::AccVec c(center);
  int64_t j = 0;
  for (; j + C::kSize <= n; j += C::kSize) {
    if constexpr (kAdd) {
      loadSumChunk<Acc>(x + j, r + j, lo, hi);
    } else {
      loadChunk<Acc>(x + j, lo, hi);
    }
    if constexpr (kCentered) {
      lo = lo - c;
      hi = hi - c;
    }
    a0 = at::vec::fmadd(lo, lo, a0);
    a1 = at::vec::fmadd(hi, hi, a1);
  }
  Acc s = horizontalSum<Acc>(a0 + a1);
  for (; j < n; ++j) {
    Acc v = kAdd ? roundedSum<Acc>(x[j], r[j]) : static_cast<Acc>(x[j]);
    if constexpr (kCentered) v -= center;
    s += v * v;
  }
  return s;
}

// y = ((x [- center]) * scale) [* w] [+ b]; the center (the mean) only for LayerNorm.
// With kAdd, x + r (rounded) takes x's place and is written to s: recomputed from x and r, which
// are in cache after the statistics pass, rather than read back, so s can be streamed too.
template <typename T, typename P, bool kCentered, bool kWeight, bool kBias, bool kStream,
          bool kAdd = false>
void writeRow(const T* x, const P* w, const P* b, T* y, int64_t n, typename ChunkOf<T>::Acc scale,
              typename ChunkOf<T>::Acc center, const T* r = nullptr, T* s = nullptr) {
  using C = ChunkOf<T>;
  using Acc = typename C::Acc;
  using V = typename C::AccVec;
  const V vScale(scale), vCenter(center);
  V lo, hi, wLo, wHi, bLo, bHi;
  int64_t j = 0;
  for (; j + C::kSize <= n; j += C::kSize) {
    if constexpr (kAdd) {
      loadSumChunk<Acc>(x + j, r + j, lo, hi);
      if constexpr (kStream) {
        streamChunk<Acc>(s + j, lo, hi);
      } else {
        storeChunk<Acc>(s + j, lo, hi);
      }
    } else {
      loadChunk<Acc>(x + j, lo, hi);
    }
    if constexpr (kCentered) {
      lo = lo - vCenter;
      hi = hi - vCenter;
    }
    lo = lo * vScale;
    hi = hi * vScale;
    if constexpr (kBias) loadChunk<Acc>(b + j, bLo, bHi);
    if constexpr (kWeight) {
      loadChunk<Acc>(w + j, wLo, wHi);
      if constexpr (kBias) {
        lo = at::vec::fmadd(lo, wLo, bLo);
        hi = at::vec::fmadd(hi, wHi, bHi);
      } else {
        lo = lo * wLo;
        hi = hi * wHi;
      }
    } else if constexpr (kBias) {
      lo = lo + bLo;
      hi = hi + bHi;
    }
    if constexpr (kStream) {
      streamChunk<Acc>(y + j, lo, hi);
    } else {
      storeChunk<Acc>(y + j, lo, hi);
    }
  }
  for (; j < n; ++j) {
    Acc v = static_cast<Acc>(x[j]);
    if constexpr (kAdd) {
      v = roundedSum<Acc>(x[j], r[j]);
      s[j] = static_cast<T>(v);
    }
    if constexpr (kCentered) v -= center;
    v *= scale;
    if constexpr (kWeight) v *= static_cast<Acc>(w[j]);
    if constexpr (kBias) v += static_cast<Acc>(b[j]);
    y[j] = static_cast<T>(v);
  }
}

template <typename T, typename P, bool kLayer, bool kWeight, bool kBias, bool kStream, bool kAdd>
void normRowsWith(const NormCpuCall& call) {
  using Acc = typename ChunkOf<T>::Acc;
  static_assert(!(kLayer && kAdd), "the fused residual add is RMS only");
  const T* x = static_cast<const T*>(call.x);
  const T* res = static_cast<const T*>(call.residual);
  T* sum = static_cast<T*>(call.sum);
  const P* w = static_cast<const P*>(call.weight);
  const P* b = static_cast<const P*>(call.bias);
  T* y = static_cast<T*>(call.y);
  const int64_t n = call.cols;
  const Acc count = static_cast<Acc>(n);
  // aten::layer_norm converts eps to the accumulation type too.
  const Acc eps = static_cast<Acc>(call.eps);
  const int64_t grain = std::max<int64_t>(1, kMinElementsPerTask / std::max<int64_t>(n, 1));
  at::parallel_for(0, call.rows, grain, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const T* xr = x + r * n;
      T* yr = y + r * n;
      if constexpr (kLayer) {
        const Acc mean = sumRow(xr, n) / count;
        const Acc var = sumSquaredDeviations<T, true>(xr, n, mean) / count;
        const Acc rstd = Acc(1) / std::sqrt(var + eps);
        writeRow<T, P, true, kWeight, kBias, kStream>(xr, w, b, yr, n, rstd, mean);
      } else if constexpr (kAdd) {
        const T* rr = res + r * n;
        const Acc meanSquare = sumSquaredDeviations<T, false, true>(xr, n, Acc(0), rr) / count;
        const Acc rstd = Acc(1) / std::sqrt(meanSquare + eps);
        writeRow<T, P, false, kWeight, kBias, kStream, true>(xr, w, b, yr, n, rstd, Acc(0), rr,
                                                              sum + r * n);
      } else {
        const Acc meanSquare = sumSquaredDeviations<T, false>(xr, n, Acc(0)) / count;
        const Acc rstd = Acc(1) / std::sqrt(meanSquare + eps);
        writeRow<T, P, false, kWeight, kBias, kStream>(xr, w, b, yr, n, rstd, Acc(0));
      }
    }
    if constexpr (kStream) streamingStoresDone();
  });
}

inline bool aligned32(const void* p) { return reinterpret_cast<uintptr_t>(p) % 32 == 0; }

template <typename T, typename P, bool kLayer, bool kWeight, bool kBias, bool kAdd>
void normRows(const NormCpuCall& call) {
  // Streaming needs every chunk 32-byte aligned: aligned outputs and rows of whole 32 bytes.
  const int64_t rowBytes = call.cols * static_cast<int64_t>(sizeof(T));
  const bool stream = kHasStreamingStores && call.rows * rowBytes >= kStreamingStoreMinBytes &&
                      rowBytes % 32 == 0 && aligned32(call.y) && (!kAdd || aligned32(call.sum));
  if (stream) return normRowsWith<T, P, kLayer, kWeight, kBias, true, kAdd>(call);
  normRowsWith<T, P, kLayer, kWeight, kBias, false, kAdd>(call);
}

template <typename T, typename P, bool kLayer, bool kAdd>
void normRowsByAffine(const NormCpuCall& call) {
  const bool w = call.weight != nullptr, b = call.bias != nullptr;
  if (w && b) return normRows<T, P, kLayer, true, true, kAdd>(call);
  if (w) return normRows<T, P, kLayer, true, false, kAdd>(call);
  if (b) return normRows<T, P, kLayer, false, true, kAdd>(call);
  normRows<T, P, kLayer, false, false, kAdd>(call);
}

template <typename T, typename P>
void normRowsByKind(const NormCpuCall& call) {
  if (call.kind == NormKind::kLayer) return normRowsByAffine<T, P, true, false>(call);
  if (call.residual != nullptr) return normRowsByAffine<T, P, false, true>(call);
  normRowsByAffine<T, P, false, false>(call);
}

// 16-bit inputs take parameters of their own type or float32 (checked by the caller).
template <typename T>
void normRowsReduced(const NormCpuCall& call) {
  if (call.paramType == c10::ScalarType::Float) return normRowsByKind<T, float>(call);
  normRowsByKind<T, T>(call);
}

}  // namespace

void FOLDNORM_NORM_CPU_ENTRY(const NormCpuCall& call) {
  switch (call.dataType) {
    case c10::ScalarType::Float:
      return normRowsByKind<float, float>(call);
    case c10::ScalarType::Double:
      return normRowsByKind<double, double>(call);
    case c10::ScalarType::BFloat16:
      return normRowsReduced<c10::BFloat16>(call);
    case c10::ScalarType::Half:
      return normRowsReduced<c10::Half>(call);
    default:
      TORCH_CHECK(false, opName(call.kind), ": no CPU kernel for dtype ", call.dataType);
  }
}

}  // namespace foldnorm::ops
