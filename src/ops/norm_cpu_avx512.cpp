// The 16-bit RMS rows (bfloat16/float16 input, float32 weight/bias: foldnorm::rms_norm and
// add_rms_norm) with AVX-512 (F, BW, VL, DQ), bit for bit the AVX2 kernel's results.
//
// Why: a 16-bit row is bounded by its conversions, not by memory (docs/kernels.md): with AVX2 a
// chunk of 16 elements costs two 128-bit extracts, two widenings and two shifts to load, and
// about 16 integer operations plus a pack and a lane permute to round back; the arithmetic is 4
// instructions. One 512-bit register holds the whole chunk, so each step is one instruction
// (vpmovzxwd, vpslld, vpmovdw, vcvtph2ps/vcvtps2ph).
//
// Rows are software-pipelined (rmsRows below): the statistics of the next row run in the loop
// that writes this one. The unfused op on rows of 4 KiB or more goes two rows at a time and
// prefetches the pair after next (rmsRowsPaired below).
//
// Same bits as norm_cpu_rows.h's AVX2 instantiation, by construction:
//   - a chunk is the same 16 elements; the AVX2 kernel's two 8-float accumulators (elements 0-7
//     and 8-15 of every chunk) are the low and high halves of one 512-bit accumulator, updated by
//     the same FMA; they are added and reduced in ATen's AVX2 vec_reduce_all order
//     ((a0 + a4) + (a2 + a6)) + ((a1 + a5) + (a3 + a7));
//   - every other step is element-wise and the same operation (x * rstd, then fma(., w, b),
//     . * w or . + b), rounded to 16 bits as ATen's AVX2 convert_from_float does (bfloat16: round
//     to nearest even by the integer bias trick, NaN -> 0xffff; float16: vcvtps2ph, nearest);
//   - the scalar tail is the same C++ (this TU is compiled with -ffp-contract=off too).
//   - bfloat16 rounding by vcvtneps2bf16 where the CPU has AVX512_BF16, for chunks without NaN or
//     subnormal lanes (where that instruction and ATen's rounding agree), the integer trick else.
// Everything else (float32/float64, LayerNorm, 16-bit parameters on few rows) is the AVX2 kernel.
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__AVX512DQ__) && \
    defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
// GCC 12's AVX-512 intrinsics build their "undefined" pass-through operand from a variable
// initialised with itself (`__m512 __Y = __Y;` in _mm512_undefined_ps and its kin), and
// -Wmaybe-uninitialized then reports `__Y` at every inlined use, about a thousand times in this
// file (GCC bug 105593, fixed in GCC 13). The value is never read: the intrinsics pass an all-ones
// mask. The warning is turned off for the intrinsic headers only (it is reported at their lines),
// not for this file's own code. c10's headers come inside too: they may include <immintrin.h>
// first.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <ATen/Parallel.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>
#include <immintrin.h>
#pragma GCC diagnostic pop

#if AT_PARALLEL_OPENMP && !defined(_OPENMP) && !defined(FOLDNORM_SERIAL_CPU_KERNELS)
#error "compile the norm kernel TUs with OpenMP (-fopenmp), or at::parallel_for runs serially"
#endif

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "norm_cpu_kernels.h"

namespace foldnorm::ops {
namespace {

// norm_cpu_rows.h's constants: the same tasks and the same streaming decision.
constexpr int64_t kMinElementsPerTask = 32768;
constexpr int64_t kStreamingStoreMinBytes = int64_t{16} << 20;
constexpr int64_t kChunk = 16;

// 16 patterns of T (bfloat16: the top half of a float; float16: IEEE half) widened to float.
template <typename T>
inline __m512 widen16(__m256i bits) {
  if constexpr (std::is_same_v<T, c10::BFloat16>) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(bits), 16));
  } else {
    return _mm512_cvtph_ps(bits);
  }
}

inline __m256i loadBits(const void* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }

// Asks for the cache line of row[j] in L2 (prefetcht2), once per 64 bytes: a chunk is 32 bytes,
// so every other chunk (rmsRowsPaired).
template <typename T>
inline void prefetchLine(const T* row, int64_t j) {
  if ((j & 31) == 0) _mm_prefetch(reinterpret_cast<const char*>(row + j), _MM_HINT_T2);
}

