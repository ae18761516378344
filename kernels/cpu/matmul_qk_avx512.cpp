// AVX-512 VNNI matmul kernels for the K-quants (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K).
//
// A 256-element block is decoded into four 512-bit vectors of 64 unsigned codes, each
// spanning two 32-element chunks of the block, and four matching vectors of int16 group
// scales (one per maddubs lane). Per token and vector: vpmaddubsw (u8 x s8 -> int16 pair
// sums) and vpdpwssd (int16 x scale, summed into int32 lanes): the whole block costs a
// token 4 + 4 instructions, against 8 + 4 madds and adds with AVX2. The chunk order each
// type decodes most cheaply in is the order its activations are stored in (see kOrder and
// quant_for); sums, bsums and fsums stay in natural order. The integer block sum then
// meets the block and activation scales and the mins exactly as in the AVX2 kernels.
//
// Every token's arithmetic is the same sequence whatever the group size.
#include <cstring>

#include "kernels/cpu/matmul_impl.hpp"
#include "kernels/cpu/quant_blocks.hpp"
#include "kernels/cpu/row_groups.hpp"
#include "kernels/cpu/simd_avx512.hpp"
#include "kernels/cpu/matmul_qk_common.hpp"
#include "kernels/cpu/matmul_qk_avx512_order.hpp"

// Float rounding must be exactly what is written (no a*b+c contraction), the same for every
// token-group size: SIMD kernel files are compiled with -ffp-contract=off (kernels/CMakeLists.txt).

namespace tandem::kernels::cpu::mm::TANDEM_AVX512_NS {
namespace {

using namespace avx2;
using namespace avx512;
using namespace qk;
using u8 = uint8_t;

// Chunk orders (matmul_qk_avx512_order.hpp): code vector k holds natural chunks order[2k]
// (low half) and order[2k+1].
using qk512::kCrumbs;
using qk512::kNatural;
using qk512::kNibbles;

// vpermw controls that spread group scales (int16, natural group order) over the 32 lanes
// of a code vector's maddubs result: lane i covers codes 2i, 2i+1 of the vector.
struct ScaleIdx {
  alignas(64) int16_t v[4][32];
  constexpr ScaleIdx(const int* order, int group_size) : v() {
    for (int k = 0; k < 4; ++k)
      for (int i = 0; i < 32; ++i) {
        const int chunk = order[2 * k + i / 16], elem = 32 * chunk + 2 * (i % 16);
        v[k][i] = static_cast<int16_t>(elem / group_size);
      }
  }
};
constexpr ScaleIdx kIdxNib32(kNibbles, 32);
constexpr ScaleIdx kIdxCrumb16(kCrumbs, 16);
constexpr ScaleIdx kIdxNat16(kNatural, 16);

static inline __m512i spread(const ScaleIdx& idx, int k, __m512i sc) {
  return _mm512_permutexvar_epi16(_mm512_load_si512(idx.v[k]), sc);
}
static inline __m512i widen(__m256i v) { return _mm512_inserti64x4(_mm512_setzero_si512(), v, 0); }

// Byte-select masks for the extra code bit of chunk pairs: byte = 1 << bit in each half.
static inline __m512i bit_sel(int lo_bit, int hi_bit) {
  return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi8(static_cast<char>(1 << lo_bit))),
                            _mm256_set1_epi8(static_cast<char>(1 << hi_bit)), 1);
}

// Integer block sums of every token: sum over the 4 code vectors of scale * (code . x).
// Lane bounds: maddubs pair sums at most 2*63*127 = 16002 (no saturation).
template <int TN>
static inline void block_dots(const __m512i* v, const __m512i* sc, const Toks<TN>& x, int64_t bi, __m256i* isum) {
  #pragma GCC unroll 8
  for (int t = 0; t < TN; ++t) {
    const int8_t* q = x.q[t] + 256 * bi;
    __m512i s = _mm512_setzero_si512();
    for (int k = 0; k < 4; ++k) s = _mm512_dpwssd_epi32(s, _mm512_maddubs_epi16(v[k], loadu512(q + 64 * k)), sc[k]);
    isum[t] = fold512(s);
  }
}

struct Q2K {
  static constexpr int kBytes = blk::q2_k::size;
  static constexpr const int* kOrder = kCrumbs;
  template <int TN>
  static inline void block(const u8* b, const Toks<TN>& x, int64_t bi, __m256* acc) {
    const __m128i s = loadu128(b + blk::q2_k::scales);
    const __m128i m4 = _mm_set1_epi8(0x0f);
    const __m512i sc = widen(_mm256_cvtepu8_epi16(_mm_and_si128(s, m4)));
    const __m256i mins = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(s, 4), m4));
    const __m512i q = loadu512(b + blk::q2_k::qs), m3 = _mm512_set1_epi8(3);
    __m512i v[4], scv[4];
    for (int j = 0; j < 4; ++j) {  // vector j: bits 2j of qs (chunk j low half, 4+j high)
      v[j] = _mm512_and_si512(_mm512_srli_epi16(q, 2 * j), m3);
      scv[j] = spread(kIdxCrumb16, j, sc);
    }
    __m256i isum[TN];
    block_dots<TN>(v, scv, x, bi, isum);
    fold_imin<TN>(isum, mins, f16(b + blk::q2_k::d), f16(b + blk::q2_k::dmin), x, bi, acc);
  }
};

