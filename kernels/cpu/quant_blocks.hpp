// Byte layouts of the GGUF/GGML quantization blocks, and scalar helpers to read their
// packed fields. Blocks are addressed as raw bytes (alignment 1) because rows of 18- or
// 210-byte blocks put fields at odd addresses; fields are read with memcpy.
// The helpers are `static`: this header is also compiled into the AVX2/AVX-512 files, and an
// inline function with external linkage could be merged with an AVX copy by the linker and
// then run on a CPU without AVX. For the same reason f16 values are returned as raw bits:
// baseline files convert them with fp16.hpp, SIMD files with F16C.
//
// Block formats (QK = 32 for the *_0/_1 types, 256 for the K-quants; d, dmin, m are f16):
//   Q4_0 (18):  d, qs[16]               x[j] = d*(lo4(qs[j]) - 8), x[j+16] = d*(hi4(qs[j]) - 8)
//   Q4_1 (20):  d, m, qs[16]            x = d*q + m, same nibble order
//   Q5_0 (22):  d, qh[4], qs[16]        5th bit of element e is bit e of qh (u32 LE); q - 16
//   Q5_1 (24):  d, m, qh[4], qs[16]     x = d*q + m
//   Q8_0 (34):  d, qs[32] (int8)        x = d*q
//   Q2_K (84):  scales[16], qs[64], d, dmin        16 groups of 16: scale lo4, min hi4, 2-bit q
//   Q3_K (110): hmask[32], qs[64], scales[12], d   16 groups of 16: 6-bit scale - 32, q in -4..3
//   Q4_K (144): d, dmin, scales[12], qs[128]       8 groups of 32: 6-bit scale and min, 4-bit q
//   Q5_K (176): d, dmin, scales[12], qh[32], qs[128]   as Q4_K with a 5th bit from qh
//   Q6_K (210): ql[128], qh[64], scales[16] (int8), d  16 groups of 16: 6-bit q - 32
#pragma once
#include <cstdint>
#include <cstring>

#include "kernels/dtype.hpp"

namespace tandem::kernels::cpu::blk {

static inline uint16_t u16_at(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}
static inline uint32_t u32_at(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

constexpr int kQK = 256;  // elements per K-quant block

// Field offsets and sizes, in bytes.
namespace q4_0 { constexpr int d = 0, qs = 2, size = 18; }
namespace q4_1 { constexpr int d = 0, m = 2, qs = 4, size = 20; }
namespace q5_0 { constexpr int d = 0, qh = 2, qs = 6, size = 22; }
namespace q5_1 { constexpr int d = 0, m = 2, qh = 4, qs = 8, size = 24; }
namespace q8_0 { constexpr int d = 0, qs = 2, size = 34; }
namespace q2_k { constexpr int scales = 0, qs = 16, d = 80, dmin = 82, size = 84; }
namespace q3_k { constexpr int hmask = 0, qs = 32, scales = 96, d = 108, size = 110; }
// Where a 32-element block keeps its fields (-1: absent; bytes 0 for another type).
struct Q32Fields {
  int bytes, d, m, qh, qs;
};
static inline Q32Fields q32_fields(DType t) {
  switch (t) {
    case DType::Q4_0: return {q4_0::size, q4_0::d, -1, -1, q4_0::qs};
    case DType::Q4_1: return {q4_1::size, q4_1::d, q4_1::m, -1, q4_1::qs};
    case DType::Q5_0: return {q5_0::size, q5_0::d, -1, q5_0::qh, q5_0::qs};
    case DType::Q5_1: return {q5_1::size, q5_1::d, q5_1::m, q5_1::qh, q5_1::qs};
    case DType::Q8_0: return {q8_0::size, q8_0::d, -1, -1, q8_0::qs};
    default: return {0, -1, -1, -1, -1};
  }
}

namespace q4_k { constexpr int d = 0, dmin = 2, scales = 4, qs = 16, size = 144; }
namespace q5_k { constexpr int d = 0, dmin = 2, scales = 4, qh = 16, qs = 48, size = 176; }
namespace q6_k { constexpr int ql = 0, qh = 128, scales = 192, d = 208, size = 210; }

// Q4_K / Q5_K: 8 six-bit scales and 8 six-bit mins packed in 12 bytes. Bytes 0-3 hold the
// low 6 bits of scales 0-3 (top 2 bits: high bits of scales 4-7), bytes 4-7 the same for
// the mins, bytes 8-11 the low nibbles of scales 4-7 and (high nibble) mins 4-7.
// Unpacked four at a time in 32-bit words, one byte per value.
struct K4Scales {
  uint32_t sc[2];  // scales 0-3, 4-7 (one byte each)
  uint32_t mn[2];  // mins 0-3, 4-7
};
static inline K4Scales unpack_k4_scales(const uint8_t* s) {
  const uint32_t u0 = u32_at(s), u1 = u32_at(s + 4), u2 = u32_at(s + 8);
  K4Scales k;
  k.sc[0] = u0 & 0x3f3f3f3fu;
  k.mn[0] = u1 & 0x3f3f3f3fu;
  k.sc[1] = (u2 & 0x0f0f0f0fu) | ((u0 >> 2) & 0x30303030u);
  k.mn[1] = ((u2 >> 4) & 0x0f0f0f0fu) | ((u1 >> 2) & 0x30303030u);
  return k;
}

// Q3_K: 16 six-bit scales in 12 bytes. Scale i has its low nibble in byte i (i < 8) or the
// high nibble of byte i-8, and its top 2 bits at bit 2*(i/4) of byte 8 + i%4. Returns the
// unsigned 6-bit values (the scale is value - 32), one byte each, in four words.
static inline void unpack_q3k_scales(const uint8_t* s, uint32_t out[4]) {
  const uint32_t u0 = u32_at(s), u1 = u32_at(s + 4), u2 = u32_at(s + 8);
  out[0] = (u0 & 0x0f0f0f0fu) | ((u2 << 4) & 0x30303030u);
  out[1] = (u1 & 0x0f0f0f0fu) | ((u2 << 2) & 0x30303030u);
  out[2] = ((u0 >> 4) & 0x0f0f0f0fu) | (u2 & 0x30303030u);
  out[3] = ((u1 >> 4) & 0x0f0f0f0fu) | ((u2 >> 2) & 0x30303030u);
}

static inline uint8_t byte_of(const uint32_t* words, int i) {
  return static_cast<uint8_t>(words[i / 4] >> (8 * (i % 4)));
}

}  // namespace tandem::kernels::cpu::blk