template <typename T>
inline __m512 load16(const T* p) {
  return widen16<T>(loadBits(p));
}

#if defined(__AVX512BF16__)
// AVX512_BF16 (Zen 4, Cooper Lake, Sapphire Rapids) is not part of the AVX-512 set this file is
// picked for, so its one-instruction rounding is used only where the CPU has it.
const bool kCpuHasAvx512Bf16 = __builtin_cpu_supports("avx512bf16");
// vfpclassps classes: QNaN (0x01), SNaN (0x80), subnormal (0x20).
constexpr int kNanOrSubnormal = 0x01 | 0x80 | 0x20;
#endif

template <typename T>
inline __m256i round16(__m512 v) {
  if constexpr (std::is_same_v<T, c10::BFloat16>) {
#if defined(__AVX512BF16__)
    // vcvtneps2bf16 is the same round to nearest even in one instruction, except that it treats
    // subnormal inputs as zero and keeps a NaN's payload; a chunk with such a lane (rare: a NaN or
    // a float below 2^-126) takes the integer path below, so the bits stay ATen's AVX2 ones.
    if (kCpuHasAvx512Bf16 && _mm512_fpclass_ps_mask(v, kNanOrSubnormal) == 0) {
      return reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(v));
    }
#endif
    const __m512i x = _mm512_castps_si512(v);
    __m512i t = _mm512_and_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(1));
    t = _mm512_add_epi32(_mm512_add_epi32(t, _mm512_set1_epi32(0x7fff)), x);
    t = _mm512_srli_epi32(t, 16);
    const __mmask16 ordered = _mm512_cmp_ps_mask(v, v, _CMP_ORD_Q);
    t = _mm512_mask_blend_epi32(ordered, _mm512_set1_epi32(0xffff), t);
    return _mm512_cvtepi32_epi16(t);  // every lane is <= 0xffff: the truncation is exact
  } else {
    return _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  }
}

template <bool kStream>
inline void storeBits(void* p, __m256i bits) {
  if constexpr (kStream) {
    _mm256_stream_si256(reinterpret_cast<__m256i*>(p), bits);
  } else {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), bits);
  }
}

template <typename T, bool kStream>
inline void store16(T* p, __m512 v) {
  storeBits<kStream>(p, round16<T>(v));
}

// x + r in float, rounded to T: the patterns of the tensor aten::add would have written.
template <typename T>
inline __m256i sumBits16(const T* x, const T* r) {
  return round16<T>(_mm512_add_ps(load16(x), load16(r)));
}

// ATen's AVX2 vec_reduce_all<float> with +, on a0 + a1.
inline float reduceLikeAvx2(__m512 acc) {
  __m256 v = _mm256_add_ps(_mm512_castps512_ps256(acc), _mm512_extractf32x8_ps(acc, 1));
  v = _mm256_add_ps(v, _mm256_permute2f128_ps(v, v, 0x1));
  v = _mm256_add_ps(v, _mm256_shuffle_ps(v, v, 0x4E));
  v = _mm256_add_ps(v, _mm256_shuffle_ps(v, v, 0xB1));
  return _mm256_cvtss_f32(v);
}

// One row's statistics: sum(x^2) (with kAdd of the rounded x + r) in the AVX2 kernel's order.
// With kAdd the rounded sum's 16-bit patterns also go to `buf` (a row of the task's buffer), so
// the output pass reads them instead of adding and rounding x + r a second time.
template <typename T, bool kAdd>
struct RowStats {
  const T* x;
  const T* r;
  T* buf;
  __m512 acc = _mm512_setzero_ps();
  inline void chunk(int64_t j) {
    __m512 v;
    if constexpr (kAdd) {
      const __m256i s = sumBits16(x + j, r + j);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(buf + j), s);
      v = widen16<T>(s);
    } else {
      v = load16(x + j);
    }
    acc = _mm512_fmadd_ps(v, v, acc);
  }
  // The reduction and the scalar tail from `j` on; returns 1 / sqrt(mean + eps).
  inline float rstd(int64_t j, int64_t n, float count, float eps) {
    float s = reduceLikeAvx2(acc);
    for (; j < n; ++j) {
      float v;
      if constexpr (kAdd) {
        buf[j] = static_cast<T>(static_cast<float>(x[j]) + static_cast<float>(r[j]));
        v = static_cast<float>(buf[j]);
      } else {
        v = static_cast<float>(x[j]);
      }
      s += v * v;
    }
    return 1.0f / std::sqrt(s / count + eps);
  }
};