struct Q3K {
  static constexpr int kBytes = blk::q3_k::size;
  static constexpr const int* kOrder = kCrumbs;
  template <int TN>
  static inline void block(const u8* b, const Toks<TN>& x, int64_t bi, __m256* acc) {
    uint32_t sw[4];
    blk::unpack_q3k_scales(b + blk::q3_k::scales, sw);
    const __m256i sc16 = _mm256_sub_epi16(
        _mm256_cvtepu8_epi16(_mm_set_epi32(static_cast<int>(sw[3]), static_cast<int>(sw[2]),
                                           static_cast<int>(sw[1]), static_cast<int>(sw[0]))),
        _mm256_set1_epi16(32));
    const __m512i sc = widen(sc16);
    const __m256i mins = _mm256_slli_epi16(sc16, 2);  // codes are stored +4
    const __m512i q = loadu512(b + blk::q3_k::qs), m3 = _mm512_set1_epi8(3);
    const __m512i hm = _mm512_broadcast_i64x4(loadu(b + blk::q3_k::hmask));
    __m512i v[4], scv[4];
    for (int j = 0; j < 4; ++j) {  // chunk c = 4h + j: bits 2j of qs[32h + l], bit c of hmask[l]
      const __mmask64 hi = _mm512_test_epi8_mask(hm, bit_sel(j, 4 + j));
      const __m512i lo2 = _mm512_and_si512(_mm512_srli_epi16(q, 2 * j), m3);
      v[j] = _mm512_mask_add_epi8(lo2, hi, lo2, _mm512_set1_epi8(4));
      scv[j] = spread(kIdxCrumb16, j, sc);
    }
    __m256i isum[TN];
    block_dots<TN>(v, scv, x, bi, isum);
    fold_offset<TN>(isum, mins, f16(b + blk::q3_k::d), x, bi, acc);
  }
};

// Q4_K / Q5_K scales: int16 in the low lanes; mins times dmin as 8 floats.
static inline void k4_scales(const u8* b, __m512i& sc, __m256& fmins) {
  const blk::K4Scales k = blk::unpack_k4_scales(b + blk::q4_k::scales);
  const __m128i s8 = _mm_cvtepu8_epi16(
      _mm_cvtsi64_si128(static_cast<long long>(k.sc[0] | (static_cast<uint64_t>(k.sc[1]) << 32))));
  sc = _mm512_inserti32x4(_mm512_setzero_si512(), s8, 0);
  const __m128i mn = _mm_cvtsi64_si128(static_cast<long long>(k.mn[0] | (static_cast<uint64_t>(k.mn[1]) << 32)));
  fmins = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(mn)), _mm256_set1_ps(f16(b + blk::q4_k::dmin)));
}

// Four code vectors of nibbles: qs bytes 0-63 low / high nibbles, then 64-127.
static inline void nibble_vectors(const u8* qs, __m512i* v) {
  const __m512i m4 = _mm512_set1_epi8(0x0f);
  const __m512i z0 = loadu512(qs), z1 = loadu512(qs + 64);
  v[0] = _mm512_and_si512(z0, m4);
  v[1] = _mm512_and_si512(_mm512_srli_epi16(z0, 4), m4);
  v[2] = _mm512_and_si512(z1, m4);
  v[3] = _mm512_and_si512(_mm512_srli_epi16(z1, 4), m4);
}

// Q4_K, and Q5_K (the same block with a fifth bit per code and its bits in qh).
template <bool kFifth>
struct K4 {
  static_assert(blk::q5_k::scales == blk::q4_k::scales && blk::q5_k::dmin == blk::q4_k::dmin &&
                blk::q5_k::d == blk::q4_k::d);
  static constexpr int kBytes = kFifth ? blk::q5_k::size : blk::q4_k::size;
  static constexpr const int* kOrder = kNibbles;
  template <int TN>
  static inline void block(const u8* b, const Toks<TN>& x, int64_t bi, __m256* acc) {
    __m512i sc;
    __m256 fmins;
    k4_scales(b, sc, fmins);
    __m512i v[4], scv[4];
    nibble_vectors(b + (kFifth ? blk::q5_k::qs : blk::q4_k::qs), v);
    // Bit c of qh[l] is the fifth bit of element 32c + l.
    __m512i hb = _mm512_setzero_si512();
    if constexpr (kFifth) hb = _mm512_broadcast_i64x4(loadu(b + blk::q5_k::qh));
    for (int k = 0; k < 4; ++k) {
      if constexpr (kFifth) {
        const __mmask64 hi = _mm512_test_epi8_mask(hb, bit_sel(kNibbles[2 * k], kNibbles[2 * k + 1]));
        v[k] = _mm512_mask_add_epi8(v[k], hi, v[k], _mm512_set1_epi8(0x10));
      }
      scv[k] = spread(kIdxNib32, k, sc);
    }
    __m256i isum[TN];
    block_dots<TN>(v, scv, x, bi, isum);
    fold_fmin<TN>(isum, fmins, f16(b + blk::q4_k::d), x, bi, acc);
  }
};
using Q4K = K4<false>;
using Q5K = K4<true>;

