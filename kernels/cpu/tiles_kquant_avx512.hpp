// The K-quant fields of the CPU's 16-row tiles (pack_tiles.hpp) as the AVX-512 kernels unpack
// them, 16 rows at a time (lane r: row r): the VNNI kernels (matmul_qk_tiles_avx512.cpp) and
// the AMX ones (matmul_tiles_amx_impl.hpp) read them the same way. Included by SIMD kernel
// files (also compiled against SIMDe): everything is `static`.
#pragma once
#include <cstdint>
#include <utility>

#include "kernels/cpu/matmul_qk_avx512_order.hpp"
#include "kernels/cpu/pack_tiles.hpp"
#include "kernels/cpu/simd_avx512.hpp"

namespace tandem::kernels::cpu::avx512 {

// Calls f(std::integral_constant<int, J>) for J = 0..N-1: scale groups by constant index,
// so lane extractions take immediates.
template <class F, int... J>
static inline void each(std::integer_sequence<int, J...>, F&& f) {
  (f(std::integral_constant<int, J>{}), ...);
}

// Where natural 32-element chunk j of a Q4_K activation block is stored (the AVX-512 Q4_K
// kernels read chunks in qk512::kNibbles order: stored chunk i is natural chunk kNibbles[i]).
struct ChunkPos {
  int v[8];
  constexpr explicit ChunkPos(const int* order) : v() {
    for (int i = 0; i < 8; ++i) v[order[i]] = i;
  }
};
constexpr ChunkPos kQ4kPos(mm::qk512::kNibbles);

// A Q4_K tile's 8 scales and 8 mins of 6 bits, unpacked as blk::unpack_k4_scales does: byte
// r of 16-byte lane j of sc_lo is row r's scale j, of sc_hi its scale 4 + j; the same for
// the mins.
struct Q4kScales {
  __m512i sc_lo, sc_hi, mn_lo, mn_hi;
};
static inline Q4kScales q4k_scales(const uint8_t* tile) {
  const __m512i m4 = _mm512_set1_epi8(0x0f), m6 = _mm512_set1_epi8(0x3f), m30 = _mm512_set1_epi8(0x30);
  // 16-byte lane k of z0 | z1 | z2: byte k (0-3 | 4-7 | 8-11) of the 16 rows' packed scales.
  const __m512i z0 = loadu512(tile + mm::tile_q4k::scales), z1 = loadu512(tile + mm::tile_q4k::scales + 64),
                z2 = loadu512(tile + mm::tile_q4k::scales + 128);
  Q4kScales s;
  s.sc_lo = _mm512_and_si512(z0, m6);
  s.mn_lo = _mm512_and_si512(z1, m6);
  s.sc_hi = _mm512_or_si512(_mm512_and_si512(z2, m4), _mm512_and_si512(_mm512_srli_epi16(z0, 2), m30));
  s.mn_hi = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(z2, 4), m4), _mm512_and_si512(_mm512_srli_epi16(z1, 2), m30));
  return s;
}
// Scale J of the 16 rows, an int32 lane each.
template <int J>
static inline __m512i q4k_scale(const Q4kScales& s) {
  return _mm512_cvtepu8_epi32(_mm512_extracti32x4_epi32(J < 4 ? s.sc_lo : s.sc_hi, J % 4));
}
// The mins two groups at a time: 32-bit lane r of mp[k] holds row r's mins 2k and 2k+1 as
// int16, to meet the activations' 32-element sums of groups 2k and 2k+1 (one 32-bit word) in
// one vpdpwssd.
static inline void q4k_min_pairs(const Q4kScales& s, __m512i* mp) {
  const __m512i ev = _mm512_shuffle_i32x4(s.mn_lo, s.mn_hi, _MM_SHUFFLE(2, 0, 2, 0));  // mins 0, 2, 4, 6
  const __m512i od = _mm512_shuffle_i32x4(s.mn_lo, s.mn_hi, _MM_SHUFFLE(3, 1, 3, 1));  // mins 1, 3, 5, 7
  // 16-byte lane k: rows 0-7 (lo) or 8-15 (hi) of mins 2k, 2k+1 byte by byte.
  const __m512i lo = _mm512_unpacklo_epi8(ev, od), hi = _mm512_unpackhi_epi8(ev, od);
  // [lo k, hi k] side by side for k = 0, 1 and then 2, 3.
  const __m512i p01 = _mm512_shuffle_i32x4(lo, hi, _MM_SHUFFLE(1, 0, 1, 0)),
                p23 = _mm512_shuffle_i32x4(lo, hi, _MM_SHUFFLE(3, 2, 3, 2));
  const __m512i q01 = _mm512_shuffle_i32x4(p01, p01, _MM_SHUFFLE(3, 1, 2, 0)),
                q23 = _mm512_shuffle_i32x4(p23, p23, _MM_SHUFFLE(3, 1, 2, 0));
  mp[0] = _mm512_cvtepu8_epi16(_mm512_castsi512_si256(q01));
  mp[1] = _mm512_cvtepu8_epi16(_mm512_extracti64x4_epi64(q01, 1));
  mp[2] = _mm512_cvtepu8_epi16(_mm512_castsi512_si256(q23));
  mp[3] = _mm512_cvtepu8_epi16(_mm512_extracti64x4_epi64(q23, 1));
}

// Q6_K group j's codes (0..63; value code - 32) of the 16 rows, from its bytes at `group`:
// vector u holds elements 4u..4u+3. Code u of each 4: low 4 bits from N0/N1, top 2 from bits
// 2u of H moved to bits 4-5 (one vpternlogd for the and-or; the low part's bits 4-7 are clear).
static inline void q6k_codes(const uint8_t* group, __m512i* c) {
  const __m512i m4 = _mm512_set1_epi8(0x0f), m30 = _mm512_set1_epi8(0x30);
  const __m512i n0 = loadu512(group), n1 = loadu512(group + 64), hb = loadu512(group + 128);
  const auto hi6 = [&](__m512i low, __m512i h) { return _mm512_ternarylogic_epi32(low, h, m30, 0xD8); };
  c[0] = hi6(_mm512_and_si512(n0, m4), _mm512_slli_epi16(hb, 4));
  c[1] = hi6(_mm512_and_si512(_mm512_srli_epi16(n0, 4), m4), _mm512_slli_epi16(hb, 2));
  c[2] = hi6(_mm512_and_si512(n1, m4), hb);
  c[3] = hi6(_mm512_and_si512(_mm512_srli_epi16(n1, 4), m4), _mm512_srli_epi16(hb, 2));
}

}  // namespace tandem::kernels::cpu::avx512