// One chunk of the output pass from `src` (x, or with kAdd the sum row the statistics pass left in
// the buffer, which is also copied to the sum output `sr`).
template <typename T, bool kWeight, bool kBias, bool kStream, bool kAdd>
inline void writeChunk(const T* src, const float* w, const float* b, T* yr, T* sr, int64_t j,
                       __m512 scale) {
  const __m256i bits = loadBits(src + j);
  if constexpr (kAdd) storeBits<kStream>(sr + j, bits);
  __m512 v = _mm512_mul_ps(widen16<T>(bits), scale);
  if constexpr (kWeight && kBias) {
    v = _mm512_fmadd_ps(v, _mm512_loadu_ps(w + j), _mm512_loadu_ps(b + j));
  } else if constexpr (kWeight) {
    v = _mm512_mul_ps(v, _mm512_loadu_ps(w + j));
  } else if constexpr (kBias) {
    v = _mm512_add_ps(v, _mm512_loadu_ps(b + j));
  }
  store16<T, kStream>(yr + j, v);
}

// Two rows of 16-bit patterns per thread for the fused op: the sum row being written and the next
// one, whose statistics fill it. Kept across calls (no allocation per call once grown). The second
// row starts kBufferRowPad elements past the first's end: with rows of a whole number of 4 KiB
// (hidden 2048, 4096, 8192), a store into one row and the load at the same position of the other,
// issued together in each step, would otherwise share their low 12 address bits (4K aliasing: the
// load waits for the store) and their L1 set.
constexpr int64_t kBufferRowPad = 288;  // 576 bytes: 9 cache lines
inline int64_t bufferRowStride(int64_t n) { return n + kBufferRowPad; }
uint16_t* sumRowsBuffer(int64_t n) {
  thread_local std::vector<uint16_t> buffer;
  const auto size = static_cast<std::size_t>(2 * bufferRowStride(n));
  if (buffer.size() < size) buffer.resize(size);
  return buffer.data();
}

