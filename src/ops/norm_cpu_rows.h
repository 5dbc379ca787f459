// The CPU row kernels of foldnorm::rms_norm / foldnorm::layer_norm, as templates. Included by
// exactly one translation unit per instruction set (norm_cpu_portable.cpp, norm_cpu_avx2.cpp),
// each of which first defines CPU_CAPABILITY (so at::vec::Vectorized takes that ISA's
// implementation) and FOLDNORM_NORM_CPU_ENTRY (the name of its entry point). Everything here has
// internal linkage, so the two copies never meet at link time.
//
// Per row (one thread per row, rows split over at::parallel_for):
//   RMS:   pass 1 reads x once for sum(x^2); pass 2 re-reads x (now in L1/L2) and writes
//          y = (x * rstd) * w + b, with w/b fused; pass 2 of row i runs in one loop with pass 1
//          of row i + 1 (rmsRowsPipelined); the unfused op's wide rows go two at a time
//          (rmsRowsPaired: pass 2 of rows i, i + 1 with pass 1 of i + 2, i + 3). The fused add: pass 1 adds and rounds x + r once,
//          keeping the sum in a per-thread row buffer that pass 2 reads and copies to `sum`.
//   Layer: pass 1 sum(x) -> mean; pass 2 sum((x - mean)^2) from cache (two-pass, no cancellation);
//          pass 3 y = ((x - mean) * rstd) * w + b. (ATen's CPU form x * rstd + (-mean * rstd) loses
//          the exact zero of x == mean: with N = 1 it returns rounding noise times 1/sqrt(eps).)
// So both read x from memory once and write y once; the LayerNorm does one more pass over a row
// that is already in cache. Accumulation in float (double for double), in vectors of two
// independent accumulators, remainder in scalar code; no allocation per call (the fused op's row
// buffer is per thread and kept).
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
#include <cstring>
#include <type_traits>
#include <vector>

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
#if defined(CPU_CAPABILITY_AVX2)
    // Each half widened straight from memory (vpmovzxwd + vpslld, or vcvtph2ps, with a 128-bit
    // memory operand): the exact values of ATen's convert_to_float, without its 256-bit load and
    // lane extract, shuffle-port work that bounds 16-bit rows on AVX2.
    const auto* half = reinterpret_cast<const __m128i*>(p);
    if constexpr (std::is_same_v<S, c10::BFloat16>) {
      lo = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(half)), 16));
      hi = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(half + 1)), 16));
    } else {
      static_assert(std::is_same_v<S, c10::Half>);
      lo = _mm256_cvtph_ps(_mm_loadu_si128(half));
      hi = _mm256_cvtph_ps(_mm_loadu_si128(half + 1));
    }
#else
    auto halves = at::vec::convert_to_float<S>(Vectorized<S>::loadu(p));
    lo = std::get<0>(halves);
    hi = std::get<1>(halves);
#endif
  }
}

// Two float vectors rounded to one vector of 16-bit S, with the bits of ATen's convert_from_float
// (its AVX2 bfloat16: round to nearest even by adding 0x7fff plus the kept lsb, NaN -> 0xffff). On AVX2 a
// bfloat16 chunk without NaN skips ATen's compare and blend per vector (one unordered compare of
// both vectors decides; a chunk with a NaN takes ATen's own conversion): fewer uops on the rows
// that bound 16-bit RMSNorm there.
template <typename S>
inline Vectorized<S> roundFromFloat(const Vectorized<float>& lo, const Vectorized<float>& hi) {
#if defined(CPU_CAPABILITY_AVX2)
  if constexpr (std::is_same_v<S, c10::BFloat16>) {
    const __m256 a = lo, b = hi;
    if (_mm256_movemask_ps(_mm256_cmp_ps(a, b, _CMP_UNORD_Q)) == 0) {
      const __m256i ones = _mm256_set1_epi32(1), bias = _mm256_set1_epi32(0x7fff);
      auto round = [&](__m256 v) {
        const __m256i bits = _mm256_castps_si256(v);
        const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(bits, 16), ones);
        return _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(lsb, bias), bits), 16);
      };
      return _mm256_permute4x64_epi64(_mm256_packus_epi32(round(a), round(b)), 0xd8);
    }
  }
