// The AVX2/FMA/F16C attention span (see attention_impl.hpp).
//
// Positions are taken in tiles of 8: the tile's K and V rows are converted to f32 once
// (shared by every query head of the GQA group), the 8 scores of a head come from 8
// independent FMA chains reduced together, and the online-softmax rescale and exp run once
// per tile on a vector instead of once per position. The arithmetic of a span depends only
// on its inputs and range, never on the threads or the other tokens of the batch.
#include <immintrin.h>

#include "kernels/cpu/attention_impl.hpp"
#include "kernels/cpu/simd_avx2.hpp"

namespace tandem::kernels::cpu {
namespace {

using attn_detail::kMaxHeadDim;
constexpr int kTile = 8;

// Dot products of q with the 8 rows k[0..7] (hd floats each), as one vector of 8 scores.
static inline __m256 scores8(const float* q, const float (*k)[kMaxHeadDim], int hd) {
  __m256 s[kTile];
  for (int j = 0; j < kTile; ++j) s[j] = _mm256_setzero_ps();
  for (int i = 0; i < hd; i += 8) {
    const __m256 qv = _mm256_loadu_ps(q + i);
    for (int j = 0; j < kTile; ++j) s[j] = _mm256_fmadd_ps(qv, _mm256_load_ps(k[j] + i), s[j]);
  }
  // hadd tree: h01 = [s0 s1 s2 s3 | s0 s1 s2 s3] (low / high 128-bit partial sums).
  const __m256 h0 = _mm256_hadd_ps(s[0], s[1]), h1 = _mm256_hadd_ps(s[2], s[3]);
  const __m256 h2 = _mm256_hadd_ps(s[4], s[5]), h3 = _mm256_hadd_ps(s[6], s[7]);
  const __m256 h01 = _mm256_hadd_ps(h0, h1), h23 = _mm256_hadd_ps(h2, h3);
  return _mm256_add_ps(_mm256_permute2f128_ps(h01, h23, 0x20), _mm256_permute2f128_ps(h01, h23, 0x31));
}

}  // namespace

// Several query tokens of one sequence over the same cached positions from lo: each tile's
// K and V rows are read and converted once for all of them (a verification or prefill
// pass reads the context once, not once per token); attn_detail::walk_tiles keeps each
// token's arithmetic what it would be alone.
void attention_span_avx2_multi(const AttnArgs& a, const int64_t* ts, const int32_t* his, int n_tok, int kvh,
                               int32_t lo, AttnState* sts) {
  const int hd = a.head_dim, group = attn_group(a);
  if (hd % 8 != 0) {
    for (int m = 0; m < n_tok; ++m) attn_detail::span_generic(a, ts[m], kvh, lo, his[m], sts[m]);
    return;
  }
  alignas(32) float kt[kTile][kMaxHeadDim];
  alignas(32) float vt[kTile][kMaxHeadDim];
  alignas(32) float vz[kTile][kMaxHeadDim];
  const __m256 lane = _mm256_setr_ps(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256 neg_inf = _mm256_set1_ps(-INFINITY);
  // Inlined into the walk, its constants in registers (captured by value).
  auto tile = [&a, hd, group, lane, neg_inf](const float(*k)[kMaxHeadDim], const float(*v)[kMaxHeadDim], int n,
                                             const float* qh, const AttnState& st) __attribute__((always_inline)) {
    const __m256 valid = _mm256_cmp_ps(lane, _mm256_set1_ps(static_cast<float>(n)), _CMP_LT_OQ);
    for (int g = 0; g < group; ++g) {
      __m256 s = _mm256_mul_ps(scores8(qh + static_cast<int64_t>(g) * hd, k, hd), _mm256_set1_ps(a.scale));
      if (a.softcap > 0.0f) {
        alignas(32) float sv[kTile];
        _mm256_store_ps(sv, s);
        for (float& x : sv) x = a.softcap * std::tanh(x / a.softcap);
        s = _mm256_load_ps(sv);
      }
      s = _mm256_blendv_ps(neg_inf, s, valid);
      const float tmax = avx2::hmax(s);
      float* ag = st.acc + static_cast<size_t>(g) * hd;
      if (tmax > st.m[g]) {  // new running max: rescale what was accumulated so far
        if (st.m[g] != -INFINITY) {
          const float r = std::exp(st.m[g] - tmax);
          st.l[g] *= r;
          const __m256 rv = _mm256_set1_ps(r);
          for (int i = 0; i < hd; i += 8) _mm256_storeu_ps(ag + i, _mm256_mul_ps(_mm256_loadu_ps(ag + i), rv));
        }
        st.m[g] = tmax;
      }
      const __m256 p = _mm256_and_ps(avx2::exp8(_mm256_sub_ps(s, _mm256_set1_ps(st.m[g]))), valid);
      st.l[g] += avx2::hsum(p);
      // Weights broadcast once per tile (not per FMA: that would be a second load each).
      alignas(32) float pv[kTile];
      _mm256_store_ps(pv, p);
      __m256 pb[kTile];
      for (int j = 0; j < kTile; ++j) pb[j] = _mm256_set1_ps(pv[j]);
      for (int i = 0; i < hd; i += 8) {
        __m256 acc = _mm256_loadu_ps(ag + i);
        for (int j = 0; j < kTile; ++j) acc = _mm256_fmadd_ps(pb[j], _mm256_load_ps(v[j] + i), acc);
        _mm256_storeu_ps(ag + i, acc);
      }
    }
  };
  attn_detail::walk_tiles<kTile>(a, ts, his, n_tok, kvh, lo, sts, kt, vt, vz, tile);
}

}  // namespace tandem::kernels::cpu