// The rows of one task, software-pipelined: the output pass of row i runs in one loop with the
// statistics pass of row i + 1. The statistics are one FMA chain (4 cycles per chunk whatever the
// width, and its order is fixed by the bits), the output pass has no chain; interleaved, the
// chain's latency hides behind the output work, and row i + 1's loads from memory overlap row i's
// arithmetic. Each row's own operations and their order are unchanged.
// The fused op (kAdd) adds and rounds each element once, in the statistics pass: the output pass
// reads the rounded sum from the per-thread buffer (L1/L2) rather than x and r again, and writes
// it to the sum output as it stands. Before, both passes added and rounded, which made the fused
// 16-bit op slower than aten::add + rms_norm: on this CPU the conversions, not memory, bound it.
template <typename T, bool kWeight, bool kBias, bool kStream, bool kAdd>
void rmsRows(const NormCpuCall& call) {
  const T* x = static_cast<const T*>(call.x);
  const T* res = static_cast<const T*>(call.residual);
  T* sum = static_cast<T*>(call.sum);
  const float* w = static_cast<const float*>(call.weight);
  const float* b = static_cast<const float*>(call.bias);
  T* y = static_cast<T*>(call.y);
  const int64_t n = call.cols;
  const int64_t vectorEnd = n - n % kChunk;
  const float count = static_cast<float>(n);
  const float eps = static_cast<float>(call.eps);
  const int64_t grain = std::max<int64_t>(1, kMinElementsPerTask / std::max<int64_t>(n, 1));
  static_assert(sizeof(T) == sizeof(uint16_t) && alignof(T) == alignof(uint16_t));
  at::parallel_for(0, call.rows, grain, [&](int64_t begin, int64_t end) {
    if (begin >= end) return;
    T* buffers = kAdd ? reinterpret_cast<T*>(sumRowsBuffer(n)) : nullptr;
    auto bufferOf = [&](int64_t row) {
      return kAdd ? buffers + ((row - begin) & 1) * bufferRowStride(n) : nullptr;
    };
    auto statsOf = [&](int64_t row) {
      return RowStats<T, kAdd>{x + row * n, kAdd ? res + row * n : nullptr, bufferOf(row)};
    };
    auto first = statsOf(begin);
    for (int64_t j = 0; j < vectorEnd; j += kChunk) first.chunk(j);
    float rstd = first.rstd(vectorEnd, n, count, eps);
    for (int64_t row = begin; row < end; ++row) {
      const T* src = kAdd ? bufferOf(row) : x + row * n;
      T* sr = kAdd ? sum + row * n : nullptr;
      T* yr = y + row * n;
      const __m512 scale = _mm512_set1_ps(rstd);
      const bool hasNext = row + 1 < end;
      auto next = statsOf(hasNext ? row + 1 : row);
      if (hasNext) {
        for (int64_t j = 0; j < vectorEnd; j += kChunk) {
          next.chunk(j);
          writeChunk<T, kWeight, kBias, kStream, kAdd>(src, w, b, yr, sr, j, scale);
        }
      } else {
        for (int64_t j = 0; j < vectorEnd; j += kChunk)
          writeChunk<T, kWeight, kBias, kStream, kAdd>(src, w, b, yr, sr, j, scale);
      }
      for (int64_t j = vectorEnd; j < n; ++j) {
        if constexpr (kAdd) sr[j] = src[j];
        float v = static_cast<float>(src[j]) * rstd;
        if constexpr (kWeight) v *= w[j];
        if constexpr (kBias) v += b[j];
        yr[j] = static_cast<T>(v);
      }
      if (hasNext) rstd = next.rstd(vectorEnd, n, count, eps);
    }
    if constexpr (kStream) _mm_sfence();
  });
}

// The weight and bias of chunk j, loaded once for the two rows of a pair (a store to y may alias
// them as far as the compiler knows, so each row's own load would be a second L1/L2 read).
template <bool kWeight, bool kBias>
struct ChunkParams {
  __m512 w, b;
  inline ChunkParams(const float* wp, const float* bp, int64_t j) {
    if constexpr (kWeight) w = _mm512_loadu_ps(wp + j);
    if constexpr (kBias) b = _mm512_loadu_ps(bp + j);
  }
};

// writeChunk of the unfused op with the chunk's parameters already loaded: the same operations.
template <typename T, bool kWeight, bool kBias, bool kStream>
inline void writeChunkWith(const T* src, const ChunkParams<kWeight, kBias>& p, T* yr, int64_t j, __m512 scale) {
  __m512 v = _mm512_mul_ps(load16(src + j), scale);
  if constexpr (kWeight && kBias) {
    v = _mm512_fmadd_ps(v, p.w, p.b);
  } else if constexpr (kWeight) {
    v = _mm512_mul_ps(v, p.w);
  } else if constexpr (kBias) {
    v = _mm512_add_ps(v, p.b);
  }
  store16<T, kStream>(yr + j, v);
}