#endif
  return at::vec::convert_from_float<S>(lo, hi);
}

template <typename Acc, typename S>
inline void storeChunk(S* p, const Vectorized<Acc>& lo, const Vectorized<Acc>& hi) {
  if constexpr (std::is_same_v<S, Acc>) {
    lo.store(p);
    hi.store(p + Vectorized<Acc>::size());
  } else {
    // One rounding from the float result to the 16-bit output (round to nearest even).
    roundFromFloat<S>(lo, hi).store(p);
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
    const __m256i packed = roundFromFloat<S>(lo, hi);
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
    auto rounded = at::vec::convert_to_float<T>(roundFromFloat<T>(lo, hi));
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

// sum((x - center)^2); center = 0 gives RMSNorm's sum of squares (the backward's statistics;
// the forward's RMS rows use RmsRowStats below, the same operations a chunk at a time).
template <typename T, bool kCentered>
typename ChunkOf<T>::Acc sumSquaredDeviations(const T* x, int64_t n,
                                             typename ChunkOf<T>::Acc center) {
  using C = ChunkOf<T>;
  using Acc = typename C::Acc;
  typename C::AccVec a0(Acc(0)), a1(Acc(0)), lo, hi;
  const typename C::AccVec c(center);
  int64_t j = 0;
  for (; j + C::kSize <= n; j += C::kSize) {
    loadChunk<Acc>(x + j, lo, hi);
    if constexpr (kCentered) {
      lo = lo - c;
      hi = hi - c;
    }
    a0 = at::vec::fmadd(lo, lo, a0);
    a1 = at::vec::fmadd(hi, hi, a1);
  }
  Acc s = horizontalSum<Acc>(a0 + a1);
  for (; j < n; ++j) {
    Acc v = static_cast<Acc>(x[j]);
    if constexpr (kCentered) v -= center;
    s += v * v;
  }
  return s;
}

// The weight and bias of chunk j as accumulator vectors: loaded (16-bit parameters converted)
// once per chunk, for one row or, in rmsRowsPaired, for the two rows of a pair.
template <typename T, typename P, bool kWeight, bool kBias>
struct ChunkParams {
  using Acc = typename ChunkOf<T>::Acc;
  Vectorized<Acc> wLo, wHi, bLo, bHi;
  inline ChunkParams(const P* w, const P* b, int64_t j) {
    if constexpr (kBias) loadChunk<Acc>(b + j, bLo, bHi);
    if constexpr (kWeight) loadChunk<Acc>(w + j, wLo, wHi);
  }
};

// The output step of both norms' chunks: (lo, hi) [* w] [+ b] (one fma with both), then stored
// or streamed to y + j.
template <typename T, typename P, bool kWeight, bool kBias, bool kStream>
inline void finishChunkWith(Vectorized<typename ChunkOf<T>::Acc> lo, Vectorized<typename ChunkOf<T>::Acc> hi,
                            const ChunkParams<T, P, kWeight, kBias>& p, T* y, int64_t j) {
  using Acc = typename ChunkOf<T>::Acc;
  if constexpr (kWeight) {
    if constexpr (kBias) {
      lo = at::vec::fmadd(lo, p.wLo, p.bLo);
      hi = at::vec::fmadd(hi, p.wHi, p.bHi);
    } else {
      lo = lo * p.wLo;
      hi = hi * p.wHi;
    }
  } else if constexpr (kBias) {
    lo = lo + p.bLo;
    hi = hi + p.bHi;
  }
  if constexpr (kStream) {
    streamChunk<Acc>(y + j, lo, hi);
  } else {
    storeChunk<Acc>(y + j, lo, hi);
  }
}

template <typename T, typename P, bool kWeight, bool kBias, bool kStream>
inline void finishChunk(Vectorized<typename ChunkOf<T>::Acc> lo, Vectorized<typename ChunkOf<T>::Acc> hi,
                        const P* w, const P* b, T* y, int64_t j) {
  finishChunkWith<T, P, kWeight, kBias, kStream>(lo, hi, ChunkParams<T, P, kWeight, kBias>(w, b, j), y, j);
}

// y = ((x - center) * scale) [* w] [+ b]: LayerNorm's output pass (RMS rows: writeRmsChunk).
template <typename T, typename P, bool kCentered, bool kWeight, bool kBias, bool kStream>
void writeRow(const T* x, const P* w, const P* b, T* y, int64_t n, typename ChunkOf<T>::Acc scale,
              typename ChunkOf<T>::Acc center) {
  using C = ChunkOf<T>;
  using Acc = typename C::Acc;
  using V = typename C::AccVec;
  const V vScale(scale), vCenter(center);
  V lo, hi;
  int64_t j = 0;
  for (; j + C::kSize <= n; j += C::kSize) {
    loadChunk<Acc>(x + j, lo, hi);
    if constexpr (kCentered) {
      lo = lo - vCenter;
      hi = hi - vCenter;
    }
    lo = lo * vScale;
    hi = hi * vScale;
    finishChunk<T, P, kWeight, kBias, kStream>(lo, hi, w, b, y, j);
  }
  for (; j < n; ++j) {
    Acc v = static_cast<Acc>(x[j]);
    if constexpr (kCentered) v -= center;
    v *= scale;
    if constexpr (kWeight) v *= static_cast<Acc>(w[j]);
    if constexpr (kBias) v += static_cast<Acc>(b[j]);
    y[j] = static_cast<T>(v);
  }
}

// x + r rounded to T as loadSumChunk computes it, with the rounded chunk also stored to `buf`
// (16-bit: the packed patterns as they come out of the rounding, not rounded a second time).
template <typename Acc, typename T>
inline void loadSumChunkTo(const T* x, const T* r, T* buf, Vectorized<Acc>& lo, Vectorized<Acc>& hi) {
  if constexpr (std::is_same_v<T, Acc>) {
    loadSumChunk<Acc>(x, r, lo, hi);
    storeChunk<Acc>(buf, lo, hi);
  } else {
    Vectorized<Acc> rLo, rHi;
    loadChunk<Acc>(x, lo, hi);
    loadChunk<Acc>(r, rLo, rHi);
    const Vectorized<T> packed = roundFromFloat<T>(lo + rLo, hi + rHi);
    packed.store(buf);
    auto widened = at::vec::convert_to_float<T>(packed);
    lo = std::get<0>(widened);
    hi = std::get<1>(widened);
  }
}

// Copies one chunk's bytes as they are (the fused op's sum output from its row buffer).
template <typename T, bool kStream>
inline void copyChunkBytes(const T* src, T* dst) {
  constexpr int64_t kBytes = ChunkOf<T>::kSize * static_cast<int64_t>(sizeof(T));
#if defined(CPU_CAPABILITY_AVX2)
  if constexpr (kStream) {
    static_assert(kBytes % 32 == 0);
    const char* from = reinterpret_cast<const char*>(src);
    char* to = reinterpret_cast<char*>(dst);
    for (int64_t k = 0; k < kBytes; k += 32) {
      _mm256_stream_si256(reinterpret_cast<__m256i*>(to + k),
                          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(from + k)));
    }
    return;
  }
#endif
  std::memcpy(dst, src, kBytes);
}

// One RMS row's statistics, a chunk at a time, in sumSquaredDeviations' order (so the bits are the
// unpipelined kernel's). With kAdd the rounded x + r also goes to `buf`, for the output pass.
template <typename T, bool kAdd>
struct RmsRowStats {
  using C = ChunkOf<T>;
  using Acc = typename C::Acc;
  const T* x;
  const T* r;
  T* buf;
  typename C::AccVec a0{Acc(0)}, a1{Acc(0)};
  inline void chunk(int64_t j) {
    typename C::AccVec lo, hi;
    if constexpr (kAdd) {
      loadSumChunkTo<Acc>(x + j, r + j, buf + j, lo, hi);
    } else {
      loadChunk<Acc>(x + j, lo, hi);
    }
    a0 = at::vec::fmadd(lo, lo, a0);
    a1 = at::vec::fmadd(hi, hi, a1);
  }
  // The reduction and the scalar tail from `j` on; returns 1 / sqrt(mean + eps).
  inline Acc rstd(int64_t j, int64_t n, Acc count, Acc eps) {
    Acc s = horizontalSum<Acc>(a0 + a1);
    for (; j < n; ++j) {
      Acc v = static_cast<Acc>(x[j]);
      if constexpr (kAdd) {
        v = roundedSum<Acc>(x[j], r[j]);
        buf[j] = static_cast<T>(v);
      }
      s += v * v;
    }
    return Acc(1) / std::sqrt(s / count + eps);
  }
};

// One chunk of an RMS row's output from `src` (x, or for the fused op the rounded sum the
// statistics pass left in the row buffer, which is copied to the sum output `s` as it stands).
template <typename T, typename P, bool kWeight, bool kBias, bool kStream, bool kAdd>
inline void writeRmsChunk(const T* src, const P* w, const P* b, T* y, T* s, int64_t j,
                          const Vectorized<typename ChunkOf<T>::Acc>& scale) {
  using Acc = typename ChunkOf<T>::Acc;
  Vectorized<Acc> lo, hi;
  if constexpr (kAdd) copyChunkBytes<T, kStream>(src + j, s + j);
  loadChunk<Acc>(src + j, lo, hi);
  lo = lo * scale;
  hi = hi * scale;
  finishChunk<T, P, kWeight, kBias, kStream>(lo, hi, w, b, y, j);
}

// Two rows of T per thread for the fused op: the sum row being written and the next one, whose
// statistics fill it. Kept across calls (no allocation per call once grown). The second row starts
// 576 bytes (9 cache lines) past the first's end: with rows of a whole number of 4 KiB, a store
// into one row and the load at the same position of the other, issued together in each step,
// would otherwise share their low 12 address bits (4K aliasing: the load waits) and their L1 set.
template <typename T>
int64_t bufferRowStride(int64_t n) {
  return n + 576 / static_cast<int64_t>(sizeof(T));
}
template <typename T>
T* sumRowsBuffer(int64_t n) {
  thread_local std::vector<T> buffer;
  const auto size = static_cast<std::size_t>(2 * bufferRowStride<T>(n));
  if (buffer.size() < size) buffer.resize(size);
  return buffer.data();
}

// RMS rows (and the fused add) of one task, software-pipelined as in norm_cpu_avx512.cpp: the
// output pass of row i runs in one loop with the statistics pass of row i + 1, so the statistics'
// FMA chain (whose order the bits fix) hides behind the output pass's independent work and row
// i + 1's loads from memory overlap row i's arithmetic. Each row's operations and their order are
// those of sumSquaredDeviations + writeRow, so the bits are unchanged. The fused op adds and rounds
// each element once, in the statistics pass; the output pass reads the rounded sum back from the
// per-thread row buffer (in L1/L2) instead of re-adding x and r: with AVX2 a 16-bit rounding
// costs far more than the arithmetic, and doing it twice made the fused op slower than the pair.
template <typename T, typename P, bool kWeight, bool kBias, bool kStream, bool kAdd>
void rmsRowsPipelined(const NormCpuCall& call, int64_t begin, int64_t end) {
  using C = ChunkOf<T>;
  using Acc = typename C::Acc;
  if (begin >= end) return;
  const T* x = static_cast<const T*>(call.x);
  const T* res = static_cast<const T*>(call.residual);
  T* sum = static_cast<T*>(call.sum);
  const P* w = static_cast<const P*>(call.weight);
  const P* b = static_cast<const P*>(call.bias);
  T* y = static_cast<T*>(call.y);
  const int64_t n = call.cols;
  const int64_t vectorEnd = n - n % C::kSize;
  const Acc count = static_cast<Acc>(n);
  const Acc eps = static_cast<Acc>(call.eps);
  T* buffers = kAdd ? sumRowsBuffer<T>(n) : nullptr;
  auto bufferOf = [&](int64_t row) {
    return kAdd ? buffers + ((row - begin) & 1) * bufferRowStride<T>(n) : nullptr;
  };
  auto statsOf = [&](int64_t row) {
    return RmsRowStats<T, kAdd>{x + row * n, kAdd ? res + row * n : nullptr, bufferOf(row)};
  };
  auto first = statsOf(begin);
  for (int64_t j = 0; j < vectorEnd; j += C::kSize) first.chunk(j);
  Acc rstd = first.rstd(vectorEnd, n, count, eps);
  for (int64_t row = begin; row < end; ++row) {
    const T* src = kAdd ? bufferOf(row) : x + row * n;
    T* sr = kAdd ? sum + row * n : nullptr;
    T* yr = y + row * n;
    const typename C::AccVec scale(rstd);
    const bool hasNext = row + 1 < end;
    auto next = statsOf(hasNext ? row + 1 : row);
    if (hasNext) {
      for (int64_t j = 0; j < vectorEnd; j += C::kSize) {
        next.chunk(j);
        writeRmsChunk<T, P, kWeight, kBias, kStream, kAdd>(src, w, b, yr, sr, j, scale);
      }
    } else {
      for (int64_t j = 0; j < vectorEnd; j += C::kSize)
        writeRmsChunk<T, P, kWeight, kBias, kStream, kAdd>(src, w, b, yr, sr, j, scale);
    }
    for (int64_t j = vectorEnd; j < n; ++j) {
      if constexpr (kAdd) sr[j] = src[j];
      Acc v = static_cast<Acc>(src[j]);
      v *= rstd;
      if constexpr (kWeight) v *= static_cast<Acc>(w[j]);
      if constexpr (kBias) v += static_cast<Acc>(b[j]);
      yr[j] = static_cast<T>(v);
    }
    if (hasNext) rstd = next.rstd(vectorEnd, n, count, eps);
  }
}

}  // namespace
}  // namespace foldnorm::ops

