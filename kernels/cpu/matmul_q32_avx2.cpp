// AVX2 matmul kernels for the 32-element block types (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0).
//
// Each weight block is decoded once into 32 unsigned codes (Q8_0: signed, used with the
// sign trick) and multiplied with every token of a group of up to 4: maddubs + madd give
// 8 int32 partial sums, converted and scaled by d_w*d_x into a float accumulator. The
// weight's offset (-8, -16) or min m is applied through s = d_x*sum(q_x), which comes with
// the activations: off += c * s with c = -8*d_w, -16*d_w or m.
#include "kernels/cpu/matmul_impl.hpp"
#include "kernels/cpu/quant_blocks.hpp"
#include "kernels/cpu/simd_avx2.hpp"

// Float rounding must be exactly what is written (no a*b+c contraction), so that it is the
// same for every token-group size.
#pragma GCC optimize("fp-contract=off")

namespace tandem::kernels::cpu::mm {
namespace {

using namespace avx2;
using u8 = uint8_t;

// 16 packed nibbles -> 32 codes: low nibbles are elements 0-15, high nibbles 16-31.
static inline __m256i nibbles(const u8* p) {
  const __m128i q = loadu128(p);
  return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(q, 4), q), _mm256_set1_epi8(0x0f));
}

// Bit e of a 32-bit word -> 0x10 in byte e.
static inline __m256i high_bits(uint32_t qh) {
  const __m256i spread = _mm256_shuffle_epi8(
      _mm256_set1_epi32(static_cast<int>(qh)),
      _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0x0000000000000000));
  const __m256i bit = _mm256_set1_epi64x(static_cast<long long>(0x8040201008040201ull));
  return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit), _mm256_set1_epi8(0x10));
}

struct Q4_0 {
  static constexpr int kBytes = blk::q4_0::size;
  static constexpr bool kSigned = false, kOffset = true;
  static inline __m256i codes(const u8* b) { return nibbles(b + blk::q4_0::qs); }
  static inline float d(const u8* b) { return f16(b + blk::q4_0::d); }
  static inline float c(const u8* b, float d) { return -8.0f * d; }
};
struct Q4_1 {
  static constexpr int kBytes = blk::q4_1::size;
  static constexpr bool kSigned = false, kOffset = true;
  static inline __m256i codes(const u8* b) { return nibbles(b + blk::q4_1::qs); }
  static inline float d(const u8* b) { return f16(b + blk::q4_1::d); }
  static inline float c(const u8* b, float) { return f16(b + blk::q4_1::m); }
};
struct Q5_0 {
  static constexpr int kBytes = blk::q5_0::size;
  static constexpr bool kSigned = false, kOffset = true;
  static inline __m256i codes(const u8* b) {
    return _mm256_or_si256(nibbles(b + blk::q5_0::qs), high_bits(blk::u32_at(b + blk::q5_0::qh)));
  }
  static inline float d(const u8* b) { return f16(b + blk::q5_0::d); }
  static inline float c(const u8* b, float d) { return -16.0f * d; }
};
struct Q5_1 {
  static constexpr int kBytes = blk::q5_1::size;
  static constexpr bool kSigned = false, kOffset = true;
  static inline __m256i codes(const u8* b) {
    return _mm256_or_si256(nibbles(b + blk::q5_1::qs), high_bits(blk::u32_at(b + blk::q5_1::qh)));
  }
  static inline float d(const u8* b) { return f16(b + blk::q5_1::d); }
  static inline float c(const u8* b, float) { return f16(b + blk::q5_1::m); }
};
struct Q8_0 {
  static constexpr int kBytes = blk::q8_0::size;
  static constexpr bool kSigned = true, kOffset = false;
  static inline __m256i codes(const u8* b) { return loadu(b + blk::q8_0::qs); }
  static inline float d(const u8* b) { return f16(b + blk::q8_0::d); }
  static inline float c(const u8*, float) { return 0.0f; }
};

template <class K, int TN>
static void row_group(const Args& a, const u8* wr, int64_t r, int64_t t0) {
  const ActLayout& l = a.xl;
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
  __m256 acc[TN];
  float off[TN];
  for (int t = 0; t < TN; ++t) acc[t] = _mm256_setzero_ps(), off[t] = 0.0f;
  for (int64_t bi = 0; bi < l.nb; ++bi) {
    const u8* b = wr + bi * K::kBytes;
    const __m256i u = K::codes(b);
    const float d = K::d(b);
    const float c = K::c(b, d);
    const __m256i au = K::kSigned ? _mm256_sign_epi8(u, u) : u;  // |u| for the sign trick
    for (int t = 0; t < TN; ++t) {
      __m256i xv = loadu(xq[t] + 32 * bi);
      if constexpr (K::kSigned) xv = _mm256_sign_epi8(xv, u);
      const __m256i s = _mm256_madd_epi16(pair_dot(au, xv), ones);
      acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_set1_ps(d * xd[t][bi]), acc[t]);
      if constexpr (K::kOffset) off[t] = __builtin_fmaf(c, xs[t][bi], off[t]);
    }
  }
  for (int t = 0; t < TN; ++t) a.y[(t0 + t) * a.ldy + r] = hsum(acc[t]) + off[t];
}

template <class K>
void rows(const Args& a, int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
  for (int64_t r = r0; r < r1; ++r) {
    const u8* wr = a.w + static_cast<size_t>(r) * a.w_stride;
    int64_t t = t0;
    for (; t + 4 <= t1; t += 4) row_group<K, 4>(a, wr, r, t);
    switch (t1 - t) {
      case 3: row_group<K, 3>(a, wr, r, t); break;
      case 2: row_group<K, 2>(a, wr, r, t); break;
      case 1: row_group<K, 1>(a, wr, r, t); break;
      default: break;
    }
  }
}

}  // namespace

RowsFn avx2_rows_q32(DType t) {
  switch (t) {
    case DType::Q4_0: return rows<Q4_0>;
    case DType::Q4_1: return rows<Q4_1>;
    case DType::Q5_0: return rows<Q5_0>;
    case DType::Q5_1: return rows<Q5_1>;
    case DType::Q8_0: return rows<Q8_0>;
    default: return nullptr;
  }
}

}  // namespace tandem::kernels::cpu::mm
