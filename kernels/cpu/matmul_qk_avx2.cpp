// AVX2 matmul kernels for the K-quants (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K).
//
// For one weight row and a group of up to 8 tokens, each 256-element block is decoded
// into eight vectors of 32 unsigned codes, and each vector is multiplied with every
// token's int8 activations (maddubs: u8 x s8 -> pairs of int16), then with the group
// scales (madd: int16 x int16 -> int32). madd is the costly one (on Zen 3 about 1.3 cycles
// of throughput against 0.5 for maddubs), so the kernels reorder codes (and, identically,
// the activations) such that 4 (Q4_K, Q5_K) or 2 (Q2_K, Q3_K, Q6_K) maddubs results add up
// in int16 under one madd. Per block and token the integer
// sum is turned into float once. Longer token ranges repeat the row in groups; the row
// (under 8 KB) is then read from L1, so memory sees each weight once per call.
//
// Every token's arithmetic is the same sequence whatever the group size, so results do not
// depend on how many tokens are computed together.
#include "kernels/cpu/matmul_impl.hpp"
#include "kernels/cpu/quant_blocks.hpp"
#include "kernels/cpu/row_groups.hpp"
#include "kernels/cpu/matmul_qk_common.hpp"
#include "kernels/cpu/simd_avx2.hpp"

// Float rounding must be exactly what is written (no a*b+c contraction), the same for every
// token-group size: SIMD kernel files are compiled with -ffp-contract=off (kernels/CMakeLists.txt).

