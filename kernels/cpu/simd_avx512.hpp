// Intrinsics for the *_avx512.cpp kernel files (AVX-512 F/BW/VL/DQ + VNNI).
//
// The same files are compiled twice:
//  - natively with -mavx512f/bw/vl/dq/vnni into the engine, selected at run time only on
//    CPUs that have all of them (isa.cpp);
//  - with TANDEM_AVX512_EMULATED, for the tests only, against SIMDe (the simde headers
//    implement every intrinsic in portable code, here on top of AVX2). That build lets a
//    machine without AVX-512 check the kernels' arithmetic against the scalar reference;
//    its code lives in another namespace so the two builds never collide at link time.
// Everything here is `static` (see simd_avx2.hpp).
#pragma once

// GCC 12's AVX-512 intrinsics start from _mm512_undefined_*() (a self-initialized
// variable), which -W(maybe-)uninitialized reports once inlined (GCC bug 105593).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

#if defined(TANDEM_AVX512_EMULATED)
#define SIMDE_ENABLE_NATIVE_ALIASES
#include <simde/x86/avx512.h>
#define TANDEM_AVX512_NS avx512_emulated
#else
#include <immintrin.h>
#define TANDEM_AVX512_NS avx512_native
#endif

#include <cstdint>

// The 256-bit helpers (loads, sums, prefetch) are the AVX2 ones: every AVX-512 CPU has AVX2.
#include "kernels/cpu/simd_avx2.hpp"

namespace tandem::kernels::cpu::avx512 {

#if defined(TANDEM_AVX512_EMULATED)
// The few intrinsics the kernels use that SIMDe 0.7 lacks, built from its 256-bit ones.
// (Names with a leading underscore are reserved only in the global namespace.)
static inline __m512 _mm512_cvtepi32_ps(__m512i v) {
  const __m512 lo = _mm512_castps256_ps512(_mm256_cvtepi32_ps(_mm512_castsi512_si256(v)));
  return _mm512_insertf32x8(lo, _mm256_cvtepi32_ps(_mm512_extracti64x4_epi64(v, 1)), 1);
}
static inline __m512i _mm512_cvtps_epi32(__m512 v) {  // rounding as MXCSR says (to nearest)
  const __m512i lo = _mm512_castsi256_si512(_mm256_cvtps_epi32(_mm512_castps512_ps256(v)));
  return _mm512_inserti64x4(lo, _mm256_cvtps_epi32(_mm256_castsi256_ps(_mm512_extracti64x4_epi64(_mm512_castps_si512(v), 1))), 1);
}
static inline __m512 _mm512_cvtph_ps(__m256i h) {
  const __m512 lo = _mm512_castps256_ps512(_mm256_cvtph_ps(_mm256_castsi256_si128(h)));
  return _mm512_insertf32x8(lo, _mm256_cvtph_ps(_mm256_extracti128_si256(h, 1)), 1);
}
static inline __m512i _mm512_srai_epi32(__m512i v, unsigned int n) {
  const __m512i lo = _mm512_castsi256_si512(_mm256_srai_epi32(_mm512_castsi512_si256(v), static_cast<int>(n)));
  return _mm512_inserti64x4(lo, _mm256_srai_epi32(_mm512_extracti64x4_epi64(v, 1), static_cast<int>(n)), 1);
}
static inline __m512i _mm512_cvtepu8_epi16(__m256i v) {
  const __m512i lo = _mm512_castsi256_si512(_mm256_cvtepu8_epi16(_mm256_castsi256_si128(v)));
  return _mm512_inserti64x4(lo, _mm256_cvtepu8_epi16(_mm256_extracti128_si256(v, 1)), 1);
}
static inline __m512i _mm512_cvtepu8_epi32(__m128i v) {
  const __m512i lo = _mm512_castsi256_si512(_mm256_cvtepu8_epi32(v));
  return _mm512_inserti64x4(lo, _mm256_cvtepu8_epi32(_mm_srli_si128(v, 8)), 1);
}
// Stores the lanes of v that k selects; writes nothing else.
static inline void _mm512_mask_storeu_ps(void* p, __mmask16 k, __m512 v) {
  float a[16];
  _mm512_storeu_ps(a, v);
  for (int i = 0; i < 16; ++i)
    if ((k >> i) & 1) __builtin_memcpy(static_cast<char*>(p) + 4 * i, &a[i], 4);
}
// The first lanes of k (a prefix mask) from p, zeros above; reads nothing past them.
static inline __m512 _mm512_maskz_loadu_ps(__mmask16 k, const void* p) {
  float v[16] = {};
  for (int i = 0; i < 16; ++i)
    if ((k >> i) & 1) __builtin_memcpy(&v[i], static_cast<const char*>(p) + 4 * i, 4);
  return _mm512_loadu_ps(v);
}
// The first lanes of k (a prefix mask) of 16 int16 from p, zeros above; reads nothing past them.
static inline __m256i _mm256_maskz_loadu_epi16(__mmask16 k, const void* p) {
  int16_t v[16] = {};
  for (int i = 0; i < 16; ++i)
    if ((k >> i) & 1) __builtin_memcpy(&v[i], static_cast<const char*>(p) + 2 * i, 2);
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(v));
}
// The low 16 bits of each lane (vpmovdw).
static inline __m256i _mm512_cvtepi32_epi16(__m512i v) {
  int32_t a[16];
  int16_t r[16];
  _mm512_storeu_si512(a, v);
  for (int i = 0; i < 16; ++i) r[i] = static_cast<int16_t>(a[i]);
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(r));
}
// Lanes of k: the 4 bytes at base + idx * scale; the others: src. (clang's headers declare
// every intrinsic whatever the target, this one as a macro.)
#ifdef _mm512_mask_i32gather_epi32
#undef _mm512_mask_i32gather_epi32
#endif
static inline __m512i _mm512_mask_i32gather_epi32(__m512i src, __mmask16 k, __m512i idx, const void* base, int scale) {
  int32_t out[16], ix[16];
  _mm512_storeu_si512(out, src);
  _mm512_storeu_si512(ix, idx);
  for (int i = 0; i < 16; ++i)
    if ((k >> i) & 1) __builtin_memcpy(&out[i], static_cast<const char*>(base) + static_cast<int64_t>(ix[i]) * scale, 4);
  return _mm512_loadu_si512(out);
}
#endif

