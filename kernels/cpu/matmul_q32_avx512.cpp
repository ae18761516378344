// AVX-512 VNNI matmul kernels for the 32-element block types (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0).
//
// Blocks are taken in pairs: one 512-bit vector holds the 64 codes of blocks A and B and
// one vpdpbusd per token multiplies them with the token's 64 int8 activations into 16 int32
// lanes (4 products each). The 4- and 5-bit types hold A 0-15, B 0-15, A 16-31, B 16-31
// (the nibbles of the two blocks' 32 bytes, as the AVX2 kernels pair them; activations in
// the same order, quant_q32_pairs), so lanes 0-3 and 8-11 are A's; Q8_0 holds A then B,
// natural. Those lanes are converted to float and accumulated with their block's scale
// product d_w*d_x, picked per lane from the 16 scale products of the current chunk of 16
// blocks (one permute); even and odd pairs of a chunk go to two accumulators. As in the
// AVX2 kernels the weight's offset or min is applied through s = d_x*sum(q_x):
// off += c * s. Signed Q8_0 codes use the sign trick (|w| times x with w's sign) since
// vpdpbusd wants u8 x s8.
//
// Rows come in the file's layout (row_group) or packed (row_group_packed, pack_q32.hpp),
// with the same arithmetic in the same order: the same bits.
#include "kernels/cpu/matmul_impl.hpp"
#include "kernels/cpu/pack_q32.hpp"
#include "kernels/cpu/quant_blocks.hpp"
#include "kernels/cpu/row_groups.hpp"
#include "kernels/cpu/simd_avx512.hpp"

// Float rounding must be exactly what is written (no a*b+c contraction), the same for every
// token-group size: SIMD kernel files are compiled with -ffp-contract=off (kernels/CMakeLists.txt).

namespace tandem::kernels::cpu::mm::TANDEM_AVX512_NS {
namespace {

using namespace avx2;
using namespace avx512;
using u8 = uint8_t;

// The f16 at byte offset `off` of n (<= 16) consecutive blocks, as 16 floats (zeros past
// n): one masked gather of the 4 bytes at each block's offset (the f16 and the two bytes
// after it, inside the same block for every field this reads), narrowed to their low 16
// bits. (Assembling them in general registers, as f16x8 in matmul_q32_avx2.cpp does, cost
// about as much as the block's dot products at M = 1.)
template <int Bytes>
static inline __m512i gather_f16x16(const u8* b, int off, int n) {
  const __m512i idx = _mm512_setr_epi32(0, Bytes, 2 * Bytes, 3 * Bytes, 4 * Bytes, 5 * Bytes, 6 * Bytes, 7 * Bytes,
                                        8 * Bytes, 9 * Bytes, 10 * Bytes, 11 * Bytes, 12 * Bytes, 13 * Bytes,
                                        14 * Bytes, 15 * Bytes);
  const __mmask16 k = n >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << n) - 1);
  return _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), k, idx, b + off, 1);
}
static inline __m512 f16x16_to_ps(__m512i w) { return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(w)); }
// 16 floats from p, or the first n of them and zeros (tail of a row: a masked load reads
// nothing past them).
static inline __m512 load16(const float* p, int n) {
  if (n >= 16) return _mm512_loadu_ps(p);
  return _mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << n) - 1), p);
}

// A pair's 32 nibble bytes (A's 16 then B's) as 64 codes in pair order: the bytes
// broadcast to both halves, low nibbles kept in the low half and high nibbles in the upper.
static inline __m512i nibble_pair(__m256i q) {
  const __m512i z = _mm512_broadcast_i64x4(q);
  return _mm512_and_si512(_mm512_mask_mov_epi16(z, 0xffff0000u, _mm512_srli_epi16(z, 4)), _mm512_set1_epi8(0x0f));
}
static inline __m512i add_fifth(__m512i v, __mmask64 k) { return _mm512_mask_add_epi8(v, k, v, _mm512_set1_epi8(0x10)); }
// One block's 16 nibble bytes (an odd last block) in natural order in the low half, zeros
// above: elements 0-15 are the low nibbles, 16-31 the high ones.
static inline __m512i nibble_one(const u8* qs) {
  const __m128i q = loadu128(qs);
  const __m256i v = _mm256_and_si256(_mm256_inserti128_si256(_mm256_castsi128_si256(q), _mm_srli_epi16(q, 4), 1),
                                     _mm256_set1_epi8(0x0f));
  return _mm512_inserti64x4(_mm512_setzero_si512(), v, 0);
}