namespace tandem::kernels::cpu::mm {
namespace {

using namespace avx2;
using namespace qk;
using u8 = uint8_t;

// vpshufb controls, all picking int16 lanes from a vector that holds 8 scales in each
// 128-bit half. pair[k]: lane 2k in the low half, 2k+1 in the high half (the two groups of 16 one natural vector spans). quad[s]: the scales of a
// tr4x64 set of groups 4s..4s+3 (lanes 4p..4p+3 -> group 4s+p). pq[k]: the scales of a
// pair64 of natural vectors 2k, 2k+1 (lanes 0-3, 4-7 of the low half -> groups 4k, 4k+2;
// of the high half -> 4k+1, 4k+3).
struct Controls {
  alignas(32) u8 quad[2][32];
  alignas(32) u8 pq[2][32];
  constexpr Controls() : quad(), pq() {
    for (int i = 0; i < 32; ++i) {
      const int half = i / 16, lane = (i % 16) / 2, byte = i % 2;
      for (int k = 0; k < 2; ++k) quad[k][i] = static_cast<u8>(2 * (4 * k + 2 * half + (lane >= 4)) + byte);
      for (int k = 0; k < 2; ++k) pq[k][i] = static_cast<u8>(2 * (4 * k + half + 2 * (lane >= 4)) + byte);
    }
  }
};
constexpr Controls kCtl;

static inline __m256i shuffle(__m256i v, const u8* ctl) {
  return _mm256_shuffle_epi8(v, _mm256_load_si256(reinterpret_cast<const __m256i*>(ctl)));
}

// Sums of several maddubs results taken in int16 before the scales are applied: lane
// bounds are 2*15*127 = 3810 per vector for 4-bit codes (4 vectors: 15240), 2*31*127 =
// 7874 for 5-bit (4: 31496) and 2*63*127 = 16002 for 6-bit (2: 32004), all below 32767.
template <int TN>
static inline void dot4(__m256i v0, __m256i v1, __m256i v2, __m256i v3, __m256i sc, const Toks<TN>& x,
                        int64_t off, __m256i* isum) {
  #pragma GCC unroll 8
  for (int t = 0; t < TN; ++t) {
    const int8_t* q = x.q[t] + off;
    const __m256i p = _mm256_add_epi16(_mm256_add_epi16(pair_dot(v0, loadu(q)), pair_dot(v1, loadu(q + 32))),
                                       _mm256_add_epi16(pair_dot(v2, loadu(q + 64)), pair_dot(v3, loadu(q + 96))));
    isum[t] = _mm256_add_epi32(isum[t], _mm256_madd_epi16(p, sc));
    __asm__("" : "+x"(isum[t]));
  }
}
template <int TN>
static inline void dot2(__m256i v0, __m256i v1, __m256i sc, const Toks<TN>& x, int64_t off, __m256i* isum) {
  #pragma GCC unroll 8
  for (int t = 0; t < TN; ++t) {
    const int8_t* q = x.q[t] + off;
    const __m256i p = _mm256_add_epi16(pair_dot(v0, loadu(q)), pair_dot(v1, loadu(q + 32)));
    isum[t] = _mm256_add_epi32(isum[t], _mm256_madd_epi16(p, sc));
    __asm__("" : "+x"(isum[t]));
  }
}

template <int TN>
static inline void zero(__m256i* v) {
  #pragma GCC unroll 8
  for (int t = 0; t < TN; ++t) v[t] = _mm256_setzero_si256();
}

// 8 unsigned bytes (two packed words) -> 8 int16 in a 128-bit register.
static inline __m128i u8x8_to_i16(uint32_t lo, uint32_t hi) {
  return _mm_cvtepu8_epi16(_mm_cvtsi64_si128(static_cast<long long>(lo | (static_cast<uint64_t>(hi) << 32))));
}

// Q2_K, Q3_K and Q6_K have groups of 16: each natural vector spans two, and vectors are
// paired with pair64 (the activations were stored in that order by avx2_quant_qk_for) so
// that two maddubs results share one madd. sc16 holds the 16 group scales as int16.
template <int TN>
static inline void dot_pairs(__m256i sc16, int h, __m256i v0, __m256i v1, __m256i v2, __m256i v3,
                             const Toks<TN>& x, int64_t off, __m256i* isum) {
  const __m256i sch = h ? _mm256_permute2x128_si256(sc16, sc16, 0x11) : _mm256_permute2x128_si256(sc16, sc16, 0x00);
  pair64(v0, v1);
  pair64(v2, v3);
  dot2<TN>(v0, v1, shuffle(sch, kCtl.pq[0]), x, off, isum);
  dot2<TN>(v2, v3, shuffle(sch, kCtl.pq[1]), x, off + 64, isum);
}

struct Q2K {
  static constexpr int kBytes = blk::q2_k::size;
  template <int TN>
  static inline void block(const u8* b, const Toks<TN>& x, int64_t bi, __m256* acc) {
    const __m128i s = loadu128(b + blk::q2_k::scales);
    const __m128i m4 = _mm_set1_epi8(0x0f);
    const __m256i sc = _mm256_cvtepu8_epi16(_mm_and_si128(s, m4));
    const __m256i mins = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(s, 4), m4));
    const __m256i m3 = _mm256_set1_epi8(3);
    __m256i isum[TN];
    zero<TN>(isum);
    for (int h = 0; h < 2; ++h) {  // vector j of half h: bits 2j of qs[32h + l]
      const __m256i q = loadu(b + blk::q2_k::qs + 32 * h);
      dot_pairs<TN>(sc, h, _mm256_and_si256(q, m3), _mm256_and_si256(_mm256_srli_epi16(q, 2), m3),
                    _mm256_and_si256(_mm256_srli_epi16(q, 4), m3), _mm256_and_si256(_mm256_srli_epi16(q, 6), m3), x,
                    256 * bi + 128 * h, isum);
    }
    fold_imin<TN>(isum, mins, f16(b + blk::q2_k::d), f16(b + blk::q2_k::dmin), x, bi, acc);
  }
};

