// AVX2 matmul kernels for the 32-element block types (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0).
//
// Each weight block is decoded once into 32 unsigned codes (Q8_0: signed, used with the
// sign trick) and multiplied with every token of a group of up to 4: maddubs + madd give
// int32 partial sums, converted and scaled by d_w*d_x into a float accumulator. The
// weight's offset (-8, -16) or min m is applied through s = d_x*sum(q_x), which comes with
// the activations: off += c * s with c = -8*d_w, -16*d_w or m.
//
// madd is the costly instruction here, so the 4- and 5-bit types take blocks in pairs
// (A, B): one vector holds elements 0-15 of A and of B, another 16-31 of both (that is how
// the nibbles sit in two consecutive blocks, and the activations are stored in the same
// order by avx2_quant_q32_for), so both maddubs results add up in int16 under one madd
// whose low lanes are A's sums and high lanes B's.
//
// Rows come in the file's layout (FileRow) or packed (PackedRow, pack_q32.hpp), through the
// same arithmetic in the same order: the same bits.
#include "kernels/cpu/matmul_impl.hpp"
#include "kernels/cpu/pack_q32.hpp"
#include "kernels/cpu/quant_blocks.hpp"
#include "kernels/cpu/row_groups.hpp"
#include "kernels/cpu/simd_avx2.hpp"

// Float rounding must be exactly what is written (no a*b+c contraction), the same for every
// token-group size: SIMD kernel files are compiled with -ffp-contract=off (kernels/CMakeLists.txt).

namespace tandem::kernels::cpu::mm {
namespace {

using namespace avx2;
using u8 = uint8_t;

// 16 packed nibbles -> 32 codes: low nibbles are elements 0-15, high nibbles 16-31.
static inline __m256i nibbles(const u8* p) {
  const __m128i q = loadu128(p);
  return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(q, 4), q), _mm256_set1_epi8(0x0f));
}

// Byte e of the result is 0x10 where bit e of the 32-bit words is set: bits 0-31 of qh for
// one block; for a pair, bits 0-15 (lo) or 16-31 (hi) of A's word in the low half and of
// B's in the high half.
static inline __m256i bits_to_0x10(__m256i words, __m256i which_byte) {
  const __m256i bit = _mm256_set1_epi64x(static_cast<long long>(0x8040201008040201ull));
  const __m256i spread = _mm256_shuffle_epi8(words, which_byte);
  return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit), _mm256_set1_epi8(0x10));
}
static inline __m256i high_bits(uint32_t qh) {
  return bits_to_0x10(_mm256_set1_epi32(static_cast<int>(qh)),
                      _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0));
}
static inline void high_bits2(uint32_t qa, uint32_t qb, __m256i& lo, __m256i& hi) {
  // Two broadcasts (loads from the blocks) and a blend, rather than moving each word
  // through a general register and shuffling.
  const __m256i w = _mm256_blend_epi32(_mm256_set1_epi32(static_cast<int>(qa)), _mm256_set1_epi32(static_cast<int>(qb)), 0xF0);
  lo = bits_to_0x10(w, _mm256_set_epi64x(0x0101010101010101, 0, 0x0101010101010101, 0));
  hi = bits_to_0x10(w, _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0303030303030303,
                                         0x0202020202020202));
}
// Packed nibbles of blocks A and B -> (A 0-15 | B 0-15) and (A 16-31 | B 16-31).
// (The nibble bytes of A then B, in one vector: what a packed row stores per pair.)
static inline void split_nibbles(__m256i q, __m256i& lo, __m256i& hi) {
  const __m256i m4 = _mm256_set1_epi8(0x0f);
  lo = _mm256_and_si256(q, m4);
  hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
}
static inline void nibbles2(const u8* qa, const u8* qb, __m256i& lo, __m256i& hi) {
  split_nibbles(_mm256_set_m128i(loadu128(qb), loadu128(qa)), lo, hi);
}

// The f16 at byte offset `off` of n (<= 8) consecutive blocks, as 8 floats (zeros past n).
// Assembled in general registers: storing 16-bit values and reloading them as a vector
// would stall on store forwarding.
template <int Bytes>
static inline uint64_t f16x4(const u8* b, int n) {
  uint64_t w = 0;
  for (int j = 0; j < 4; ++j)
    if (j < n) w |= static_cast<uint64_t>(blk::u16_at(b + j * Bytes)) << (16 * j);
  return w;
}
template <int Bytes>
static inline __m256 f16x8(const u8* b, int off, int n) {
  const uint64_t lo = f16x4<Bytes>(b + off, n), hi = f16x4<Bytes>(b + 4 * Bytes + off, n - 4);
  return _mm256_cvtph_ps(_mm_set_epi64x(static_cast<long long>(hi), static_cast<long long>(lo)));
}
// 8 floats from p, or the first n of them and zeros (tail of a row; rare).
static inline __m256 load8(const float* p, int n) {
  if (n == 8) return _mm256_loadu_ps(p);
  const __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  return _mm256_maskload_ps(p, mask);
}

