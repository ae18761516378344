// Integer codes, scales and offset coefficients of the quantized weight blocks, as the CPU's
// integer kernels use them (kernels/cpu/matmul_scalar.cpp): the quantized matmuls
// (ops/matmul_small.cu, ops/matmul_mma.cu) compute each block's contribution from these
// integers with the reference's float operations, which is what makes their results the
// reference's bits.
#pragma once
#include <cstring>

#include "kernels/cuda/dequant.cuh"

namespace tandem::kernels::TANDEM_CUDA_NS::dev {

// Block b of a row of nb blocks in the planes layout (kernels/cuda/weight_planes.hpp): each
// kind of field of the row's blocks gathered in a plane of its own, the codes 16-byte
// aligned, every field at least 4. Q4_0: codes [nb][16] | d [nb][2]; Q5_0: codes [nb][16] |
// qh [nb][4] | d [nb][2]; Q8_0: codes [nb][32] | d [nb][2]; Q6_K: ql [nb][128] |
// qh [nb][64] | scales [nb][16] | d [nb][2].
struct PlaneBlock {
  const uint8_t* row;
  int64_t b, nb;
};
// Block b of a row of nb blocks of type T: its start (the file's layout) or its planes.
template <int T>
__device__ __forceinline__ auto block_at(const uint8_t* row, int64_t b, int64_t nb) {
  if constexpr (kPlanes<T>) return PlaneBlock{row, b, nb};
  else return row + b * Geo<T>::bytes;
}
// The fields of a 32-element block in either layout: codes (qs), Q5's fifth bits (qh), the
// scale d (the first field in the file's layout).
template <int T> constexpr int kQsOff = kBase<T> == kQ4_1 ? 4 : kBase<T> == kQ5_0 ? 6 : kBase<T> == kQ5_1 ? 8 : 2;
template <int T> constexpr int kQsBytes = kBase<T> == kQ8_0 ? 32 : 16;
template <int T> constexpr int kQhBytes = kBase<T> == kQ5_0 || kBase<T> == kQ5_1 ? 4 : 0;
template <int T>
__device__ __forceinline__ const uint8_t* q32_qs(const uint8_t* b) { return b + kQsOff<T>; }
template <int T>
__device__ __forceinline__ const uint8_t* q32_qs(const PlaneBlock& p) { return p.row + kQsBytes<T> * p.b; }
template <int T>
__device__ __forceinline__ const uint8_t* q32_qh(const uint8_t* b) { return b + (kBase<T> == kQ5_0 ? 2 : 4); }
template <int T>
__device__ __forceinline__ const uint8_t* q32_qh(const PlaneBlock& p) { return p.row + kQsBytes<T> * p.nb + 4 * p.b; }
template <int T>
__device__ __forceinline__ const uint8_t* q32_dp(const uint8_t* b) { return b; }
template <int T>
__device__ __forceinline__ const uint8_t* q32_dp(const PlaneBlock& p) {
  return p.row + (kQsBytes<T> + kQhBytes<T>) * p.nb + 2 * p.b;
}
// A word of a 32-element block's codes or fifth bits: 4-byte aligned in planes and in Q4_1
// and Q5_1 blocks (multiples of 4 bytes), 2-byte aligned otherwise.
template <int T>
__device__ __forceinline__ uint32_t q32_field_word(const uint8_t* p) {
  if constexpr (kPlanes<T> || kBase<T> == kQ4_1 || kBase<T> == kQ5_1) return ld_u32_a4(p);
  else return ld_u32_a2(p);
}
// The fields of a Q6_K block in either layout.
__device__ __forceinline__ const uint8_t* q6_ql(const uint8_t* b) { return b; }
__device__ __forceinline__ const uint8_t* q6_ql(const PlaneBlock& p) { return p.row + 128 * p.b; }
__device__ __forceinline__ const uint8_t* q6_qh(const uint8_t* b) { return b + 128; }
__device__ __forceinline__ const uint8_t* q6_qh(const PlaneBlock& p) { return p.row + 128 * p.nb + 64 * p.b; }
__device__ __forceinline__ const uint8_t* q6_sc(const uint8_t* b) { return b + 192; }
__device__ __forceinline__ const uint8_t* q6_sc(const PlaneBlock& p) { return p.row + 192 * p.nb + 16 * p.b; }
__device__ __forceinline__ const uint8_t* q6_d(const uint8_t* b) { return b + 208; }
__device__ __forceinline__ const uint8_t* q6_d(const PlaneBlock& p) { return p.row + 208 * p.nb + 2 * p.b; }
// A 32-element block's scale d.
template <int T, typename B>
__device__ __forceinline__ float q32_d(const B& b) {
  return ld_f16(q32_dp<T>(b));
}

// A lane's share of a 32-block: sub-lane s (0..3) of the block's 4 lanes owns elements
// 4s..4s+3 and 16+4s..16+4s+3 (one 4-byte run of nibbles). Unsigned codes as the CPU's
// integer kernels use them (the offset or min is applied through c).
template <int T>
__device__ __forceinline__ int q32_code(const uint8_t* b, int e) {
  if constexpr (T == kQ8_0) {
    return static_cast<int8_t>(b[2 + e]);
  } else if constexpr (T == kQ4_0 || T == kQ4_1) {
    const uint8_t* qs = b + (T == kQ4_0 ? 2 : 4);
    return e < 16 ? (qs[e] & 0x0f) : (qs[e - 16] >> 4);
  } else {
    constexpr int qh_off = T == kQ5_0 ? 2 : 4;
    const uint8_t* qs = b + qh_off + 4;
    const int lo = e < 16 ? (qs[e] & 0x0f) : (qs[e - 16] >> 4);
    return lo | (((b[qh_off + e / 8] >> (e % 8)) & 1) << 4);
  }
}

// K-quant block fields (as kernels/cpu/matmul_scalar.cpp uses them:
// y += dx * (d * sum_g sc[g]*dot_g - dm * sum_g mn[g]*bsum_g)): d, dm, the scale and min
// coefficient of group g of 16, and the unsigned code of element e.
template <int T, typename B>
__device__ __forceinline__ void k_scales(const B& b, int g, float& d, float& dm, int& sc, int& mn) {
  if constexpr (T == kQ2_K) {
    d = ld_f16(b + 80), dm = ld_f16(b + 82);
    sc = b[g] & 0x0f, mn = b[g] >> 4;
  } else if constexpr (T == kQ3_K) {
    d = dm = ld_f16(b + 108);
    sc = q3k_scale(b + 96, g) - 32, mn = 4 * sc;
  } else if constexpr (T == kQ4_K || T == kQ5_K) {
    d = ld_f16(b), dm = ld_f16(b + 2);
    sc = k4_scale(b + 4, g / 2, 0), mn = k4_scale(b + 4, g / 2, 1);
  } else {
    static_assert(kBase<T> == kQ6_K, "a K-quant type");
    d = dm = ld_f16(q6_d(b));
    sc = static_cast<int8_t>(q6_sc(b)[g]), mn = 32 * sc;
  }
}
template <int T>
__device__ __forceinline__ int k_code(const uint8_t* b, int e) {
  if constexpr (T == kQ2_K) {
    return (b[16 + 32 * (e / 128) + e % 32] >> (2 * ((e / 32) % 4))) & 3;
  } else if constexpr (T == kQ3_K) {
    const int lo = (b[32 + 32 * (e / 128) + e % 32] >> (2 * ((e / 32) % 4))) & 3;
    return lo | (((b[e % 32] >> (e / 32)) & 1) << 2);
  } else if constexpr (T == kQ4_K || T == kQ5_K) {
    constexpr int qs_off = T == kQ4_K ? 16 : 48;
    const uint8_t v = b[qs_off + 32 * (e / 64) + e % 32];
    int q = ((e / 32) & 1) ? (v >> 4) : (v & 0x0f);
    if constexpr (T == kQ5_K) q |= ((b[16 + e % 32] >> (e / 32)) & 1) << 4;
    return q;
  } else {
    const int half = e / 128, k = (e % 128) / 32, l = e % 32;
    const uint8_t lb = b[64 * half + l + 32 * (k & 1)];
    const int lo = k < 2 ? (lb & 0x0f) : (lb >> 4);
    return lo | (((b[128 + 32 * half + l] >> (2 * k)) & 3) << 4);
  }
}

__device__ __forceinline__ int pack4(int c0, int c1, int c2, int c3) {
  return static_cast<int>((static_cast<uint32_t>(c0) & 0xffu) | ((static_cast<uint32_t>(c1) & 0xffu) << 8) |
                          ((static_cast<uint32_t>(c2) & 0xffu) << 16) | ((static_cast<uint32_t>(c3) & 0xffu) << 24));
}
// Bits 0..3 of x to bit 4 of bytes 0..3 (the fifth bit of four Q5 codes).
__device__ __forceinline__ uint32_t spread4_to_bit4(uint32_t x) {
  return ((x & 1u) | ((x & 2u) << 7) | ((x & 4u) << 14) | ((x & 8u) << 21)) << 4;
}

// Alignment of the quantized rows: a weight matrix starts on an arena granule (256 bytes)
// and its rows are whole blocks, so each block starts at a multiple of the largest power of
// two dividing its size (Q4_K, Q5_K: 16; Q4_1: 4; Q4_0, Q5_0, Q8_0, Q6_K: 2), and so do the
// fields at such offsets inside it. The word loads below rely on that (checked under the
// emulator). Q4_0, Q5_0, Q8_0 and Q6_K matmul weights (most of the real models' bytes that
// are not Q4_K) are repacked at load into planes, where these loads are 16 or 4 bytes wide.

// A lane's codes of a 32-block as two words: elements 4s..4s+3 and 16+4s..16+4s+3 (s the
// sub-lane), each byte one code (unsigned for Q4/Q5, signed for Q8_0).
template <int T, typename B>
__device__ __forceinline__ void q32_words(const B& b, int sub, int& lo, int& hi) {
  if constexpr (kBase<T> == kQ8_0) {
    lo = static_cast<int>(q32_field_word<T>(q32_qs<T>(b) + 4 * sub));
    hi = static_cast<int>(q32_field_word<T>(q32_qs<T>(b) + 16 + 4 * sub));
  } else if constexpr (kBase<T> == kQ4_0 || T == kQ4_1) {
    const uint32_t w = q32_field_word<T>(q32_qs<T>(b) + 4 * sub);
    lo = static_cast<int>(w & 0x0f0f0f0fu);
    hi = static_cast<int>((w >> 4) & 0x0f0f0f0fu);
  } else if constexpr (kBase<T> == kQ5_0) {
    const uint32_t qh = q32_field_word<T>(q32_qh<T>(b));
    const uint32_t w = q32_field_word<T>(q32_qs<T>(b) + 4 * sub);
    lo = static_cast<int>((w & 0x0f0f0f0fu) | spread4_to_bit4((qh >> (4 * sub)) & 0xfu));
    hi = static_cast<int>(((w >> 4) & 0x0f0f0f0fu) | spread4_to_bit4((qh >> (16 + 4 * sub)) & 0xfu));
  } else {
    const int e = 4 * sub;
    lo = pack4(q32_code<T>(b, e), q32_code<T>(b, e + 1), q32_code<T>(b, e + 2), q32_code<T>(b, e + 3));
    hi = pack4(q32_code<T>(b, 16 + e), q32_code<T>(b, 17 + e), q32_code<T>(b, 18 + e), q32_code<T>(b, 19 + e));
  }
}

// A lane's 32 codes of a K-quant block (elements 32s..32s+31) as eight words.
template <int T, typename B>
__device__ __forceinline__ void k_words(const B& b, int sub, int* w) {
  if constexpr (T == kQ4_K) {
    const uint8_t* qs = b + 16 + 32 * (sub / 2);  // 16-aligned: two 16-byte loads
    const int shift = 4 * (sub & 1);
    uint32_t v0[4], v1[4];
    ld_u128_a16(qs, v0);
    ld_u128_a16(qs + 16, v1);
    for (int j = 0; j < 4; ++j) {
      w[j] = static_cast<int>((v0[j] >> shift) & 0x0f0f0f0fu);
      w[4 + j] = static_cast<int>((v1[j] >> shift) & 0x0f0f0f0fu);
    }
  } else if constexpr (kBase<T> == kQ6_K) {
    const int half = sub / 4, k = sub % 4;
    const uint8_t* ql = q6_ql(b) + 64 * half + 32 * (k & 1);
    const uint8_t* qh = q6_qh(b) + 32 * half;
    uint32_t lw[8], hw[8];
    if constexpr (kPlanes<T>) {  // 16-byte aligned: four 16-byte loads
      uint32_t v[4][4];
      ld_u128_a16(ql, v[0]), ld_u128_a16(ql + 16, v[1]), ld_u128_a16(qh, v[2]), ld_u128_a16(qh + 16, v[3]);
      for (int j = 0; j < 8; ++j) lw[j] = v[j / 4][j % 4], hw[j] = v[2 + j / 4][j % 4];
    } else {
      for (int j = 0; j < 8; ++j) lw[j] = ld_u32_a2(ql + 4 * j), hw[j] = ld_u32_a2(qh + 4 * j);
    }
    for (int j = 0; j < 8; ++j) {
      const uint32_t lo = (lw[j] >> (k < 2 ? 0 : 4)) & 0x0f0f0f0fu;
      const uint32_t hi = (hw[j] >> (2 * k)) & 0x03030303u;
      w[j] = static_cast<int>(lo | (hi << 4));
    }
  } else {
    const int e = 32 * sub;
    for (int j = 0; j < 8; ++j)
      w[j] = pack4(k_code<T>(b, e + 4 * j), k_code<T>(b, e + 4 * j + 1), k_code<T>(b, e + 4 * j + 2),
                   k_code<T>(b, e + 4 * j + 3));
  }
}

// Four int8 activations (a block's element offsets are multiples of 4, rows of quantize_act
// multiples of 32 bytes: aligned).
__device__ __forceinline__ int ld_x4(const int8_t* p) {
  check_aligned(p, 4);
#if TANDEM_SIMT_EMULATED
  int v;
  std::memcpy(&v, p, sizeof v);  // host C++: no aliasing through int*
  return v;
#else
  return *reinterpret_cast<const int*>(p);
#endif
}

// Codes e..e+3 of a K-quant block (e a multiple of 4) as one word, a byte each: word-wide
// for Q4_K and Q6_K, element by element for the others.
template <int T, typename B>
__device__ __forceinline__ int k_word4(const B& b, int e) {
  if constexpr (T == kQ4_K) {
    return static_cast<int>((ld_u32_a4(b + 16 + 32 * (e / 64) + e % 32) >> (4 * ((e / 32) & 1))) & 0x0f0f0f0fu);
  } else if constexpr (kBase<T> == kQ6_K) {
    const int half = e / 128, k = (e % 128) / 32, l = e % 32;
    const uint8_t *ql = q6_ql(b) + 64 * half + 32 * (k & 1) + l, *qh = q6_qh(b) + 32 * half + l;
    const uint32_t lw = kPlanes<T> ? ld_u32_a4(ql) : ld_u32_a2(ql), hw = kPlanes<T> ? ld_u32_a4(qh) : ld_u32_a2(qh);
    const uint32_t lo = (lw >> (k < 2 ? 0 : 4)) & 0x0f0f0f0fu;
    const uint32_t hi = (hw >> (2 * k)) & 0x03030303u;
    return static_cast<int>(lo | (hi << 4));
  } else {
    return pack4(k_code<T>(b, e), k_code<T>(b, e + 1), k_code<T>(b, e + 2), k_code<T>(b, e + 3));
  }
}

}  // namespace tandem::kernels::TANDEM_CUDA_NS::dev
