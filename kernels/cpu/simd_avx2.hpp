// Small AVX2 helpers for the *_avx2.cpp kernel files only (they are compiled with
// -mavx2 -mfma -mf16c). Everything is `static` so no AVX code can leak into baseline files
// through the linker's merging of inline functions.
#pragma once
#include <immintrin.h>

#include <cstdint>

namespace tandem::kernels::cpu::avx2 {

// Horizontal sums in a fixed order (results must not depend on the caller).
static inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
static inline int hsum_i32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
  return _mm_cvtsi128_si32(s);
}
static inline float hmax(__m256 v) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

static inline __m256i loadu(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
static inline __m128i loadu128(const void* p) { return _mm_loadu_si128(static_cast<const __m128i*>(p)); }
static inline float f16(const uint8_t* p) {
  uint16_t h;
  __builtin_memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

// Bit K of every byte moved to bit P, all other bits cleared.
template <int K, int P>
static inline __m256i bit_to(__m256i v) {
  const __m256i m = _mm256_set1_epi8(static_cast<char>(1 << P));
  if constexpr (K == P) return _mm256_and_si256(v, m);
  else if constexpr (K < P) return _mm256_and_si256(_mm256_slli_epi16(v, P - K), m);
  else return _mm256_and_si256(_mm256_srli_epi16(v, K - P), m);
}

// exp(x) for 8 floats (attention: scores minus their running max; activations). Cephes-style:
// x = n*ln2 + r with |r| <= ln2/2, exp(r) by a degree-6 polynomial, 2^n through the
// exponent bits. Relative error about 2e-7; inputs below -87.3 give ~1e-38 (callers mask),
// above 88.37 +inf.
// Its constants, shared with the 16-lane twin (attention_avx512.cpp): the input clamp, log2 e,
// ln 2 in two parts, and the polynomial's coefficients from the highest degree down.
constexpr float kExpHi = 88.3762626647949f, kExpLo = -87.3365447504019f, kLog2e = 1.44269504088896341f;
constexpr float kLn2Hi = 0.693359375f, kLn2Lo = -2.12194440e-4f;
constexpr float kExpPoly[6] = {1.9875691500e-4f, 1.3981999507e-3f, 8.3334519073e-3f,
                               4.1665795894e-2f, 1.6666665459e-1f, 5.0000001201e-1f};
static inline __m256 exp8(__m256 x) {
  x = _mm256_max_ps(_mm256_min_ps(x, _mm256_set1_ps(kExpHi)), _mm256_set1_ps(kExpLo));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(kLog2e)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(kLn2Hi), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(kLn2Lo), r);
  __m256 p = _mm256_set1_ps(kExpPoly[0]);
  for (int k = 1; k < 6; ++k) p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kExpPoly[k]));
  p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

// Weights stream through once; asking for them this far ahead keeps loads and arithmetic
// overlapped (rows are usually contiguous, so this runs on into the next row). Tuned on
// Zen 3: 2 KB beat 0.5, 1 and 4 KB for decode. Into L2 (T1), not L1: on an Intel Xeon
// (Emerald Rapids class), passes interleaved in one process with T0's, Qwen2.5 1.5B took
// 3-5% less at n = 1 and 7-9% less at n = 4, the 0.5B draft 3% less at n = 1 and 2% more
// at n = 4 (docs/cpu-kernels.md). A prefetch into L1 holds one of the core's few L1 miss
// buffers until its line arrives; into L2 it does not. AMD cores before Zen 4 treat
// T0/T1/T2 alike; Zen 4 and later fill L2 for T1 as Intel does (not measured here yet).
constexpr uintptr_t kPrefetchBytes = 2048;
static inline void prefetch_ahead(const uint8_t* p, int bytes) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p) + kPrefetchBytes;
  for (int o = 0; o < bytes; o += 64) _mm_prefetch(reinterpret_cast<const char*>(a + static_cast<uintptr_t>(o)), _MM_HINT_T1);
}

// Reorderings that let several maddubs results be summed in int16 before one madd applies
// the group scales (see matmul_qk_avx2.cpp). Weights are reordered at decode time and the
// activations identically when they are quantized, so the dot product is unchanged.
//
// tr4x64: 4 vectors, vector g holding group g (32 codes) -> 4 vectors whose 64-bit unit p
// (int16 lanes 4p..4p+3 after maddubs) always comes from group p.
static inline void tr4x64(__m256i& v0, __m256i& v1, __m256i& v2, __m256i& v3) {
  const __m256i a = _mm256_unpacklo_epi64(v0, v1), b = _mm256_unpacklo_epi64(v2, v3);
  const __m256i c = _mm256_unpackhi_epi64(v0, v1), d = _mm256_unpackhi_epi64(v2, v3);
  v0 = _mm256_permute2x128_si256(a, b, 0x20);
  v1 = _mm256_permute2x128_si256(c, d, 0x20);
  v2 = _mm256_permute2x128_si256(a, b, 0x31);
  v3 = _mm256_permute2x128_si256(c, d, 0x31);
}
// pair64: 2 vectors each holding groups (A | B) and (C | D) of 16 -> 2 vectors both laid
// out as 64-bit units (A, C | B, D).
static inline void pair64(__m256i& v0, __m256i& v1) {
  const __m256i lo = _mm256_unpacklo_epi64(v0, v1), hi = _mm256_unpackhi_epi64(v0, v1);
  v0 = lo;
  v1 = hi;
}

// 32 unsigned codes x 32 int8 activations -> 16 int16 pair sums. No saturation is
// possible: codes are at most 63 here (the sign trick for Q8_0 keeps |code| <= 128 with
// activations in [-127, 127]).
static inline __m256i pair_dot(__m256i u, __m256i x) { return _mm256_maddubs_epi16(u, x); }

}  // namespace tandem::kernels::cpu::avx2