// Codes of the 4-bit types (nibbles at byte Qs) and the 5-bit ones (plus the fifth bits,
// a 32-bit word at Qh), for a pair of blocks of a file row.
template <int Bytes, int Qs, int Qh = -1>
struct NibbleCodes {
  static constexpr bool kHasQh = Qh >= 0;
  static inline __m512i codes2(const u8* b) {
    const __m512i v =
        nibble_pair(_mm256_inserti128_si256(_mm256_castsi128_si256(loadu128(b + Qs)), loadu128(b + Bytes + Qs), 1));
    // The fifth bits in pair order: the word the packed layout stores.
    if constexpr (Qh >= 0)
      return add_fifth(v, static_cast<__mmask64>(pair_qh_word(blk::u32_at(b + Qh), blk::u32_at(b + Bytes + Qh))));
    return v;
  }
  // One block (the odd last block of a row).
  static inline __m512i codes1(const u8* b) {
    if constexpr (Qh >= 0) return add_fifth(nibble_one(b + Qs), blk::u32_at(b + Qh));
    return nibble_one(b + Qs);
  }
  // Which block of the pair (0: A, 1: B) each int32 lane's products belong to.
  static inline __m512i pair_lanes() { return _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1); }
};

struct Q4_0 : NibbleCodes<blk::q4_0::size, blk::q4_0::qs> {
  static constexpr DType kType = DType::Q4_0;
  static constexpr int kBytes = blk::q4_0::size, kD = blk::q4_0::d, kM = -1;
  static constexpr bool kSigned = false;
  static inline __m512 c16(__m512 d, __m512) { return _mm512_mul_ps(d, _mm512_set1_ps(-8.0f)); }
};
struct Q4_1 : NibbleCodes<blk::q4_1::size, blk::q4_1::qs> {
  static constexpr DType kType = DType::Q4_1;
  static constexpr int kBytes = blk::q4_1::size, kD = blk::q4_1::d, kM = blk::q4_1::m;
  static constexpr bool kSigned = false;
  static inline __m512 c16(__m512, __m512 m) { return m; }
};
struct Q5_0 : NibbleCodes<blk::q5_0::size, blk::q5_0::qs, blk::q5_0::qh> {
  static constexpr DType kType = DType::Q5_0;
  static constexpr int kBytes = blk::q5_0::size, kD = blk::q5_0::d, kM = -1;
  static constexpr bool kSigned = false;
  static inline __m512 c16(__m512 d, __m512) { return _mm512_mul_ps(d, _mm512_set1_ps(-16.0f)); }
};
struct Q5_1 : NibbleCodes<blk::q5_1::size, blk::q5_1::qs, blk::q5_1::qh> {
  static constexpr DType kType = DType::Q5_1;
  static constexpr int kBytes = blk::q5_1::size, kD = blk::q5_1::d, kM = blk::q5_1::m;
  static constexpr bool kSigned = false;
  static inline __m512 c16(__m512, __m512 m) { return m; }
};
struct Q8_0 {
  static constexpr DType kType = DType::Q8_0;
  static constexpr int kBytes = blk::q8_0::size, kD = blk::q8_0::d, kM = -1;
  static constexpr bool kSigned = true;
  static inline __m512i codes2(const u8* b) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(loadu(b + blk::q8_0::qs)), loadu(b + kBytes + blk::q8_0::qs),
                              1);
  }
  static inline __m512i codes1(const u8* b) { return _mm512_inserti64x4(_mm512_setzero_si512(), loadu(b + blk::q8_0::qs), 0); }
  static inline __m512i pair_lanes() { return _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1); }
  static inline __m512 c16(__m512, __m512) { return _mm512_setzero_ps(); }
};

