// AVX2 activation quantization: the same values as the scalar version in act_quant.cpp
// (same scale formulas, cvtps rounds to nearest-even like nearbyint); for the types whose
// AVX2 kernels read codes in a different order, the codes are then reordered to match.
#include "kernels/cpu/matmul_impl.hpp"
#include "kernels/cpu/simd_avx2.hpp"

// Float rounding must be exactly what is written (no a*b+c contraction), the same for every
// token-group size: SIMD kernel files are compiled with -ffp-contract=off (kernels/CMakeLists.txt).

namespace tandem::kernels::cpu::mm {
namespace {

using namespace avx2;

static inline __m256 absf(__m256 v) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), v); }

// Codes of 32 values at scale id, stored to q; returns the four int32 vectors' sum parts
// (elements 0-15 and 16-31) through lo/hi.
static inline void quant32(const float* x, __m256 id, int8_t* q, __m256i& lo, __m256i& hi) {
  const __m256i i0 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x), id));
  const __m256i i1 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + 8), id));
  const __m256i i2 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + 16), id));
  const __m256i i3 = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + 24), id));
  // packs work per 128-bit half; the permute restores element order.
  const __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(i0, i1), _mm256_packs_epi32(i2, i3));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(q),
                      _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
  lo = _mm256_add_epi32(i0, i1);
  hi = _mm256_add_epi32(i2, i3);
}

// off8[k] = -32 * (sum of q[8k..8k+7]) for one 256-code block: vpsadbw sums each 8 bytes
// (as unsigned, so the codes are biased by +128 first and 8 * 128 taken off again).
static inline void off8_sums(const int8_t* q, int32_t* off8) {
  const __m256i bias = _mm256_set1_epi8(static_cast<char>(0x80));
  for (int c = 0; c < 8; ++c) {
    const __m256i u = _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + 32 * c)), bias);
    const __m256i s = _mm256_sub_epi64(_mm256_sad_epu8(u, _mm256_setzero_si256()), _mm256_set1_epi64x(8 * 128));
    // The four 64-bit sums to four int32, times -32.
    const __m128i lo = _mm256_castsi256_si128(s), hi = _mm256_extracti128_si256(s, 1);
    const __m128i s4 = _mm_castps_si128(_mm_shuffle_ps(_mm_castsi128_ps(lo), _mm_castsi128_ps(hi), _MM_SHUFFLE(2, 0, 2, 0)));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(off8 + 4 * c), _mm_mullo_epi32(s4, _mm_set1_epi32(-32)));
  }
}

static inline float amax_of(const float* x, int n) {
  __m256 m = _mm256_setzero_ps();
  for (int i = 0; i < n; i += 8) m = _mm256_max_ps(m, absf(_mm256_loadu_ps(x + i)));
  return hmax(m);
}

}  // namespace

void avx2_quant_q32(const float* x, const ActLayout& l, uint8_t* row) {
  int8_t* q = reinterpret_cast<int8_t*>(row);
  float* d = reinterpret_cast<float*>(row + l.d_off);
  float* s = reinterpret_cast<float*>(row + l.aux_off);
  for (int64_t b = 0; b < l.nb; ++b) {
    const float amax = amax_of(x + 32 * b, 32);
    const bool nz = amax > 1e-30f;
    const __m256 id = _mm256_set1_ps(nz ? 127.0f / amax : 0.0f);
    __m256i lo, hi;
    quant32(x + 32 * b, id, q + 32 * b, lo, hi);
    d[b] = nz ? amax / 127.0f : 0.0f;
    s[b] = d[b] * static_cast<float>(hsum_i32(_mm256_add_epi32(lo, hi)));
  }
}