// Codes of the 4-bit types (nibbles at byte Qs of a block) and of the 5-bit ones (plus
// their fifth bits, a 32-bit word at Qh).
template <int Bytes, int Qs, int Qh = -1>
struct NibbleCodes {
  static inline __m256i codes(const u8* b) {
    const __m256i v = nibbles(b + Qs);
    if constexpr (Qh < 0) return v;
    else return _mm256_or_si256(v, high_bits(blk::u32_at(b + Qh)));
  }
  static inline void codes2(const u8* b, __m256i& lo, __m256i& hi) {
    nibbles2(b + Qs, b + Bytes + Qs, lo, hi);
    if constexpr (Qh >= 0) {
      __m256i hl, hh;
      high_bits2(blk::u32_at(b + Qh), blk::u32_at(b + Bytes + Qh), hl, hh);
      lo = _mm256_or_si256(lo, hl);
      hi = _mm256_or_si256(hi, hh);
    }
  }
};

// Per type: the codes of a block (file layout), where its scale (and min) is, and the
// coefficient c of the activation sums (offset -8/-16 times d, or the min m) for 8 blocks.
struct Q4_0 : NibbleCodes<blk::q4_0::size, blk::q4_0::qs> {
  static constexpr DType kType = DType::Q4_0;
  static constexpr int kBytes = blk::q4_0::size, kD = blk::q4_0::d, kM = -1;
  static constexpr bool kSigned = false, kOffset = true, kPaired = true, kHasQh = false;
  static inline __m256 c8(__m256 d, __m256) { return _mm256_mul_ps(d, _mm256_set1_ps(-8.0f)); }
};
struct Q4_1 : NibbleCodes<blk::q4_1::size, blk::q4_1::qs> {
  static constexpr DType kType = DType::Q4_1;
  static constexpr int kBytes = blk::q4_1::size, kD = blk::q4_1::d, kM = blk::q4_1::m;
  static constexpr bool kSigned = false, kOffset = true, kPaired = true, kHasQh = false;
  static inline __m256 c8(__m256, __m256 m) { return m; }
};
struct Q5_0 : NibbleCodes<blk::q5_0::size, blk::q5_0::qs, blk::q5_0::qh> {
  static constexpr DType kType = DType::Q5_0;
  static constexpr int kBytes = blk::q5_0::size, kD = blk::q5_0::d, kM = -1;
  static constexpr bool kSigned = false, kOffset = true, kPaired = true, kHasQh = true;
  static inline __m256 c8(__m256 d, __m256) { return _mm256_mul_ps(d, _mm256_set1_ps(-16.0f)); }
};
struct Q5_1 : NibbleCodes<blk::q5_1::size, blk::q5_1::qs, blk::q5_1::qh> {
  static constexpr DType kType = DType::Q5_1;
  static constexpr int kBytes = blk::q5_1::size, kD = blk::q5_1::d, kM = blk::q5_1::m;
  static constexpr bool kSigned = false, kOffset = true, kPaired = true, kHasQh = true;
  static inline __m256 c8(__m256, __m256 m) { return m; }
};
struct Q8_0 {
  static constexpr DType kType = DType::Q8_0;
  static constexpr int kBytes = blk::q8_0::size, kD = blk::q8_0::d, kM = -1;
  static constexpr bool kSigned = true, kOffset = false, kPaired = false;
  static inline __m256i codes(const u8* b) { return loadu(b + blk::q8_0::qs); }
  static inline void codes2(const u8*, __m256i&, __m256i&) {}
  static inline __m256 c8(__m256, __m256) { return _mm256_setzero_ps(); }
};

// Where row_group finds a block's fields: in the blocks of a file row...
template <class K>
struct FileRow {
  const u8* w;
  FileRow(const u8* wr, int64_t) : w(wr) {}
  __m256 d8(int64_t b0, int n) const { return f16x8<K::kBytes>(w + b0 * K::kBytes, K::kD, n); }
  __m256 m8(int64_t b0, int n) const { return f16x8<K::kBytes>(w + b0 * K::kBytes, K::kM, n); }
  void codes2(int64_t bi, __m256i& lo, __m256i& hi) const { K::codes2(w + bi * K::kBytes, lo, hi); }
  __m256i codes(int64_t bi) const { return K::codes(w + bi * K::kBytes); }
  void prefetch(int64_t b0, int n) const { prefetch_ahead(w + b0 * K::kBytes, n * K::kBytes); }
};