// acc[t] += (codes . x_t) per int32 lane, times the scale product of the lane's block
// (lanes picks it from prod[t], the chunk's 16 products). Signed codes (Q8_0) use the sign
// trick: |w| times x with w's sign.
template <class K, int TN, class LoadX>
static inline void dot_block_lanes(__m512i u, __m512i lanes, LoadX load_x, const __m512* prod, __m512* acc) {
  __m512i au = u;
  __mmask64 neg = 0;
  if constexpr (K::kSigned) {
    au = _mm512_abs_epi8(u);
    neg = _mm512_movepi8_mask(u);
  }
  for (int t = 0; t < TN; ++t) {
    __m512i xv = load_x(t);
    if constexpr (K::kSigned) xv = _mm512_mask_sub_epi8(xv, neg, _mm512_setzero_si512(), xv);
    const __m512i s = _mm512_dpbusd_epi32(_mm512_setzero_si512(), au, xv);
    acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_permutexvar_ps(lanes, prod[t]), acc[t]);
  }
}

// Where row_group finds a chunk's fields: in the blocks of a file row, whose scales (and
// mins) are gathered one chunk ahead (a gather's latency is long: perf put about a quarter
// of the M = 1 kernel's samples on waiting for it at the start of each chunk; gathering the
// next row's first chunk at a row's end as well measured slower)...
template <class K>
struct FileRow {
  const u8* w;
  int64_t nb;
  __m512i dw_raw, mw_raw = _mm512_setzero_si512();
  int chunk_blocks(int64_t b0) const { return nb - b0 < 16 ? static_cast<int>(nb - b0) : 16; }
  FileRow(const u8* wr, int64_t nb_) : w(wr), nb(nb_) {
    dw_raw = gather_f16x16<K::kBytes>(w, K::kD, chunk_blocks(0));
    if constexpr (K::kM >= 0) mw_raw = gather_f16x16<K::kBytes>(w, K::kM, chunk_blocks(0));
  }
  void start_row() const {}
  // The scales (and mins) of the chunk at block b0, as floats; gathers the next chunk's.
  void scales(int64_t b0, int, __m512& dw, __m512& mw) {
    prefetch_ahead(w + b0 * K::kBytes, chunk_blocks(b0) * K::kBytes);
    dw = f16x16_to_ps(dw_raw);
    if constexpr (K::kM >= 0) mw = f16x16_to_ps(mw_raw);
    if (b0 + 16 < nb) {
      const u8* next = w + (b0 + 16) * K::kBytes;
      dw_raw = gather_f16x16<K::kBytes>(next, K::kD, chunk_blocks(b0 + 16));
      if constexpr (K::kM >= 0) mw_raw = gather_f16x16<K::kBytes>(next, K::kM, chunk_blocks(b0 + 16));
    }
  }
  __m512i codes2(int64_t bi) const { return K::codes2(w + bi * K::kBytes); }
  __m512i codes1(int64_t bi) const { return K::codes1(w + bi * K::kBytes); }
};

// Packed rows (pack_q32.hpp): a chunk's 16 scales in one load instead of a gather, a pair's
// codes in one 256-bit load broadcast to both halves, its fifth bits one 64-bit word.

// n (<= 16) f16 values from p as 16 floats, zeros past n (a tail chunk reads nothing past
// them). A masked load: copying the tail through the stack instead made the load wait for
// the copy's stores to retire behind the row's weight loads, a fifth of the M = 1 time.
static inline __m512 load_f16x16(const u8* p, int n) {
  if (n >= 16) return _mm512_cvtph_ps(loadu(p));
  return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(static_cast<__mmask16>((1u << n) - 1), p));
}

// Codes of blocks j, j+1 of a packed row: their 32 nibble bytes in one load and their
// fifth bits one word, already in pair order; Q8_0's 64 bytes as they are.
template <class K>
static inline __m512i packed_codes2(const u8* qs, const u8* qh) {
  if constexpr (K::kSigned) {
    return loadu512(qs);
  } else {
    const __m512i v = nibble_pair(loadu(qs));
    if constexpr (K::kHasQh) {
      uint64_t k;
      __builtin_memcpy(&k, qh, 8);
      return add_fifth(v, static_cast<__mmask64>(k));
    }
    return v;
  }
}
// The odd last block of a packed row: its codes and bits as the file stores them.
template <class K>
static inline __m512i packed_codes1(const u8* qs, const u8* qh) {
  if constexpr (K::kSigned) {
    return _mm512_inserti64x4(_mm512_setzero_si512(), loadu(qs), 0);
  } else {
    if constexpr (K::kHasQh) return add_fifth(nibble_one(qs), blk::u32_at(qh));
    return nibble_one(qs);
  }
}