struct Q6K {
  static constexpr int kBytes = blk::q6_k::size;
  static constexpr const int* kOrder = kNatural;
  template <int TN>
  static inline void block(const u8* b, const Toks<TN>& x, int64_t bi, __m256* acc) {
    const __m256i sc16 = _mm256_cvtepi8_epi16(loadu128(b + blk::q6_k::scales));
    const __m512i sc = widen(sc16);
    const __m256i mins = _mm256_slli_epi16(sc16, 5);  // codes are stored +32
    const __m512i m4 = _mm512_set1_epi8(0x0f), m30 = _mm512_set1_epi8(0x30);
    // 16-bit shift counts: 4 | 2 and 0 | 2 in the low | high halves.
    const __m512i shl = _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(2), 1);
    const __m512i shr = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(2), 1);
    __m512i v[4], scv[4];
    for (int h = 0; h < 2; ++h) {
      // Element 32k + l of half h: nibble of ql (low: k = 0, 1; high: k = 2, 3; ql bytes
      // 0-31 for even k, 32-63 for odd) and bits 2k, 2k+1 of qh[l] on top.
      const __m512i l = loadu512(b + blk::q6_k::ql + 64 * h);
      const __m512i hb = _mm512_broadcast_i64x4(loadu(b + blk::q6_k::qh + 32 * h));
      v[2 * h] = _mm512_or_si512(_mm512_and_si512(l, m4), _mm512_and_si512(_mm512_sllv_epi16(hb, shl), m30));
      v[2 * h + 1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(l, 4), m4),
                                     _mm512_and_si512(_mm512_srlv_epi16(hb, shr), m30));
    }
    for (int k = 0; k < 4; ++k) scv[k] = spread(kIdxNat16, k, sc);
    __m256i isum[TN];
    block_dots<TN>(v, scv, x, bi, isum);
    fold_offset<TN>(isum, mins, f16(b + blk::q6_k::d), x, bi, acc);
  }
};

// (row_groups.hpp walks the tokens in these groups.) Weights are prefetched 4 KB ahead
// here, 2 KB more than the AVX2 kernels, as in the packed q32 kernel (2 KB was tuned on
// Zen 3; the 1.5B's T(1) on Zen 4, five alternating runs: median 30.6 ms against 31.9 ms).
template <class K>
struct Groups {
  static constexpr int kGroup = 8;
  template <int TN>
  static void run(const Args& a, const u8* wr, int64_t r, int64_t t) {
    row_group<K, TN, 2048>(a, wr, r, t);
  }
};

// Activations in natural order (avx2_quant_qk), then each block's 32-byte chunks moved to
// the order the type's kernel reads.
template <const int* Order>
void quant_ordered(const float* xf, const ActLayout& l, uint8_t* row) {
  avx2_quant_qk(xf, l, row);
  u8 tmp[256];
  for (int64_t b = 0; b < l.nb; ++b) {
    u8* q = row + 256 * b;
    std::memcpy(tmp, q, 256);
    for (int i = 0; i < 8; ++i) std::memcpy(q + 32 * i, tmp + 32 * Order[i], 32);
  }
}
// The activation quantizer of kernel K: its chunk order (natural needs no reordering).
template <class K>
QuantFn quant_for() {
  if constexpr (K::kOrder == kNatural) return avx2_quant_qk;
  else return quant_ordered<K::kOrder>;
}

}  // namespace

RowsFn rows_qk(DType t) {
  switch (t) {
    case DType::Q2_K: return rows_by_groups<Groups<Q2K>>;
    case DType::Q3_K: return rows_by_groups<Groups<Q3K>>;
    case DType::Q4_K: return rows_by_groups<Groups<Q4K>>;
    case DType::Q5_K: return rows_by_groups<Groups<Q5K>>;
    case DType::Q6_K: return rows_by_groups<Groups<Q6K>>;
    default: return nullptr;
  }
}

QuantFn quant_qk_for(DType t) {
  switch (t) {
    case DType::Q2_K: return quant_for<Q2K>();
    case DType::Q3_K: return quant_for<Q3K>();
    case DType::Q4_K: return quant_for<Q4K>();
    case DType::Q5_K: return quant_for<Q5K>();
    case DType::Q6_K: return quant_for<Q6K>();
    default: return nullptr;
  }
}

}  // namespace tandem::kernels::cpu::mm::TANDEM_AVX512_NS