// 8 f16 from p as floats, zeros past n. Reading all 16 bytes stays inside the row: an
// array of f16 scales (or mins) at block b0 is followed by at least 16 more bytes of the row
// (every block is at least 18 bytes, its scale 2 of them).
static inline __m256 load_f16x8(const u8* p, int n) {
  const __m256 v = _mm256_cvtph_ps(loadu128(p));
  if (n == 8) return v;
  const __m256i keep = _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  return _mm256_and_ps(v, _mm256_castsi256_ps(keep));
}

// ...or in the field arrays of a packed row.
template <class K>
struct PackedRow {
  const u8* w;
  PackedQ32 p;
  PackedRow(const u8* wr, int64_t nb) : w(wr), p(packed_q32(K::kType, nb)) {}
  __m256 d8(int64_t b0, int n) const { return load_f16x8(w + p.d + 2 * b0, n); }
  __m256 m8(int64_t b0, int n) const { return load_f16x8(w + p.m + 2 * b0, n); }
  // A pair's 32 nibble bytes are the file pair's (A's then B's): the lo/hi vectors of
  // nibbles2 in one load. Its fifth bits: 32-bit words A 0-15 | B 0-15, A 16-31 | B 16-31.
  void codes2(int64_t bi, __m256i& lo, __m256i& hi) const {
    split_nibbles(loadu(w + p.codes + 16 * bi), lo, hi);
    if constexpr (K::kHasQh) {
      lo = _mm256_or_si256(lo, high_bits(blk::u32_at(w + p.qh + 4 * bi)));
      hi = _mm256_or_si256(hi, high_bits(blk::u32_at(w + p.qh + 4 * bi + 4)));
    }
  }
  __m256i codes(int64_t bi) const {
    if constexpr (K::kSigned) {
      return loadu(w + p.codes + 32 * bi);
    } else {
      const __m256i v = nibbles(w + p.codes + 16 * bi);
      if constexpr (K::kHasQh) return _mm256_or_si256(v, high_bits(blk::u32_at(w + p.qh + 4 * bi)));
      return v;
    }
  }
  void prefetch(int64_t b0, int n) const {
    prefetch_ahead(w + p.codes + b0 * p.code_bytes, n * p.code_bytes);
  }
};