struct Q3K {
  static constexpr int kBytes = blk::q3_k::size;
  template <int TN>
  static inline void block(const u8* b, const Toks<TN>& x, int64_t bi, __m256* acc) {
    uint32_t sw[4];
    blk::unpack_q3k_scales(b + blk::q3_k::scales, sw);
    const __m256i sc = _mm256_sub_epi16(
        _mm256_cvtepu8_epi16(_mm_set_epi32(static_cast<int>(sw[3]), static_cast<int>(sw[2]),
                                           static_cast<int>(sw[1]), static_cast<int>(sw[0]))),
        _mm256_set1_epi16(32));
    const __m256i mins = _mm256_slli_epi16(sc, 2);  // codes are stored +4
    const __m256i m3 = _mm256_set1_epi8(3);
    const __m256i hm = loadu(b + blk::q3_k::hmask);
    __m256i isum[TN];
    zero<TN>(isum);
    // Vector v = 4h + j: 2 low bits at bit 2j of qs[32h + l], high bit at bit v of hmask[l].
    {
      const __m256i q = loadu(b + blk::q3_k::qs);
      dot_pairs<TN>(sc, 0, _mm256_or_si256(_mm256_and_si256(q, m3), bit_to<0, 2>(hm)),
                    _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 2), m3), bit_to<1, 2>(hm)),
                    _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 4), m3), bit_to<2, 2>(hm)),
                    _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 6), m3), bit_to<3, 2>(hm)), x, 256 * bi,
                    isum);
    }
    {
      const __m256i q = loadu(b + blk::q3_k::qs + 32);
      dot_pairs<TN>(sc, 1, _mm256_or_si256(_mm256_and_si256(q, m3), bit_to<4, 2>(hm)),
                    _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 2), m3), bit_to<5, 2>(hm)),
                    _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 4), m3), bit_to<6, 2>(hm)),
                    _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 6), m3), bit_to<7, 2>(hm)), x,
                    256 * bi + 128, isum);
    }
    fold_offset<TN>(isum, mins, f16(b + blk::q3_k::d), x, bi, acc);
  }
};

// Q4_K and Q5_K share the scale layout. Scales as int16 in both halves (for the quad
// shuffles), mins times dmin as 8 floats.
static inline void k4_scales(const u8* b, __m256i& scb, __m256& fmins) {
  const blk::K4Scales k = blk::unpack_k4_scales(b + blk::q4_k::scales);
  scb = _mm256_broadcastsi128_si256(u8x8_to_i16(k.sc[0], k.sc[1]));
  const __m128i mn = _mm_cvtsi64_si128(static_cast<long long>(k.mn[0] | (static_cast<uint64_t>(k.mn[1]) << 32)));
  fmins = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(mn)), _mm256_set1_ps(f16(b + blk::q4_k::dmin)));
}

// Q4_K / Q5_K: groups of 32 are decoded per set of four and reordered with tr4x64 (the
// activations were stored in that order by avx2_quant_qk_for), so four maddubs results share
// one madd with the scales.
struct Q4K {
  static constexpr int kBytes = blk::q4_k::size;
  template <int TN>
  static inline void block(const u8* b, const Toks<TN>& x, int64_t bi, __m256* acc) {
    __m256i scb;
    __m256 fmins;
    k4_scales(b, scb, fmins);
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    __m256i isum[TN];
    zero<TN>(isum);
    for (int s = 0; s < 2; ++s) {
      const __m256i q0 = loadu(b + blk::q4_k::qs + 64 * s), q1 = loadu(b + blk::q4_k::qs + 64 * s + 32);
      __m256i v0 = _mm256_and_si256(q0, m4), v1 = _mm256_and_si256(_mm256_srli_epi16(q0, 4), m4);
      __m256i v2 = _mm256_and_si256(q1, m4), v3 = _mm256_and_si256(_mm256_srli_epi16(q1, 4), m4);
      tr4x64(v0, v1, v2, v3);
      dot4<TN>(v0, v1, v2, v3, shuffle(scb, kCtl.quad[s]), x, 256 * bi + 128 * s, isum);
    }
    fold_fmin<TN>(isum, fmins, f16(b + blk::q4_k::d), x, bi, acc);
  }
};

