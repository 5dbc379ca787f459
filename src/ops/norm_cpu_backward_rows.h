// The CPU backward kernels of foldnorm::rms_norm / foldnorm::layer_norm, as templates. Included
// after norm_cpu_rows.h by the same per-ISA translation units (its chunk loads and reductions are
// reused), with FOLDNORM_NORM_BACKWARD_CPU_ENTRY naming the entry point.
//
// With xhat = (x [- mean]) * rstd, y = xhat * w + b and gw = dy * w (dy without a weight):
//   RMS:   dx = rstd * (gw - xhat * mean(gw * xhat))
//   Layer: dx = rstd * (gw - mean(gw) - xhat * mean(gw * xhat))
//   dw = sum over rows of dy * xhat,  db = sum over rows of dy.
// Per row: the statistics again (the forward keeps none), one pass for the two means, one pass
// writing dx and adding the row's dy * xhat and dy into its block's partial dw/db rows. Rows are
// grouped in fixed blocks (not per thread), so the partial sums, added by the caller in block
// order, give the same bits for any thread count. All in float (double for double).
#pragma once

#ifndef FOLDNORM_NORM_BACKWARD_CPU_ENTRY
#error "define FOLDNORM_NORM_BACKWARD_CPU_ENTRY before including norm_cpu_backward_rows.h"
#endif

#include "norm_cpu_rows.h"