void avx2_quant_qk(const float* x, const ActLayout& l, uint8_t* row) {
  int8_t* q = reinterpret_cast<int8_t*>(row);
  float* d = reinterpret_cast<float*>(row + l.d_off);
  int16_t* bs = reinterpret_cast<int16_t*>(row + l.aux_off);
  float* fs = reinterpret_cast<float*>(row + l.fsum_off);
  int16_t* bs32 = reinterpret_cast<int16_t*>(row + l.bs32_off);
  int32_t* off8 = reinterpret_cast<int32_t*>(row + l.off8_off);
  for (int64_t b = 0; b < l.nb; ++b) {
    const float* xb = x + 256 * b;
    const float amax = amax_of(xb, 256);
    const bool nz = amax > 1e-30f;
    const __m256 id = _mm256_set1_ps(nz ? 127.0f / amax : 0.0f);
    for (int g = 0; g < 8; ++g) {
      __m256i lo, hi;
      quant32(xb + 32 * g, id, q + 256 * b + 32 * g, lo, hi);
      bs[16 * b + 2 * g] = static_cast<int16_t>(hsum_i32(lo));
      bs[16 * b + 2 * g + 1] = static_cast<int16_t>(hsum_i32(hi));
    }
    d[b] = nz ? amax / 127.0f : 0.0f;
    for (int j = 0; j < 8; ++j) {
      bs32[8 * b + j] = static_cast<int16_t>(bs[16 * b + 2 * j] + bs[16 * b + 2 * j + 1]);
      fs[8 * b + j] = d[b] * static_cast<float>(bs32[8 * b + j]);
    }
    off8_sums(q + 256 * b, off8 + 32 * b);
  }
}

namespace {

// Q4_K / Q5_K kernels read each 128 codes as tr4x64 of the four 32-code groups.
void quant_qk_x4(const float* x, const ActLayout& l, uint8_t* row) {
  avx2_quant_qk(x, l, row);
  auto* v = reinterpret_cast<__m256i*>(row);
  for (int64_t i = 0; i < l.C / 128; ++i, v += 4) {
    __m256i a = loadu(v), b = loadu(v + 1), c = loadu(v + 2), d = loadu(v + 3);
    tr4x64(a, b, c, d);
    _mm256_storeu_si256(v, a), _mm256_storeu_si256(v + 1, b), _mm256_storeu_si256(v + 2, c), _mm256_storeu_si256(v + 3, d);
  }
}

// The Q2_K, Q3_K and Q6_K kernels read each 64 codes as pair64 of two 32-code vectors.
void quant_qk_x2(const float* x, const ActLayout& l, uint8_t* row) {
  avx2_quant_qk(x, l, row);
  auto* v = reinterpret_cast<__m256i*>(row);
  for (int64_t i = 0; i < l.C / 64; ++i, v += 2) {
    __m256i a = loadu(v), b = loadu(v + 1);
    pair64(a, b);
    _mm256_storeu_si256(v, a), _mm256_storeu_si256(v + 1, b);
  }
}

// The 4- and 5-bit kernels read blocks in pairs (A, B) as (A 0-15 | B 0-15) and
// (A 16-31 | B 16-31); an odd last block stays as it is.
void quant_q32_pairs(const float* x, const ActLayout& l, uint8_t* row) {
  avx2_quant_q32(x, l, row);
  auto* v = reinterpret_cast<__m256i*>(row);
  for (int64_t i = 0; i + 2 <= l.nb; i += 2, v += 2) {
    const __m256i a = loadu(v), b = loadu(v + 1);
    _mm256_storeu_si256(v, _mm256_permute2x128_si256(a, b, 0x20));
    _mm256_storeu_si256(v + 1, _mm256_permute2x128_si256(a, b, 0x31));
  }
}

}  // namespace

QuantFn avx2_quant_q32_for(DType t) {
  switch (t) {
    case DType::Q4_0:
    case DType::Q4_1:
    case DType::Q5_0:
    case DType::Q5_1: return quant_q32_pairs;
    default: return avx2_quant_q32;
  }
}

QuantFn avx2_quant_qk_for(DType t) {
  switch (t) {
    case DType::Q4_K:
    case DType::Q5_K: return quant_qk_x4;
    default: return quant_qk_x2;  // Q2_K, Q3_K, Q6_K
  }
}

}  // namespace tandem::kernels::cpu::mm