// Blocks are taken 8 at a time: their 8 scale products d_w*d_x are formed with one
// multiply per token, and each block's lane is picked out with a permute. The offset or
// min term of 8 blocks is one FMA per token.
template <class K, template <class> class Row, int TN>
static void row_group(const Args& a, const u8* wr, int64_t r, int64_t t0) {
  const ActLayout& l = a.xl;
  const Row<K> w(wr, l.nb);
  const int8_t* xq[TN];
  const float* xd[TN];
  const float* xs[TN];
  for (int t = 0; t < TN; ++t) {
    const u8* row = a.xq + static_cast<size_t>(t0 + t) * l.row_bytes;
    xq[t] = act_q(row);
    xd[t] = act_d(row, l);
    xs[t] = act_s(row, l);
  }
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc[TN], off[TN];
  for (int t = 0; t < TN; ++t) acc[t] = off[t] = _mm256_setzero_ps();
  alignas(32) float prod[TN][8];
  // Lane order of a full chunk's block sums after the hadd tree below: blocks 0 2 4 6 1 3 5 7.
  const __m256i tree_order = _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7);
  for (int64_t b0 = 0; b0 < l.nb; b0 += 8) {
    const int nblk = l.nb - b0 < 8 ? static_cast<int>(l.nb - b0) : 8;
    w.prefetch(b0, nblk);
    const __m256 dw = w.d8(b0, nblk);
    __m256 mw = _mm256_setzero_ps();
    if constexpr (K::kM >= 0) mw = w.m8(b0, nblk);
    const __m256 cw = K::c8(dw, mw);
    __m256 ptree[TN];
    for (int t = 0; t < TN; ++t) {
      const __m256 pr = _mm256_mul_ps(dw, load8(xd[t] + b0, nblk));
      _mm256_store_ps(prod[t], pr);
      ptree[t] = _mm256_permutevar8x32_ps(pr, tree_order);
      if constexpr (K::kOffset) off[t] = _mm256_fmadd_ps(cw, load8(xs[t] + b0, nblk), off[t]);
    }
    int j = 0;
    if constexpr (K::kPaired) {
      if (nblk == 8) {
        // A full chunk: the four pairs' int32 partial sums are reduced to one sum per block
        // with three hadds, then scaled and accumulated with one FMA per token (instead of a
        // lane permute and an FMA per pair).
        __m256i h01[TN];
        for (int jp = 0; jp < 8; jp += 4) {
          __m256i lo0, hi0, lo1, hi1;
          w.codes2(b0 + jp, lo0, hi0);
          w.codes2(b0 + jp + 2, lo1, hi1);
          for (int t = 0; t < TN; ++t) {
            const int8_t* q = xq[t] + 32 * (b0 + jp);
            const __m256i p0 =
                _mm256_madd_epi16(_mm256_add_epi16(pair_dot(lo0, loadu(q)), pair_dot(hi0, loadu(q + 32))), ones);
            const __m256i p1 =
                _mm256_madd_epi16(_mm256_add_epi16(pair_dot(lo1, loadu(q + 64)), pair_dot(hi1, loadu(q + 96))), ones);
            const __m256i h = _mm256_hadd_epi32(p0, p1);
            if (jp == 0) {
              h01[t] = h;
            } else {
              const __m256 f = _mm256_cvtepi32_ps(_mm256_hadd_epi32(h01[t], h));
              acc[t] = _mm256_fmadd_ps(f, ptree[t], acc[t]);
            }
          }
        }
        j = 8;
      }
      // Pairs never straddle a chunk: chunks start at even blocks. 5-bit codes: each
      // int16 lane sums at most 2 * 2*31*127 = 15748.
      for (; j + 2 <= nblk; j += 2) {
        const int64_t bi = b0 + j;
        __m256i lo, hi;
        w.codes2(bi, lo, hi);
        const __m256i lanes = _mm256_setr_epi32(j, j, j, j, j + 1, j + 1, j + 1, j + 1);
        for (int t = 0; t < TN; ++t) {
          const int8_t* q = xq[t] + 32 * bi;
          const __m256i p = _mm256_add_epi16(pair_dot(lo, loadu(q)), pair_dot(hi, loadu(q + 32)));
          const __m256 f = _mm256_cvtepi32_ps(_mm256_madd_epi16(p, ones));
          acc[t] = _mm256_fmadd_ps(f, _mm256_permutevar8x32_ps(_mm256_load_ps(prod[t]), lanes), acc[t]);
        }
      }
    }
    for (; j < nblk; ++j) {  // Q8_0, and the odd last block of a row (stored unpaired)
      const int64_t bi = b0 + j;
      const __m256i u = w.codes(bi);
      const __m256i au = K::kSigned ? _mm256_sign_epi8(u, u) : u;  // |u| for the sign trick
      for (int t = 0; t < TN; ++t) {
        __m256i xv = loadu(xq[t] + 32 * bi);
        if constexpr (K::kSigned) xv = _mm256_sign_epi8(xv, u);
        const __m256i s = _mm256_madd_epi16(pair_dot(au, xv), ones);
        acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_broadcast_ss(&prod[t][j]), acc[t]);
      }
    }
  }
  for (int t = 0; t < TN; ++t) a.y[(t0 + t) * a.ldy + r] = hsum(acc[t]) + hsum(off[t]);
}

// Tokens per pass over a row (4 and 8 measured the same on Zen 3; 4 needs fewer registers).
// (row_groups.hpp walks the tokens in these groups.)
template <class K, template <class> class Row>
struct Groups {
  static constexpr int kGroup = 4;
  template <int TN>
  static void run(const Args& a, const u8* wr, int64_t r, int64_t t) {
    row_group<K, Row, TN>(a, wr, r, t);
  }
};

// The kernels of every type, for rows in one layout.
template <template <class> class Row>
RowsFn rows_in(DType t) {
  switch (t) {
    case DType::Q4_0: return rows_by_groups<Groups<Q4_0, Row>>;
    case DType::Q4_1: return rows_by_groups<Groups<Q4_1, Row>>;
    case DType::Q5_0: return rows_by_groups<Groups<Q5_0, Row>>;
    case DType::Q5_1: return rows_by_groups<Groups<Q5_1, Row>>;
    case DType::Q8_0: return rows_by_groups<Groups<Q8_0, Row>>;
    default: return nullptr;
  }
}

}  // namespace

RowsFn avx2_rows_q32(DType t) { return rows_in<FileRow>(t); }
RowsFn avx2_rows_q32_packed(DType t) { return rows_in<PackedRow>(t); }

}  // namespace tandem::kernels::cpu::mm