static inline __m512i loadu512(const void* p) { return _mm512_loadu_si512(p); }
// The 32-bit word at p in every lane.
static inline __m512i bcast32(const void* p) {
  int32_t v;
  __builtin_memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}
// vpdpbusd(acc, u, the 32-bit word at p in every lane), with the word read by the
// instruction itself (an embedded {1to16} broadcast). GCC does not fold _mm512_set1_epi32
// of a load into vpdpbusd: it issues a separate vpbroadcastd, one more vector operation per
// vpdpbusd in the tile kernels, whose broadcasts are as many as their multiply-adds.
static inline __m512i dpbusd_bcast(__m512i acc, __m512i u, const void* p) {
#if defined(TANDEM_AVX512_EMULATED)
  return _mm512_dpbusd_epi32(acc, u, bcast32(p));
#else
  asm("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(u), "m"(*static_cast<const int32_t*>(p)));
  return acc;
#endif
}
// vpdpwssd(acc, a, the 32-bit word at p in every lane), the word read by the instruction.
static inline __m512i dpwssd_bcast(__m512i acc, __m512i a, const void* p) {
#if defined(TANDEM_AVX512_EMULATED)
  return _mm512_dpwssd_epi32(acc, a, bcast32(p));
#else
  asm("vpdpwssd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(a), "m"(*static_cast<const int32_t*>(p)));
  return acc;
#endif
}
// 16 f16 at p as floats.
static inline __m512 f16x16(const void* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(static_cast<const __m256i*>(p)));
}

// Horizontal sum in a fixed order (results must not depend on the caller).
static inline float hsum512(__m512 v) {
  const __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
  return avx2::hsum(_mm256_add_ps(_mm512_castps512_ps256(v), hi));
}
// The 16 int32 lanes of v folded to 8 (lane i + lane i+8).
static inline __m256i fold512(__m512i v) {
  return _mm256_add_epi32(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64(v, 1));
}

}  // namespace tandem::kernels::cpu::avx512