// rmsRowsPaired (the unfused op's wide rows, two at a time), on the helpers above.
#include "norm_cpu_rms_paired.h"

namespace foldnorm::ops {
namespace {

template <typename T, typename P, bool kLayer, bool kWeight, bool kBias, bool kStream, bool kAdd>
void normRowsWith(const NormCpuCall& call) {
  using Acc = typename ChunkOf<T>::Acc;
  static_assert(!(kLayer && kAdd), "the fused residual add is RMS only");
  const T* x = static_cast<const T*>(call.x);
  const P* w = static_cast<const P*>(call.weight);
  const P* b = static_cast<const P*>(call.bias);
  T* y = static_cast<T*>(call.y);
  const int64_t n = call.cols;
  const Acc count = static_cast<Acc>(n);
  // aten::layer_norm converts eps to the accumulation type too.
  const Acc eps = static_cast<Acc>(call.eps);
  const int64_t grain = std::max<int64_t>(1, kMinElementsPerTask / std::max<int64_t>(n, 1));
  at::parallel_for(0, call.rows, grain, [&](int64_t begin, int64_t end) {
    if constexpr (kLayer) {
      for (int64_t r = begin; r < end; ++r) {
        const T* xr = x + r * n;
        T* yr = y + r * n;
        const Acc mean = sumRow(xr, n) / count;
        const Acc var = sumSquaredDeviations<T, true>(xr, n, mean) / count;
        const Acc rstd = Acc(1) / std::sqrt(var + eps);
        writeRow<T, P, true, kWeight, kBias, kStream>(xr, w, b, yr, n, rstd, mean);
      }
    } else if (kAdd || n * static_cast<int64_t>(sizeof(T)) < pairMinRowBytes<T>()) {
      rmsRowsPipelined<T, P, kWeight, kBias, kStream, kAdd>(call, begin, end);
    } else {
      rmsRowsPaired<T, P, kWeight, kBias, kStream>(call, begin, end);
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