namespace foldnorm::ops {
namespace {

template <typename T, typename P, bool kLayer, bool kWeight>
void backwardRow(const NormBackwardCpuCall& call, int64_t r, typename ChunkOf<T>::Acc* dwPartial,
                 typename ChunkOf<T>::Acc* dbPartial) {
  using C = ChunkOf<T>;
  using Acc = typename C::Acc;
  using V = typename C::AccVec;
  const int64_t n = call.cols;
  const T* x = static_cast<const T*>(call.x) + r * n;
  const T* g = static_cast<const T*>(call.gradOut) + r * n;
  const P* w = static_cast<const P*>(call.weight);
  T* dx = call.gradInput ? static_cast<T*>(call.gradInput) + r * n : nullptr;
  const Acc count = static_cast<Acc>(n);
  const Acc eps = static_cast<Acc>(call.eps);

  Acc mean = 0, rstd;
  if constexpr (kLayer) {
    mean = sumRow(x, n) / count;
    rstd = Acc(1) / std::sqrt(sumSquaredDeviations<T, true>(x, n, mean) / count + eps);
  } else {
    rstd = Acc(1) / std::sqrt(sumSquaredDeviations<T, false>(x, n, Acc(0)) / count + eps);
  }
  const V vMean(mean), vRstd(rstd);

  // sum(gw * (x - mean)) and sum(gw).
  V dot0(Acc(0)), dot1(Acc(0)), sg0(Acc(0)), sg1(Acc(0));
  V xLo, xHi, gLo, gHi, wLo, wHi;
  int64_t j = 0;
  for (; j + C::kSize <= n; j += C::kSize) {
    loadChunk<Acc>(x + j, xLo, xHi);
    loadChunk<Acc>(g + j, gLo, gHi);
    if constexpr (kWeight) {
      loadChunk<Acc>(w + j, wLo, wHi);
      gLo = gLo * wLo;
      gHi = gHi * wHi;
    }
    if constexpr (kLayer) {
      xLo = xLo - vMean;
      xHi = xHi - vMean;
      sg0 = sg0 + gLo;
      sg1 = sg1 + gHi;
    }
    dot0 = at::vec::fmadd(gLo, xLo, dot0);
    dot1 = at::vec::fmadd(gHi, xHi, dot1);
  }
  Acc dot = horizontalSum<Acc>(dot0 + dot1);
  Acc sumGw = horizontalSum<Acc>(sg0 + sg1);
  for (int64_t k = j; k < n; ++k) {
    Acc gw = static_cast<Acc>(g[k]);
    if constexpr (kWeight) gw *= static_cast<Acc>(w[k]);
    dot += gw * (static_cast<Acc>(x[k]) - mean);
    sumGw += gw;
  }
  const Acc meanGwXhat = dot * rstd / count;
  const Acc meanGw = kLayer ? sumGw / count : Acc(0);
  const V vMeanGwXhat(meanGwXhat), vMeanGw(meanGw);

  j = 0;
  for (; j + C::kSize <= n; j += C::kSize) {
    loadChunk<Acc>(x + j, xLo, xHi);
    loadChunk<Acc>(g + j, gLo, gHi);
    const V hatLo = (xLo - vMean) * vRstd, hatHi = (xHi - vMean) * vRstd;
    if (dwPartial) {
      V pLo, pHi;
      loadChunk<Acc>(dwPartial + j, pLo, pHi);
      storeChunk<Acc>(dwPartial + j, at::vec::fmadd(gLo, hatLo, pLo), at::vec::fmadd(gHi, hatHi, pHi));
    }
    if (dbPartial) {
      V pLo, pHi;
      loadChunk<Acc>(dbPartial + j, pLo, pHi);
      storeChunk<Acc>(dbPartial + j, pLo + gLo, pHi + gHi);
    }
    if (!dx) continue;
    if constexpr (kWeight) {
      loadChunk<Acc>(w + j, wLo, wHi);
      gLo = gLo * wLo;
      gHi = gHi * wHi;
    }
    const V dLo = (gLo - vMeanGw - hatLo * vMeanGwXhat) * vRstd;
    const V dHi = (gHi - vMeanGw - hatHi * vMeanGwXhat) * vRstd;
    storeChunk<Acc>(dx + j, dLo, dHi);
  }
  for (; j < n; ++j) {
    const Acc gv = static_cast<Acc>(g[j]);
    const Acc hat = (static_cast<Acc>(x[j]) - mean) * rstd;
    if (dwPartial) dwPartial[j] = gv * hat + dwPartial[j];
    if (dbPartial) dbPartial[j] += gv;
    if (!dx) continue;
    Acc gw = gv;
    if constexpr (kWeight) gw *= static_cast<Acc>(w[j]);
    dx[j] = static_cast<T>((gw - meanGw - hat * meanGwXhat) * rstd);
  }
}

template <typename T, typename P, bool kLayer, bool kWeight>
void backwardRows(const NormBackwardCpuCall& call) {
  using Acc = typename ChunkOf<T>::Acc;
  auto* dw = static_cast<Acc*>(call.gradWeightPartial);
  auto* db = static_cast<Acc*>(call.gradBiasPartial);
  const int64_t perBlock = std::max<int64_t>(1, call.rowsPerBlock);
  const int64_t blocks = (call.rows + perBlock - 1) / perBlock;
  const int64_t n = call.cols;
  at::parallel_for(0, blocks, 1, [&](int64_t begin, int64_t end) {
    for (int64_t blk = begin; blk < end; ++blk) {
      Acc* dwRow = dw ? dw + blk * n : nullptr;
      Acc* dbRow = db ? db + blk * n : nullptr;
      const int64_t last = std::min(call.rows, (blk + 1) * perBlock);
      for (int64_t r = blk * perBlock; r < last; ++r) {
        backwardRow<T, P, kLayer, kWeight>(call, r, dwRow, dbRow);
      }
    }
  });
}

template <typename T, typename P>
void backwardRowsByKind(const NormBackwardCpuCall& call) {
  const bool w = call.weight != nullptr;
  if (call.kind == NormKind::kLayer) {
    if (w) return backwardRows<T, P, true, true>(call);
    return backwardRows<T, P, true, false>(call);
  }
  if (w) return backwardRows<T, P, false, true>(call);
  backwardRows<T, P, false, false>(call);
}

template <typename T>
void backwardRowsReduced(const NormBackwardCpuCall& call) {
  if (call.paramType == c10::ScalarType::Float) return backwardRowsByKind<T, float>(call);
  backwardRowsByKind<T, T>(call);
}

}  // namespace

void FOLDNORM_NORM_BACKWARD_CPU_ENTRY(const NormBackwardCpuCall& call) {
  switch (call.dataType) {
    case c10::ScalarType::Float:
      return backwardRowsByKind<float, float>(call);
    case c10::ScalarType::Double:
      return backwardRowsByKind<double, double>(call);
    case c10::ScalarType::BFloat16:
      return backwardRowsReduced<c10::BFloat16>(call);
    case c10::ScalarType::Half:
      return backwardRowsReduced<c10::Half>(call);
    default:
      TORCH_CHECK(false, opName(call.kind), "_backward: no CPU kernel for dtype ", call.dataType);
  }
}

}  // namespace foldnorm::ops