// ...or in the field arrays of a packed row.
template <class K>
struct PackedRow {
  const u8* w;
  PackedQ32 p;
  int row_bytes;
  PackedRow(const u8* wr, int64_t nb) : w(wr), p(packed_q32(K::kType, nb)), row_bytes(static_cast<int>(nb) * K::kBytes) {}
  // The whole row's bytes, 4 KB ahead, at once (prefetching per chunk over the codes alone
  // left each row's scale arrays to demand misses, and 2 KB ahead was too close on Zen 4:
  // three alternating runs of the 0.5B draft, T(1) 11.4-11.7 ms against 11.9-12.5 ms; 8 KB
  // ahead gained nothing).
  void start_row() const { prefetch_ahead(w + 2048, row_bytes); }
  void scales(int64_t b0, int nblk, __m512& dw, __m512& mw) const {
    dw = load_f16x16(w + p.d + 2 * b0, nblk);
    if constexpr (K::kM >= 0) mw = load_f16x16(w + p.m + 2 * b0, nblk);
  }
  __m512i codes2(int64_t bi) const { return packed_codes2<K>(w + p.codes + bi * p.code_bytes, w + p.qh + 4 * bi); }
  __m512i codes1(int64_t bi) const { return packed_codes1<K>(w + p.codes + bi * p.code_bytes, w + p.qh + 4 * bi); }
};

// One row against a group of TN tokens, the row's fields found through Row<K>.
template <class K, template <class> class Row, int TN>
static void row_group(const Args& a, const u8* wr, int64_t r, int64_t t0) {
  const ActLayout& l = a.xl;
  Row<K> w(wr, l.nb);
  w.start_row();
  const int8_t* xq[TN];
  const float* xd[TN];
  const float* xs[TN];
  for (int t = 0; t < TN; ++t) {
    const u8* row = a.xq + static_cast<size_t>(t0 + t) * l.row_bytes;
    xq[t] = act_q(row);
    xd[t] = act_d(row, l);
    xs[t] = act_s(row, l);
  }
  // Two accumulators, even and odd pairs of a chunk, so that consecutive pairs' FMAs need
  // not wait on each other.
  __m512 acc[TN], acc2[TN], off[TN];
  for (int t = 0; t < TN; ++t) acc[t] = acc2[t] = off[t] = _mm512_setzero_ps();
  const __m512i pair_lanes = K::pair_lanes();
  for (int64_t b0 = 0; b0 < l.nb; b0 += 16) {
    const int nblk = l.nb - b0 < 16 ? static_cast<int>(l.nb - b0) : 16;
    __m512 dw, mw = _mm512_setzero_ps();
    w.scales(b0, nblk, dw, mw);
    const __m512 cw = K::c16(dw, mw);
    __m512 prod[TN];
    for (int t = 0; t < TN; ++t) {
      prod[t] = _mm512_mul_ps(dw, load16(xd[t] + b0, nblk));
      if constexpr (!K::kSigned) off[t] = _mm512_fmadd_ps(cw, load16(xs[t] + b0, nblk), off[t]);
    }
    auto pair = [&](int j, __m512* to) {
      dot_block_lanes<K, TN>(w.codes2(b0 + j), _mm512_add_epi32(pair_lanes, _mm512_set1_epi32(j)),
                             [&](int t) { return loadu512(xq[t] + 32 * (b0 + j)); }, prod, to);
    };
    int j = 0;
    for (; j + 4 <= nblk; j += 4) {
      pair(j, acc);
      pair(j + 2, acc2);
    }
    if (j + 2 <= nblk) pair(j, acc), j += 2;
    if (j < nblk)  // the odd last block of a row, in the low half
      dot_block_lanes<K, TN>(w.codes1(b0 + j), _mm512_set1_epi32(j),
                             [&](int t) { return _mm512_inserti64x4(_mm512_setzero_si512(), loadu(xq[t] + 32 * (b0 + j)), 0); },
                             prod, acc2);
  }
  for (int t = 0; t < TN; ++t) a.y[(t0 + t) * a.ldy + r] = hsum512(_mm512_add_ps(acc[t], acc2[t])) + hsum512(off[t]);
}

// Tokens per pass over a row (as the AVX2 kernels).
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

RowsFn rows_q32(DType t) { return rows_in<FileRow>(t); }
RowsFn rows_q32_packed(DType t) { return rows_in<PackedRow>(t); }

}  // namespace tandem::kernels::cpu::mm::TANDEM_AVX512_NS
