// Float rows to GGUF blocks (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0): the formats' reference
// quantization (round-to-nearest codes on one scale, or on a scale and a minimum, per 32
// elements), bit for bit what gguf-py's numpy quantizers write (tests/test_quant.cpp checks
// it). Used to re-quantize a draft model's weights at load (engine/model/requantize.cpp).
//
// Built with -ffp-contract=off (kernels/CMakeLists.txt): the codes must round exactly as
// written, not through a fused multiply-add the compiler chose.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>

#include "kernels/cpu/fp16.hpp"
#include "kernels/cpu/quant.hpp"
#include "kernels/cpu/quant_blocks.hpp"

namespace tandem::kernels::cpu {
namespace {

using u8 = uint8_t;
constexpr int kQK = 32;

void put_f16(u8* p, float v) {
  const uint16_t h = f32_to_fp16(v);
  std::memcpy(p, &h, 2);
}

// The element of largest magnitude, with its sign (the first of equal ones, as numpy's
// argmax: an all-zero block keeps its first zero's sign).
float signed_absmax(const float* x) {
  float amax = std::fabs(x[0]), max = x[0];
  for (int j = 1; j < kQK; ++j)
    if (std::fabs(x[j]) > amax) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  return max;
}

// Symmetric codes around `offset` (8 for Q4_0, 16 for Q5_0): trunc(x * id + offset + 0.5),
// the product and sum taken in double and rounded once to float, as the reference does
// (its rounding otherwise depends on whether a fused multiply-add was used).
int symmetric_code(float x, float id, double offset_half, int max_code) {
  const float v = static_cast<float>(static_cast<double>(x) * static_cast<double>(id) + offset_half);
  return std::clamp(static_cast<int>(std::trunc(v)), 0, max_code);
}

void q4_0(const float* x, u8* b) {
  const float d = signed_absmax(x) / -8.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  put_f16(b + blk::q4_0::d, d);
  u8* qs = b + blk::q4_0::qs;
  for (int j = 0; j < 16; ++j)
    qs[j] = static_cast<u8>(symmetric_code(x[j], id, 8.5, 15) | (symmetric_code(x[j + 16], id, 8.5, 15) << 4));
}

void q5_0(const float* x, u8* b) {
  const float d = signed_absmax(x) / -16.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  put_f16(b + blk::q5_0::d, d);
  uint32_t qh = 0;
  u8* qs = b + blk::q5_0::qs;
  for (int j = 0; j < 16; ++j) {
    const int lo = symmetric_code(x[j], id, 16.5, 31), hi = symmetric_code(x[j + 16], id, 16.5, 31);
    qs[j] = static_cast<u8>((lo & 0x0f) | ((hi & 0x0f) << 4));
    qh |= static_cast<uint32_t>(lo >> 4) << j;
    qh |= static_cast<uint32_t>(hi >> 4) << (j + 16);
  }
  std::memcpy(b + blk::q5_0::qh, &qh, 4);  // little-endian (x86, and every GGUF host)
}

// Asymmetric codes from the block's minimum: trunc((x - min) * id + 0.5), in float.
int minmax_code(float x, float min, float id, int max_code) {
  const float t = (x - min) * id;
  return std::clamp(static_cast<int>(std::trunc(t + 0.5f)), 0, max_code);
}

void minmax(const float* x, float* min, float* max) {
  *min = *max = x[0];
  for (int j = 1; j < kQK; ++j) {
    *min = std::min(*min, x[j]);
    *max = std::max(*max, x[j]);
  }
}

void q4_1(const float* x, u8* b) {
  float mn, mx;
  minmax(x, &mn, &mx);
  const float d = (mx - mn) / 15.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  put_f16(b + blk::q4_1::d, d);
  put_f16(b + blk::q4_1::m, mn);
  u8* qs = b + blk::q4_1::qs;
  for (int j = 0; j < 16; ++j)
    qs[j] = static_cast<u8>(minmax_code(x[j], mn, id, 15) | (minmax_code(x[j + 16], mn, id, 15) << 4));
}

void q5_1(const float* x, u8* b) {
  float mn, mx;
  minmax(x, &mn, &mx);
  const float d = (mx - mn) / 31.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  put_f16(b + blk::q5_1::d, d);
  put_f16(b + blk::q5_1::m, mn);
  uint32_t qh = 0;
  u8* qs = b + blk::q5_1::qs;
  for (int j = 0; j < 16; ++j) {
    const int lo = minmax_code(x[j], mn, id, 31), hi = minmax_code(x[j + 16], mn, id, 31);
    qs[j] = static_cast<u8>((lo & 0x0f) | ((hi & 0x0f) << 4));
    qh |= static_cast<uint32_t>(lo >> 4) << j;
    qh |= static_cast<uint32_t>(hi >> 4) << (j + 16);
  }
  std::memcpy(b + blk::q5_1::qh, &qh, 4);
}

void q8_0(const float* x, u8* b) {
  float amax = 0.0f;
  for (int j = 0; j < kQK; ++j) amax = std::max(amax, std::fabs(x[j]));
  const float d = amax / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  put_f16(b + blk::q8_0::d, d);
  auto* qs = reinterpret_cast<int8_t*>(b + blk::q8_0::qs);
  for (int j = 0; j < kQK; ++j) qs[j] = static_cast<int8_t>(std::round(x[j] * id));  // half away from zero
}

}  // namespace

bool can_quantize_to(DType t) {
  return t == DType::Q4_0 || t == DType::Q4_1 || t == DType::Q5_0 || t == DType::Q5_1 || t == DType::Q8_0;
}

void quantize_row_ref(DType t, const float* src, void* dst, int64_t n) {
  void (*fn)(const float*, u8*) = nullptr;
  switch (t) {
    case DType::Q4_0: fn = q4_0; break;
    case DType::Q4_1: fn = q4_1; break;
    case DType::Q5_0: fn = q5_0; break;
    case DType::Q5_1: fn = q5_1; break;
    case DType::Q8_0: fn = q8_0; break;
    default:
      throw std::invalid_argument(std::string("quantize_row_ref: cannot quantize to ") + dtype_name(t));
  }
  if (n % kQK != 0) throw std::invalid_argument("quantize_row_ref: row length is not a multiple of 32");
  const size_t size = dtype_info(t).type_size;
  u8* out = static_cast<u8*>(dst);
  for (int64_t i = 0; i < n / kQK; ++i) fn(src + i * kQK, out + static_cast<size_t>(i) * size);
}

}  // namespace tandem::kernels::cpu
