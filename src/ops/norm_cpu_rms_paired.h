// The unfused RMS rows two at a time (rmsRowsPaired), for norm_cpu_rows.h: it includes this file
// after its chunk helpers (ChunkOf, loadChunk, ChunkParams, finishChunkWith, RmsRowStats), in the
// same translation unit, so everything here has the same internal linkage and ISA.
#pragma once

#ifndef FOLDNORM_NORM_CPU_ENTRY
#error "norm_cpu_rms_paired.h is part of norm_cpu_rows.h; include that"
#endif

namespace foldnorm::ops {
namespace {

// Asks for the lines of chunk j of `row` in L2 (__builtin_prefetch locality 1: prefetcht2 on x86),
// once per 64-byte line (a 32-byte chunk every other time): rmsRowsPaired prefetches a pair ahead.
template <typename T>
inline void prefetchChunk(const T* row, int64_t j) {
  constexpr int64_t kBytes = ChunkOf<T>::kSize * static_cast<int64_t>(sizeof(T));
  const char* p = reinterpret_cast<const char*>(row + j);
  if constexpr (kBytes >= 64) {
    for (int64_t k = 0; k < kBytes; k += 64) __builtin_prefetch(p + k, 0, 1);
  } else {
    static_assert(64 % kBytes == 0);
    if ((j * static_cast<int64_t>(sizeof(T))) % 64 == 0) __builtin_prefetch(p, 0, 1);
  }
}

// Rows from this many bytes on take rmsRowsPaired (the unfused op only). 16-bit rows: 1 KiB
// (hidden >= 512): with 8-float vectors a 16-bit row is bound by the core (two conversions per
// element, the bfloat16 rounding in integer steps), and the pair's second chain and shared
// parameter loads lifted hidden 768 from 0.51-0.53 to 0.57-0.61 of a copy's bandwidth (bfloat16;
// float16 0.79-0.80 -> 0.88-0.92) and bfloat16 1024 from 0.91-0.97 to 1.08-1.09 in a same-run A/B
// (docs/kernels.md); the AVX-512 kernel, one instruction per conversion, keeps 4 KiB. float32/
// float64 rows: 32 KiB (float32 hidden 8192), where a row, the next one, the weight and the bias
// (128 KiB) are far past L1; at 4096 float32 the one-row pipeline already moved a copy's
// bandwidth.
template <typename T>
constexpr int64_t pairMinRowBytes() {
  return sizeof(T) == 2 ? 1024 : 32768;
}

// The unfused RMS rows of one task two at a time, the AVX-512 kernel's rmsRowsPaired schedule: the
// output pass of rows i, i + 1 runs in one loop with the statistics of rows i + 2, i + 3, which
// prefetches rows i + 4, i + 5 into L2, and each chunk of weight and bias is loaded (converted)
// once for both output rows. Each row's operations and their order are rmsRowsPipelined's
// (RmsRowStats, then writeRmsChunk's steps): the same bits.
template <typename T, typename P, bool kWeight, bool kBias, bool kStream>
void rmsRowsPaired(const NormCpuCall& call, int64_t begin, int64_t end) {
  using C = ChunkOf<T>;
  using Acc = typename C::Acc;
  using V = typename C::AccVec;
  using Params = ChunkParams<T, P, kWeight, kBias>;
  if (begin >= end) return;
  const T* x = static_cast<const T*>(call.x);
  const P* w = static_cast<const P*>(call.weight);
  const P* b = static_cast<const P*>(call.bias);
  T* y = static_cast<T*>(call.y);
  const int64_t n = call.cols;
  const int64_t vectorEnd = n - n % C::kSize;
  const Acc count = static_cast<Acc>(n);
  const Acc eps = static_cast<Acc>(call.eps);
  // Slot k % 4 holds the rstd of the task's row k: a pair written, a pair summed.
  Acc rstd[4];
  auto slot = [&](int64_t row) { return (row - begin) & 3; };
  auto statsOf = [&](int64_t row) { return RmsRowStats<T, false>{x + row * n, nullptr, nullptr}; };
  // A row to prefetch, or the task's last row when none is left (its lines are in cache then).
  auto ahead = [&](int64_t row) { return x + std::min(row, end - 1) * n; };
  // One chunk of a row's output with the chunk's parameters loaded: writeRmsChunk's steps.
  auto writeChunk = [&](const T* src, const Params& p, T* yr, int64_t j, const V& scale) {
    V lo, hi;
    loadChunk<Acc>(src + j, lo, hi);
    finishChunkWith<T, P, kWeight, kBias, kStream>(lo * scale, hi * scale, p, yr, j);
  };
  // Rows `row` and (if `pair`) row + 1 summed alone, prefetching the two after them: the task's
  // first pair and its last rows.
  auto sumRows = [&](int64_t row, bool pair) {
    auto s0 = statsOf(row), s1 = statsOf(pair ? row + 1 : row);
    const T* p0 = ahead(row + 2);
    const T* p1 = ahead(row + 3);
    for (int64_t j = 0; j < vectorEnd; j += C::kSize) {
      prefetchChunk(p0, j);
      prefetchChunk(p1, j);
      s0.chunk(j);
      if (pair) s1.chunk(j);
    }
    rstd[slot(row)] = s0.rstd(vectorEnd, n, count, eps);
    if (pair) rstd[slot(row + 1)] = s1.rstd(vectorEnd, n, count, eps);
  };
  auto writeTail = [&](int64_t row) {
    const T* src = x + row * n;
    T* yr = y + row * n;
    const Acc scale = rstd[slot(row)];
    for (int64_t j = vectorEnd; j < n; ++j) {
      Acc v = static_cast<Acc>(src[j]);
      v *= scale;
      if constexpr (kWeight) v *= static_cast<Acc>(w[j]);
      if constexpr (kBias) v += static_cast<Acc>(b[j]);
      yr[j] = static_cast<T>(v);
    }
  };
  auto writeAlone = [&](int64_t row) {
    const V scale(rstd[slot(row)]);
    for (int64_t j = 0; j < vectorEnd; j += C::kSize) writeChunk(x + row * n, Params(w, b, j), y + row * n, j, scale);
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
      const V scale0(rstd[slot(row)]), scale1(rstd[slot(row + 1)]);
      auto next0 = statsOf(row + 2), next1 = statsOf(row + 3);
      const T* p0 = ahead(row + 4);
      const T* p1 = ahead(row + 5);
      for (int64_t j = 0; j < vectorEnd; j += C::kSize) {
        prefetchChunk(p0, j);
        prefetchChunk(p1, j);
        next0.chunk(j);
        next1.chunk(j);
        const Params p(w, b, j);
        writeChunk(src0, p, y0, j, scale0);
        writeChunk(src1, p, y1, j, scale1);
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
}

}  // namespace
}  // namespace foldnorm::ops
