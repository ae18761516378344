// What the AVX2 and AVX-512 K-quant kernels share (256-bit AVX2+FMA code; both files are
// compiled with it): the walk over a row's blocks for a group of tokens, the token group's
// activation pointers, and the three ways a block's integer sums meet the block scale, the
// activation scale and the mins. A kernel set provides K::block<TN>, which forms a block's
// integer sums its own way and calls one of the folds. Everything is `static` (see
// simd_avx2.hpp).
#pragma once
#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#include "kernels/cpu/matmul_impl.hpp"
#include "kernels/cpu/simd_avx2.hpp"

namespace tandem::kernels::cpu::mm::qk {

// Every loop over a group's tokens is unrolled (`#pragma GCC unroll 8`): left to itself GCC
// stopped fully unrolling them at 5 tokens and kept the accumulators and token pointers on
// the stack (45 stack references in the 5-token AVX-512 kernel, 5 once unrolled). Qwen2.5
// 1.5B, three alternating runs: T(5) 46.0-52.1 ms against 51.3-53.7 ms, T(4) 39.8-43.2
// against 41.5-46.3.

// The activations of a token group, at the current block.
template <int TN>
struct Toks {
  const int8_t* q[TN];
  const float* d[TN];
  const int16_t* bs[TN];
  const float* fs[TN];
  const int16_t* bs32[TN];
  const int32_t* off8[TN];
};

// Adding one block's integer sums to the float accumulators, three ways.
// acc += d*dx * (isum - offset term): Q3_K and Q6_K store codes + offset, and the offset
// shares the block scale, so it is subtracted in integers (mins = offset * group scale).
template <int TN>
static inline void fold_offset(const __m256i* isum, __m256i mins, float d, const Toks<TN>& x, int64_t b,
                               __m256* acc) {
  const __m256 vd = _mm256_set1_ps(d);
  #pragma GCC unroll 8
  for (int t = 0; t < TN; ++t) {
    const __m256i ms = _mm256_madd_epi16(mins, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.bs[t] + 16 * b)));
    const __m256 f = _mm256_cvtepi32_ps(_mm256_sub_epi32(isum[t], ms));
    acc[t] = _mm256_fmadd_ps(f, _mm256_mul_ps(vd, _mm256_broadcast_ss(x.d[t] + b)), acc[t]);
  }
}
// acc += d*dx*isum - sum_j (dmin*min_j) * (dx*xsum_j): Q4_K/Q5_K, whose 8 mins per block
// meet the activations' float group sums (fsum) in one FMA.
template <int TN>
static inline void fold_fmin(const __m256i* isum, __m256 fmins, float d, const Toks<TN>& x, int64_t b,
                             __m256* acc) {
  const __m256 vd = _mm256_set1_ps(d);
  #pragma GCC unroll 8
  for (int t = 0; t < TN; ++t) {
    const __m256 a = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[t]), _mm256_mul_ps(vd, _mm256_broadcast_ss(x.d[t] + b)),
                                     acc[t]);
    acc[t] = _mm256_fnmadd_ps(fmins, _mm256_loadu_ps(x.fs[t] + 8 * b), a);
  }
}
// acc += dx * (d*isum - dmin*msum) with msum from 16 int16 mins: Q2_K.
template <int TN>
static inline void fold_imin(const __m256i* isum, __m256i mins, float d, float dmin, const Toks<TN>& x,
                             int64_t b, __m256* acc) {
  const __m256 vd = _mm256_set1_ps(d), vm = _mm256_set1_ps(dmin);
  #pragma GCC unroll 8
  for (int t = 0; t < TN; ++t) {
    const __m256i ms = _mm256_madd_epi16(mins, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.bs[t] + 16 * b)));
    const __m256 f = _mm256_fmsub_ps(_mm256_cvtepi32_ps(isum[t]), vd, _mm256_mul_ps(_mm256_cvtepi32_ps(ms), vm));
    acc[t] = _mm256_fmadd_ps(f, _mm256_broadcast_ss(x.d[t] + b), acc[t]);
  }
}

// One row against a group of TN tokens: y[t][r] for the group. Weights are prefetched
// avx2::kPrefetchBytes (2 KB, tuned on Zen 3) plus `Ahead` bytes ahead.
// The activations of tokens t0..t0+TN-1.
template <int TN>
static inline Toks<TN> toks_at(const Args& a, int64_t t0) {
  const ActLayout& l = a.xl;
  Toks<TN> x;
  #pragma GCC unroll 8
  for (int t = 0; t < TN; ++t) {
    const uint8_t* row = a.xq + static_cast<size_t>(t0 + t) * l.row_bytes;
    x.q[t] = act_q(row);
    x.d[t] = act_d(row, l);
    x.bs[t] = act_bsums(row, l);
    x.fs[t] = act_fsum(row, l);
    x.bs32[t] = act_bsums32(row, l);
    x.off8[t] = act_off8(row, l);
  }
  return x;
}

template <class K, int TN, int Ahead = 0>
static void row_group(const Args& a, const uint8_t* wr, int64_t r, int64_t t0) {
  const ActLayout& l = a.xl;
  const Toks<TN> x = toks_at<TN>(a, t0);
  __m256 acc[TN];
  #pragma GCC unroll 8
  for (int t = 0; t < TN; ++t) acc[t] = _mm256_setzero_ps();
  for (int64_t bi = 0; bi < l.nb; ++bi) {
    avx2::prefetch_ahead(wr + bi * K::kBytes + Ahead, K::kBytes);
    K::template block<TN>(wr + bi * K::kBytes, x, bi, acc);
  }
  #pragma GCC unroll 8
  for (int t = 0; t < TN; ++t) a.y[(t0 + t) * a.ldy + r] = avx2::hsum(acc[t]);
}

}  // namespace tandem::kernels::cpu::mm::qk
