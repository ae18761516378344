// AVX-512 matmul kernels for float weights (F32, F16, BF16): the AVX2 kernels' arithmetic,
// bit for bit, on register tiles of up to 4 rows × 4 tokens.
//
// The AVX2 kernel keeps two 8-lane accumulators per token (even and odd 8-column chunks of
// each 16 columns); one 16-lane accumulator holds both, lane for lane, so the FMAs, the
// 8-column step before the tail, the scalar tail and the final sum are the same operations
// in the same order (-ffp-contract=off: nothing is fused that is not written fused). What
// changes is the reuse: four rows share each activation load and four tokens each converted
// weight vector, so prefill reads its activations from cache a quarter as often. The tile's
// shape never changes a result: each (row, token) is summed alone, in the same order.
#include "kernels/cpu/matmul_impl.hpp"
#include "kernels/cpu/simd_avx512.hpp"
#include "kernels/cpu/float_loads_avx2.hpp"

namespace tandem::kernels::cpu::mm::TANDEM_AVX512_NS {
namespace {

using namespace avx2;
using u8 = uint8_t;

// The AVX2 kernel's conversions, and sixteen at a time as two of its eight (SIMDe, which the
// tests build this file against, has no 512-bit F16 or BF16 conversion).
template <class Loads>
struct Wide : Loads {
  static inline __m512 load16(const u8* row, int64_t c) {
    return _mm512_insertf32x8(_mm512_castps256_ps512(Loads::load8(row, c)), Loads::load8(row, c + 8), 1);
  }
};
struct F32 : F32Loads {
  static inline __m512 load16(const u8* row, int64_t c) { return _mm512_loadu_ps(reinterpret_cast<const float*>(row) + c); }
};
using F16 = Wide<F16Loads>;
using BF16 = Wide<BF16Loads>;

// Rows r..r+RN-1 against tokens t0..t0+TN-1.
template <class L, int RN, int TN>
void tile(const Args& a, int64_t r, int64_t t0) {
  const u8* w[RN];
  const float* x[TN];
  __m512 acc[RN][TN];
  for (int i = 0; i < RN; ++i) w[i] = a.w + static_cast<size_t>(r + i) * a.w_stride;
  for (int t = 0; t < TN; ++t) x[t] = a.x + (t0 + t) * a.ldx;
  for (int i = 0; i < RN; ++i)
    for (int t = 0; t < TN; ++t) acc[i][t] = _mm512_setzero_ps();
  int64_t c = 0;
  for (; c + 16 <= a.C; c += 16) {
    __m512 wv[RN];
    for (int i = 0; i < RN; ++i) wv[i] = L::load16(w[i], c);
    for (int t = 0; t < TN; ++t) {
      const __m512 xv = _mm512_loadu_ps(x[t] + c);
      for (int i = 0; i < RN; ++i) acc[i][t] = _mm512_fmadd_ps(wv[i], xv, acc[i][t]);
    }
  }
  // The AVX2 kernel's even (a0) and odd (a1) accumulators are the two halves.
  __m256 a0[RN][TN], a1[RN][TN];
  for (int i = 0; i < RN; ++i)
    for (int t = 0; t < TN; ++t) {
      a0[i][t] = _mm512_castps512_ps256(acc[i][t]);
      a1[i][t] = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc[i][t]), 1));
    }
  if (c + 8 <= a.C) {
    for (int i = 0; i < RN; ++i) {
      const __m256 w0 = L::load8(w[i], c);
      for (int t = 0; t < TN; ++t) a0[i][t] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x[t] + c), a0[i][t]);
    }
    c += 8;
  }
  float tail[RN][TN] = {};
  for (; c < a.C; ++c)
    for (int i = 0; i < RN; ++i) {
      const float wc = L::load1(w[i], c);
      for (int t = 0; t < TN; ++t) tail[i][t] = __builtin_fmaf(wc, x[t][c], tail[i][t]);
    }
  for (int i = 0; i < RN; ++i)
    for (int t = 0; t < TN; ++t) a.y[(t0 + t) * a.ldy + r + i] = hsum(_mm256_add_ps(a0[i][t], a1[i][t])) + tail[i][t];
}

using TileFn = void (*)(const Args&, int64_t, int64_t);

template <class L, int RN>
constexpr TileFn kByTokens[4] = {tile<L, RN, 1>, tile<L, RN, 2>, tile<L, RN, 3>, tile<L, RN, 4>};

template <class L>
void rows(const Args& a, int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
  static constexpr const TileFn* kTiles[4] = {kByTokens<L, 1>, kByTokens<L, 2>, kByTokens<L, 3>, kByTokens<L, 4>};
  // One or two tokens (decode, a short verification) read each weight row once whatever the
  // tile: four weight streams at once then only cost, so rows go one at a time; from three
  // tokens on, the four-row tile's shared activation loads win.
  const int64_t step = t1 - t0 <= 2 ? 1 : 4;
  for (int64_t r = r0; r < r1; r += step) {
    const int rn = static_cast<int>(std::min<int64_t>(step, r1 - r));
    for (int64_t t = t0; t < t1; t += 4) kTiles[rn - 1][std::min<int64_t>(4, t1 - t) - 1](a, r, t);
  }
}

}  // namespace

RowsFn rows_float(DType t) {
  switch (t) {
    case DType::F32: return rows<F32>;
    case DType::F16: return rows<F16>;
    case DType::BF16: return rows<BF16>;
    default: return nullptr;
  }
}

}  // namespace tandem::kernels::cpu::mm::TANDEM_AVX512_NS
