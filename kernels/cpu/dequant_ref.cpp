// Scalar reference dequantization, one plain loop per block format. The float operations
// follow the block definitions in the same order as gguf-py's numpy code (scale products
// first, then times the code, then the min), so the results match it exactly; this file
// is compiled without FMA, so nothing is contracted.
#include <stdexcept>
#include <string>

#include "kernels/cpu/quant.hpp"
#include "kernels/cpu/fp16.hpp"
#include "kernels/cpu/quant_blocks.hpp"

namespace tandem::kernels::cpu {
namespace {

using u8 = uint8_t;

float f16_at(const u8* p) { return fp16_to_f32(blk::u16_at(p)); }

void q4_0(const u8* b, float* y) {
  const float d = f16_at(b + blk::q4_0::d);
  const u8* qs = b + blk::q4_0::qs;
  for (int j = 0; j < 16; ++j) {
    y[j] = d * static_cast<float>((qs[j] & 0x0f) - 8);
    y[j + 16] = d * static_cast<float>((qs[j] >> 4) - 8);
  }
}

void q4_1(const u8* b, float* y) {
  const float d = f16_at(b + blk::q4_1::d), m = f16_at(b + blk::q4_1::m);
  const u8* qs = b + blk::q4_1::qs;
  for (int j = 0; j < 16; ++j) {
    y[j] = d * static_cast<float>(qs[j] & 0x0f) + m;
    y[j + 16] = d * static_cast<float>(qs[j] >> 4) + m;
  }
}

// 5-bit codes of a Q5_0/Q5_1 block: low nibbles from qs, bit e of qh as bit 4 of element e.
void q5_codes(const u8* qh_p, const u8* qs, int q[32]) {
  const uint32_t qh = blk::u32_at(qh_p);
  for (int j = 0; j < 16; ++j) {
    q[j] = (qs[j] & 0x0f) | static_cast<int>(((qh >> j) & 1u) << 4);
    q[j + 16] = (qs[j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1u) << 4);
  }
}

void q5_0(const u8* b, float* y) {
  const float d = f16_at(b + blk::q5_0::d);
  int q[32];
  q5_codes(b + blk::q5_0::qh, b + blk::q5_0::qs, q);
  for (int j = 0; j < 32; ++j) y[j] = d * static_cast<float>(q[j] - 16);
}

void q5_1(const u8* b, float* y) {
  const float d = f16_at(b + blk::q5_1::d), m = f16_at(b + blk::q5_1::m);
  int q[32];
  q5_codes(b + blk::q5_1::qh, b + blk::q5_1::qs, q);
  for (int j = 0; j < 32; ++j) y[j] = d * static_cast<float>(q[j]) + m;
}

void q8_0(const u8* b, float* y) {
  const float d = f16_at(b + blk::q8_0::d);
  const int8_t* qs = reinterpret_cast<const int8_t*>(b + blk::q8_0::qs);
  for (int j = 0; j < 32; ++j) y[j] = static_cast<float>(qs[j]) * d;
}

// Q2_K: element e of the block sits in byte qs[32*(e/128) + e%32] at bit 2*((e/32)%4);
// its group of 16 is e/16 (scale low nibble, min high nibble of scales[e/16]).
void q2_k(const u8* b, float* y) {
  const float d = f16_at(b + blk::q2_k::d), dmin = f16_at(b + blk::q2_k::dmin);
  const u8* sc = b + blk::q2_k::scales;
  const u8* qs = b + blk::q2_k::qs;
  for (int e = 0; e < blk::kQK; ++e) {
    const int g = e / 16;
    const float dl = d * static_cast<float>(sc[g] & 0x0f);
    const float ml = dmin * static_cast<float>(sc[g] >> 4);
    const int q = (qs[32 * (e / 128) + e % 32] >> (2 * ((e / 32) % 4))) & 3;
    y[e] = dl * static_cast<float>(q) - ml;
  }
}

// Q3_K: low 2 bits as in Q2_K; the high bit of element e is bit (e/32) of hmask[e%32], and
// a clear high bit means "minus 4".
void q3_k(const u8* b, float* y) {
  const float d = f16_at(b + blk::q3_k::d);
  uint32_t sw[4];
  blk::unpack_q3k_scales(b + blk::q3_k::scales, sw);
  const u8* hm = b + blk::q3_k::hmask;
  const u8* qs = b + blk::q3_k::qs;
  for (int e = 0; e < blk::kQK; ++e) {
    const float dl = d * static_cast<float>(static_cast<int>(blk::byte_of(sw, e / 16)) - 32);
    const int lo = (qs[32 * (e / 128) + e % 32] >> (2 * ((e / 32) % 4))) & 3;
    const int hi = (hm[e % 32] >> (e / 32)) & 1;
    y[e] = dl * static_cast<float>(lo - (hi ? 0 : 4));
  }
}

// Q4_K / Q5_K: group j of 32 covers elements 32j..32j+31; in each 64-element pair the first
// group takes the low nibbles of 32 bytes, the second the high nibbles.
void q4_k(const u8* b, float* y) {
  const float d = f16_at(b + blk::q4_k::d), dmin = f16_at(b + blk::q4_k::dmin);
  const blk::K4Scales k = blk::unpack_k4_scales(b + blk::q4_k::scales);
  const u8* qs = b + blk::q4_k::qs;
  for (int e = 0; e < blk::kQK; ++e) {
    const int j = e / 32;
    const float dl = d * static_cast<float>(blk::byte_of(k.sc, j));
    const float ml = dmin * static_cast<float>(blk::byte_of(k.mn, j));
    const u8 byte = qs[32 * (e / 64) + e % 32];
    const int q = (j & 1) ? (byte >> 4) : (byte & 0x0f);
    y[e] = dl * static_cast<float>(q) - ml;
  }
}

void q5_k(const u8* b, float* y) {
  const float d = f16_at(b + blk::q5_k::d), dmin = f16_at(b + blk::q5_k::dmin);
  const blk::K4Scales k = blk::unpack_k4_scales(b + blk::q5_k::scales);
  const u8* qh = b + blk::q5_k::qh;
  const u8* qs = b + blk::q5_k::qs;
  for (int e = 0; e < blk::kQK; ++e) {
    const int j = e / 32;
    const float dl = d * static_cast<float>(blk::byte_of(k.sc, j));
    const float ml = dmin * static_cast<float>(blk::byte_of(k.mn, j));
    const u8 byte = qs[32 * (e / 64) + e % 32];
    const int lo = (j & 1) ? (byte >> 4) : (byte & 0x0f);
    const int q = lo | (((qh[e % 32] >> j) & 1) << 4);
    y[e] = dl * static_cast<float>(q) - ml;
  }
}

// Q6_K: in each half of 128, element 32*k + l (k = 0..3) takes its low nibble from
// ql[64*half + l + 32*(k&1)] (low nibble for k < 2, high for k >= 2) and its top 2 bits
// from qh[32*half + l] at bit 2k; group of 16 is e/16 with a signed 8-bit scale.
void q6_k(const u8* b, float* y) {
  const float d = f16_at(b + blk::q6_k::d);
  const u8* ql = b + blk::q6_k::ql;
  const u8* qh = b + blk::q6_k::qh;
  const int8_t* sc = reinterpret_cast<const int8_t*>(b + blk::q6_k::scales);
  for (int e = 0; e < blk::kQK; ++e) {
    const int half = e / 128, k = (e % 128) / 32, l = e % 32;
    const u8 lb = ql[64 * half + l + 32 * (k & 1)];
    const int lo = k < 2 ? (lb & 0x0f) : (lb >> 4);
    const int hi = (qh[32 * half + l] >> (2 * k)) & 3;
    const float dl = d * static_cast<float>(sc[e / 16]);
    y[e] = dl * static_cast<float>((lo | (hi << 4)) - 32);
  }
}

using BlockFn = void (*)(const u8*, float*);

}  // namespace

void dequantize_row_ref(DType t, const void* src, float* dst, int64_t n) {
  const u8* p = static_cast<const u8*>(src);
  switch (t) {
    case DType::F32:
      if (n > 0) std::memcpy(dst, p, static_cast<size_t>(n) * sizeof(float));
      return;
    case DType::F16:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, p + 2 * i, 2);
        dst[i] = fp16_to_f32(h);
      }
      return;
    case DType::BF16:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, p + 2 * i, 2);
        dst[i] = bf16_to_f32(h);
      }
      return;
    default:
      break;
  }
  BlockFn fn = nullptr;
  switch (t) {
    case DType::Q4_0: fn = q4_0; break;
    case DType::Q4_1: fn = q4_1; break;
    case DType::Q5_0: fn = q5_0; break;
    case DType::Q5_1: fn = q5_1; break;
    case DType::Q8_0: fn = q8_0; break;
    case DType::Q2_K: fn = q2_k; break;
    case DType::Q3_K: fn = q3_k; break;
    case DType::Q4_K: fn = q4_k; break;
    case DType::Q5_K: fn = q5_k; break;
    case DType::Q6_K: fn = q6_k; break;
    default:
      throw std::invalid_argument(std::string("dequantize: unsupported type ") + dtype_name(t));
  }
  const auto& info = dtype_info(t);
  if (n % info.block_size != 0)
    throw std::invalid_argument(std::string("dequantize: row length not a multiple of the ") +
                                dtype_name(t) + " block size");
  for (int64_t i = 0; i < n / info.block_size; ++i)
    fn(p + static_cast<size_t>(i) * info.type_size, dst + i * info.block_size);
}

}  // namespace tandem::kernels::cpu
