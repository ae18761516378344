// The AVX-512 attention span (see attention_impl.hpp): attention_span_avx2_multi's walk in
// tiles of 16 positions on 512-bit vectors, for CPUs the AVX-512 kernel level runs on.
//
// Per query head and tile, the 16 scores come from 16 dot products of q with the tile's K
// rows (hd / 16 multiply-adds each), summed across lanes by one reduction tree for all 16;
// the weighted sum of V is 16 multiply-adds per 16 dims. Half the loads and multiply-adds
// per position of the 8-position AVX2 tiles, which the loads bound. The tile walk is
// attn_detail::walk_tiles, so a token's arithmetic is its own whatever tokens share it.
#include <cmath>

#include "kernels/cpu/attention_impl.hpp"
#include "kernels/cpu/matmul_impl.hpp"
#include "kernels/cpu/simd_avx512.hpp"

namespace tandem::kernels::cpu::mm::TANDEM_AVX512_NS {
using namespace avx512;  // the emulated build's stand-ins for what SIMDe lacks

namespace {

using attn_detail::kMaxHeadDim;
constexpr int kTile = 16;

#if defined(TANDEM_AVX512_EMULATED)
#define TANDEM_SHUFFLE_F32X4(a, b, imm) simde_mm512_shuffle_f32x4(a, b, imm)
#else
#define TANDEM_SHUFFLE_F32X4(a, b, imm) _mm512_shuffle_f32x4(a, b, imm)
#endif

// The 256-bit halves of v.
static inline __m256 low8(__m512 v) { return _mm512_castps512_ps256(v); }
static inline __m256 high8(__m512 v) {
  return _mm256_castsi256_ps(_mm512_extracti64x4_epi64(_mm512_castps_si512(v), 1));
}
static inline float hmax16(__m512 v) { return avx2::hmax(_mm256_max_ps(low8(v), high8(v))); }
static inline float hsum16(__m512 v) { return avx2::hsum(_mm256_add_ps(low8(v), high8(v))); }

// The reduction tree below leaves row k's sum in lane kLane[k]; row kLane[j] is therefore
// summed into lane j when the tile's rows go into the accumulators in this order (the
// permutation is its own inverse).
constexpr int kLane[kTile] = {0, 2, 1, 3, 8, 10, 9, 11, 4, 6, 5, 7, 12, 14, 13, 15};

// e^x on 16 lanes: avx2::exp8's range reduction and polynomial (its constants).
static inline __m512 exp16(__m512 x) {
  using namespace avx2;
  x = _mm512_max_ps(_mm512_min_ps(x, _mm512_set1_ps(kExpHi)), _mm512_set1_ps(kExpLo));
  const __m512i ni = _mm512_cvtps_epi32(_mm512_mul_ps(x, _mm512_set1_ps(kLog2e)));  // to nearest
  const __m512 n = _mm512_cvtepi32_ps(ni);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(kLn2Hi), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(kLn2Lo), r);
  __m512 p = _mm512_set1_ps(kExpPoly[0]);
  for (int k = 1; k < 6; ++k) p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kExpPoly[k]));
  p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  const __m512i e = _mm512_slli_epi32(_mm512_add_epi32(ni, _mm512_set1_epi32(127)), 23);
  return _mm512_mul_ps(p, _mm512_castsi512_ps(e));
}

static inline __m512 add_pd(__m512 a, __m512 b, bool hi) {
  const __m512d x = _mm512_castps_pd(a), y = _mm512_castps_pd(b);
  return _mm512_castpd_ps(hi ? _mm512_unpackhi_pd(x, y) : _mm512_unpacklo_pd(x, y));
}