struct Q5K {
  static constexpr int kBytes = blk::q5_k::size;
  template <int TN>
  static inline void block(const u8* b, const Toks<TN>& x, int64_t bi, __m256* acc) {
    static_assert(blk::q5_k::scales == blk::q4_k::scales && blk::q5_k::dmin == blk::q4_k::dmin);
    __m256i scb;
    __m256 fmins;
    k4_scales(b, scb, fmins);
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    const __m256i hb = loadu(b + blk::q5_k::qh);  // bit j of byte l: 5th bit of element 32j + l
    const u8* qs = b + blk::q5_k::qs;
    __m256i isum[TN];
    zero<TN>(isum);
    {
      const __m256i q0 = loadu(qs), q1 = loadu(qs + 32);
      __m256i v0 = _mm256_or_si256(_mm256_and_si256(q0, m4), bit_to<0, 4>(hb));
      __m256i v1 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q0, 4), m4), bit_to<1, 4>(hb));
      __m256i v2 = _mm256_or_si256(_mm256_and_si256(q1, m4), bit_to<2, 4>(hb));
      __m256i v3 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q1, 4), m4), bit_to<3, 4>(hb));
      tr4x64(v0, v1, v2, v3);
      dot4<TN>(v0, v1, v2, v3, shuffle(scb, kCtl.quad[0]), x, 256 * bi, isum);
    }
    {
      const __m256i q0 = loadu(qs + 64), q1 = loadu(qs + 96);
      __m256i v0 = _mm256_or_si256(_mm256_and_si256(q0, m4), bit_to<4, 4>(hb));
      __m256i v1 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q0, 4), m4), bit_to<5, 4>(hb));
      __m256i v2 = _mm256_or_si256(_mm256_and_si256(q1, m4), bit_to<6, 4>(hb));
      __m256i v3 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q1, 4), m4), bit_to<7, 4>(hb));
      tr4x64(v0, v1, v2, v3);
      dot4<TN>(v0, v1, v2, v3, shuffle(scb, kCtl.quad[1]), x, 256 * bi + 128, isum);
    }
    fold_fmin<TN>(isum, fmins, f16(b + blk::q5_k::d), x, bi, acc);
  }
};

struct Q6K {
  static constexpr int kBytes = blk::q6_k::size;
  template <int TN>
  static inline void block(const u8* b, const Toks<TN>& x, int64_t bi, __m256* acc) {
    const __m256i sc = _mm256_cvtepi8_epi16(loadu128(b + blk::q6_k::scales));
    const __m256i mins = _mm256_slli_epi16(sc, 5);  // codes are stored +32
    const __m256i m4 = _mm256_set1_epi8(0x0f), m30 = _mm256_set1_epi8(0x30);
    __m256i isum[TN];
    zero<TN>(isum);
    for (int h = 0; h < 2; ++h) {
      const __m256i l0 = loadu(b + blk::q6_k::ql + 64 * h), l1 = loadu(b + blk::q6_k::ql + 64 * h + 32);
      const __m256i hb = loadu(b + blk::q6_k::qh + 32 * h);
      // Element 32k + l: low nibble of l0 (k=0), l1 (k=1), high nibble of l0 (k=2), l1 (k=3);
      // top two bits at bit 2k of hb.
      dot_pairs<TN>(sc, h, _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_and_si256(_mm256_slli_epi16(hb, 4), m30)),
                    _mm256_or_si256(_mm256_and_si256(l1, m4), _mm256_and_si256(_mm256_slli_epi16(hb, 2), m30)),
                    _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4), _mm256_and_si256(hb, m30)),
                    _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                                    _mm256_and_si256(_mm256_srli_epi16(hb, 2), m30)),
                    x, 256 * bi + 128 * h, isum);
    }
    fold_offset<TN>(isum, mins, f16(b + blk::q6_k::d), x, bi, acc);
  }
};

// Tokens per pass over a row: enough to amortize decoding the weights over many tokens,
// few enough that the integer accumulators stay in registers (4..16 measured within noise
// of each other on Zen 3).
// (row_groups.hpp walks the tokens in these groups.)
template <class K>
struct Groups {
  static constexpr int kGroup = 8;
  template <int TN>
  static void run(const Args& a, const u8* wr, int64_t r, int64_t t) {
    row_group<K, TN>(a, wr, r, t);
  }
};

}  // namespace

RowsFn avx2_rows_qk(DType t) {
  switch (t) {
    case DType::Q2_K: return rows_by_groups<Groups<Q2K>>;
    case DType::Q3_K: return rows_by_groups<Groups<Q3K>>;
    case DType::Q4_K: return rows_by_groups<Groups<Q4K>>;
    case DType::Q5_K: return rows_by_groups<Groups<Q5K>>;
    case DType::Q6_K: return rows_by_groups<Groups<Q6K>>;
    default: return nullptr;
  }
}

}  // namespace tandem::kernels::cpu::mm