// The unfused op's rows of 4 KiB or more (bfloat16/float16 hidden >= 2048), two at a time: the
// output pass of rows i, i + 1 runs in one loop with the statistics of rows i + 2, i + 3, which
// prefetches rows i + 4, i + 5 into L2. Why (issue 16, measured by kern16b one thing at a time):
// at hidden 4096/8192 the one-row pipeline (rmsRows) lost neither in the statistics chain nor in
// the conversions but in its output pass, once the row written, the row summed and the float32
// weight and bias (32-64 KiB) no longer fit the 32 KiB L1, and in memory latency the hardware
// prefetcher did not hide. A pair shares each chunk's weight and bias load, gives two independent
// FMA chains, and has the next rows' lines on their way a pair ahead. Each row's operations and
// their order are rmsRows' (RowStats, then writeChunk's steps): the same bits.
// Narrower rows and the fused op stay on rmsRows, unchanged: kern16b's pairs slowed the fused
// 16-bit op, and its narrow rows (written a pair, then summed a pair: no statistics hidden behind
// an output pass) lost at hidden 768 against the one-row pipeline.
template <typename T, bool kWeight, bool kBias, bool kStream>
void rmsRowsPaired(const NormCpuCall& call) {
  const T* x = static_cast<const T*>(call.x);
  const float* w = static_cast<const float*>(call.weight);
  const float* b = static_cast<const float*>(call.bias);
  T* y = static_cast<T*>(call.y);
  const int64_t n = call.cols;
  const int64_t vectorEnd = n - n % kChunk;
  const float count = static_cast<float>(n);
  const float eps = static_cast<float>(call.eps);
  const int64_t grain = std::max<int64_t>(1, kMinElementsPerTask / std::max<int64_t>(n, 1));
  using Params = ChunkParams<kWeight, kBias>;
  at::parallel_for(0, call.rows, grain, [&](int64_t begin, int64_t end) {
    if (begin >= end) return;
    // Slot k % 4 holds the rstd of the task's row k: a pair written, a pair summed.
    float rstd[4];
    auto slot = [&](int64_t row) { return (row - begin) & 3; };
    auto statsOf = [&](int64_t row) { return RowStats<T, false>{x + row * n, nullptr, nullptr}; };
    // A row to prefetch, or the task's last row when none is left (its lines are in cache then,
    // and the loops need no branch).
    auto ahead = [&](int64_t row) { return x + std::min(row, end - 1) * n; };
    // Rows `row` and (if `pair`) row + 1 summed alone, prefetching the two after them: the task's
    // first pair and its last rows.
    auto sumRows = [&](int64_t row, bool pair) {
      auto s0 = statsOf(row), s1 = statsOf(pair ? row + 1 : row);
      const T* p0 = ahead(row + 2);
      const T* p1 = ahead(row + 3);
      for (int64_t j = 0; j < vectorEnd; j += kChunk) {
        prefetchLine(p0, j);
        prefetchLine(p1, j);
        s0.chunk(j);
        if (pair) s1.chunk(j);
      }
      rstd[slot(row)] = s0.rstd(vectorEnd, n, count, eps);
      if (pair) rstd[slot(row + 1)] = s1.rstd(vectorEnd, n, count, eps);
    };
    auto writeTail = [&](int64_t row) {
      const T* src = x + row * n;
      T* yr = y + row * n;
      const float scale = rstd[slot(row)];
      for (int64_t j = vectorEnd; j < n; ++j) {
        float v = static_cast<float>(src[j]) * scale;
        if constexpr (kWeight) v *= w[j];
        if constexpr (kBias) v += b[j];
        yr[j] = static_cast<T>(v);
      }
    };
    auto writeAlone = [&](int64_t row) {
      const __m512 scale = _mm512_set1_ps(rstd[slot(row)]);
      for (int64_t j = 0; j < vectorEnd; j += kChunk) {
        writeChunkWith<T, kWeight, kBias, kStream>(x + row * n, Params(w, b, j), y + row * n, j, scale);
      }
      writeTail(row);
    };
    sumRows(begin, end - begin >= 2);
    for (int64_t row = begin; row < end; row += 2) {
      if (row + 4 <= end) {
        // Rows row, row + 1 written; row + 2, row + 3 summed; row + 4, row + 5 prefetched.
        const T* src0 = x + row * n;
        const T* src1 = src0 + n;
        T* y0 = y + row * n;
        T* y1 = y0 + n;
        const __m512 scale0 = _mm512_set1_ps(rstd[slot(row)]);
        const __m512 scale1 = _mm512_set1_ps(rstd[slot(row + 1)]);
        auto next0 = statsOf(row + 2), next1 = statsOf(row + 3);
        const T* p0 = ahead(row + 4);
        const T* p1 = ahead(row + 5);
        for (int64_t j = 0; j < vectorEnd; j += kChunk) {
          prefetchLine(p0, j);
          prefetchLine(p1, j);
          next0.chunk(j);
          next1.chunk(j);
          const Params p(w, b, j);
          writeChunkWith<T, kWeight, kBias, kStream>(src0, p, y0, j, scale0);
          writeChunkWith<T, kWeight, kBias, kStream>(src1, p, y1, j, scale1);
        }
        writeTail(row);
        writeTail(row + 1);
        rstd[slot(row + 2)] = next0.rstd(vectorEnd, n, count, eps);
        rstd[slot(row + 3)] = next1.rstd(vectorEnd, n, count, eps);
      } else {
        // The task's last one to three rows: written, then the rest summed, unpipelined.
        writeAlone(row);
        if (row + 1 < end) writeAlone(row + 1);
        if (row + 2 < end) sumRows(row + 2, row + 3 < end);
      }
    }
    if constexpr (kStream) _mm_sfence();
  });
}