// The 16 scores of one head: q against the tile's rows (kt[kLane[j]] in accumulator j).
static inline __m512 scores16(const float* q, const float (*k)[kMaxHeadDim], int hd) {
  __m512 s[kTile];
  for (int j = 0; j < kTile; ++j) s[j] = _mm512_setzero_ps();
  for (int i = 0; i < hd; i += 16) {
    const __m512 qv = _mm512_loadu_ps(q + i);
    for (int j = 0; j < kTile; ++j) s[j] = _mm512_fmadd_ps(qv, _mm512_load_ps(k[kLane[j]] + i), s[j]);
  }
  __m512 x[8], y[4], z[2];
  for (int j = 0; j < 8; ++j)  // 128-bit chunks: [a0+a2, a1+a3, b0+b2, b1+b3]
    x[j] = _mm512_add_ps(TANDEM_SHUFFLE_F32X4(s[j], s[j + 8], 0x44), TANDEM_SHUFFLE_F32X4(s[j], s[j + 8], 0xEE));
  for (int j = 0; j < 4; ++j)  // [x_j 0+1, x_j 2+3, x_j+4 0+1, x_j+4 2+3]
    y[j] = _mm512_add_ps(TANDEM_SHUFFLE_F32X4(x[j], x[j + 4], 0x88), TANDEM_SHUFFLE_F32X4(x[j], x[j + 4], 0xDD));
  for (int j = 0; j < 2; ++j)
    z[j] = _mm512_add_ps(_mm512_unpacklo_ps(y[j], y[j + 2]), _mm512_unpackhi_ps(y[j], y[j + 2]));
  return _mm512_add_ps(add_pd(z[0], z[1], false), add_pd(z[0], z[1], true));
}

}  // namespace

void attention_multi_avx512(const AttnArgs& a, const int64_t* ts, const int32_t* his, int n_tok, int kvh, int32_t lo,
                            AttnState* sts) {
  const int hd = a.head_dim, group = attn_group(a);
  if (hd % 16 != 0) return attention_span_avx2_multi(a, ts, his, n_tok, kvh, lo, sts);
  alignas(64) float kt[kTile][kMaxHeadDim];
  alignas(64) float vt[kTile][kMaxHeadDim];
  alignas(64) float vz[kTile][kMaxHeadDim];
  const __m512 neg_inf = _mm512_set1_ps(-INFINITY);
  // Inlined into the walk, its constants in registers (captured by value).
  auto tile = [&a, hd, group, neg_inf](const float(*k)[kMaxHeadDim], const float(*v)[kMaxHeadDim], int n,
                                       const float* qh, const AttnState& st) __attribute__((always_inline)) {
    const auto valid = static_cast<__mmask16>((1u << n) - 1u);
    for (int g = 0; g < group; ++g) {
      __m512 s = _mm512_mul_ps(scores16(qh + static_cast<int64_t>(g) * hd, k, hd), _mm512_set1_ps(a.scale));
      if (a.softcap > 0.0f) {
        alignas(64) float sv[kTile];
        _mm512_store_ps(sv, s);
        for (float& x : sv) x = a.softcap * std::tanh(x / a.softcap);
        s = _mm512_load_ps(sv);
      }
      s = _mm512_mask_mov_ps(neg_inf, valid, s);
      const float tmax = hmax16(s);
      float* ag = st.acc + static_cast<size_t>(g) * hd;
      if (tmax > st.m[g]) {  // new running max: rescale what was accumulated so far
        if (st.m[g] != -INFINITY) {
          const float r = std::exp(st.m[g] - tmax);
          st.l[g] *= r;
          const __m512 rv = _mm512_set1_ps(r);
          for (int i = 0; i < hd; i += 16) _mm512_storeu_ps(ag + i, _mm512_mul_ps(_mm512_loadu_ps(ag + i), rv));
        }
        st.m[g] = tmax;
      }
      const __m512 p = _mm512_maskz_mov_ps(valid, exp16(_mm512_sub_ps(s, _mm512_set1_ps(st.m[g]))));
      st.l[g] += hsum16(p);
      alignas(64) float pv[kTile];
      _mm512_store_ps(pv, p);
      for (int i = 0; i < hd; i += 16) {
        __m512 acc = _mm512_loadu_ps(ag + i);
        for (int j = 0; j < kTile; ++j) acc = _mm512_fmadd_ps(_mm512_set1_ps(pv[j]), _mm512_load_ps(v[j] + i), acc);
        _mm512_storeu_ps(ag + i, acc);
      }
    }
  };
  attn_detail::walk_tiles<kTile>(a, ts, his, n_tok, kvh, lo, sts, kt, vt, vz, tile);
}

}  // namespace tandem::kernels::cpu::mm::TANDEM_AVX512_NS