// Rows from this many bytes on take rmsRowsPaired (unfused op only). bfloat16 from 1 KiB (hidden
// >= 512): its rounding is a classify, a branch and a convert per chunk, and at hidden 768 the
// pair's second chain lifted it from 0.78-0.88 to 0.92-0.96 of a copy's bandwidth (same-run A/B,
// five runs a side; 1024 went 1.41-1.47 -> 1.37-1.40, still well past the copy). float16 (one
// convert per chunk) from 4 KiB: pairs at 768 lost there (0.96-1.00 -> 0.88-0.92).
template <typename T>
constexpr int64_t kPairMinRowBytes = std::is_same_v<T, c10::BFloat16> ? 1024 : 4096;

inline bool aligned32(const void* p) { return reinterpret_cast<uintptr_t>(p) % 32 == 0; }

template <typename T, bool kWeight, bool kBias, bool kAdd>
void rmsRowsStreamOrNot(const NormCpuCall& call) {
  const int64_t rowBytes = call.cols * static_cast<int64_t>(sizeof(T));
  const bool stream = call.rows * rowBytes >= kStreamingStoreMinBytes && rowBytes % 32 == 0 &&
                      aligned32(call.y) && (!kAdd || aligned32(call.sum));
  if constexpr (!kAdd) {
    if (rowBytes >= kPairMinRowBytes<T>) {
      if (stream) return rmsRowsPaired<T, kWeight, kBias, true>(call);
      return rmsRowsPaired<T, kWeight, kBias, false>(call);
    }
  }
  if (stream) return rmsRows<T, kWeight, kBias, true, kAdd>(call);
  rmsRows<T, kWeight, kBias, false, kAdd>(call);
}

template <typename T, bool kAdd>
void rmsRowsByAffine(const NormCpuCall& call) {
  const bool w = call.weight != nullptr, b = call.bias != nullptr;
  if (w && b) return rmsRowsStreamOrNot<T, true, true, kAdd>(call);
  if (w) return rmsRowsStreamOrNot<T, true, false, kAdd>(call);
  if (b) return rmsRowsStreamOrNot<T, false, true, kAdd>(call);
  rmsRowsStreamOrNot<T, false, false, kAdd>(call);
}

template <typename T>
void rmsRowsOf(const NormCpuCall& call) {
  if (call.residual != nullptr) return rmsRowsByAffine<T, true>(call);
  rmsRowsByAffine<T, false>(call);
}

}  // namespace

void normCpuAvx512(const NormCpuCall& call) {
  const bool reduced = call.dataType == c10::ScalarType::BFloat16 || call.dataType == c10::ScalarType::Half;
  if (call.kind != NormKind::kRms || !reduced || call.paramType != c10::ScalarType::Float) return normCpuAvx2(call);
  if (call.dataType == c10::ScalarType::BFloat16) return rmsRowsOf<c10::BFloat16>(call);
  rmsRowsOf<c10::Half>(call);
}

}  // namespace foldnorm::ops
#else
#include <c10/util/Exception.h>

#include "norm_cpu_kernels.h"

namespace foldnorm::ops {
void normCpuAvx512(const NormCpuCall&) {
  TORCH_CHECK(false, "foldnorm ops: the AVX-512 kernels were not compiled for this target");
}
}  // namespace foldnorm::ops
#endif
