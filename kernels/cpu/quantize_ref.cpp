// Float rows to GGUF blocks (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0): the formats' reference
// quantization (round-to-nearest codes on one scale, or on a scale and a minimum, per 32
// elements), bit for bit what gguf-py's numpy quantizers write (tests/test_quant.cpp checks
// it). Q4_K (256 elements: eight groups of 32, each a 6-bit scale and minimum under two fp16
// super-scales) by each group's range, with no search for better scales: gguf-py has no
// quantizer for it to match, and its error is held to Q4_1's in the tests. Used to
// re-quantize weights at load (engine/model/requantize.cpp).
//
// Built with -ffp-contract=off (kernels/CMakeLists.txt): the codes must round exactly as
// written, not through a fused multiply-add the compiler chose.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
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

// A float to int as x86's truncating conversion (cvttss2si) gives it, for every input: NaN and
// values outside int's range become INT_MIN, where C++ leaves them undefined. The SIMD
// quantizers' conversions (cvttps2dq) do the same, so a block holding NaN or an infinity gets
// the same bytes from both.
int trunc_int(float v) {
  if (!(v >= -2147483648.0f && v < 2147483648.0f)) return std::numeric_limits<int>::min();
  return static_cast<int>(v);
}

// Symmetric codes around `offset` (8 for Q4_0, 16 for Q5_0): trunc(x * id + offset + 0.5),
// the product and sum taken in double and rounded once to float, as the reference does
// (its rounding otherwise depends on whether a fused multiply-add was used).
int symmetric_code(float x, float id, double offset_half, int max_code) {
  const float v = static_cast<float>(static_cast<double>(x) * static_cast<double>(id) + offset_half);
  return std::clamp(trunc_int(v), 0, max_code);
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
  return std::clamp(trunc_int(t + 0.5f), 0, max_code);
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
  for (int j = 0; j < kQK; ++j) qs[j] = static_cast<int8_t>(trunc_int(std::round(x[j] * id)));  // half away from zero
}

// Q4_K: each group of 32 gets the scale (max - min) / 15 and the minimum min(0, min), both
// quantized to 6 bits under the block's super-scales (the largest over 63); the codes are
// then rounded against the quantized pair, so the stored block decodes as close as it can.
void q4_k(const float* x, u8* b) {
  constexpr int kGroups = 8, kGroup = 32;
  float scale[kGroups], min[kGroups];
  float max_scale = 0.0f, max_min = 0.0f;
  for (int j = 0; j < kGroups; ++j) {
    const float* g = x + j * kGroup;
    float lo = g[0], hi = g[0];
    for (int i = 1; i < kGroup; ++i) {
      lo = std::min(lo, g[i]);
      hi = std::max(hi, g[i]);
    }
    lo = std::min(lo, 0.0f);
    scale[j] = (hi - lo) / 15.0f;
    min[j] = -lo;
    max_scale = std::max(max_scale, scale[j]);
    max_min = std::max(max_min, min[j]);
  }
  const float d = fp16_to_f32(f32_to_fp16(max_scale / 63.0f)), dmin = fp16_to_f32(f32_to_fp16(max_min / 63.0f));
  put_f16(b + blk::q4_k::d, d);
  put_f16(b + blk::q4_k::dmin, dmin);
  int ls[kGroups], lm[kGroups];
  for (int j = 0; j < kGroups; ++j) {
    ls[j] = d > 0.0f ? std::clamp(static_cast<int>(std::lround(scale[j] / d)), 0, 63) : 0;
    lm[j] = dmin > 0.0f ? std::clamp(static_cast<int>(std::lround(min[j] / dmin)), 0, 63) : 0;
  }
  u8* s = b + blk::q4_k::scales;
  for (int j = 0; j < 4; ++j) {
    s[j] = static_cast<u8>((ls[j] & 63) | ((ls[j + 4] >> 4) << 6));
    s[j + 4] = static_cast<u8>((lm[j] & 63) | ((lm[j + 4] >> 4) << 6));
    s[j + 8] = static_cast<u8>((ls[j + 4] & 15) | ((lm[j + 4] & 15) << 4));
  }
  u8* qs = b + blk::q4_k::qs;
  std::memset(qs, 0, 128);
  for (int e = 0; e < kGroups * kGroup; ++e) {
    const int j = e / kGroup;
    const float dl = d * static_cast<float>(ls[j]), ml = dmin * static_cast<float>(lm[j]);
    const int q = dl > 0.0f ? std::clamp(static_cast<int>(std::lround((x[e] + ml) / dl)), 0, 15) : 0;
    // Groups 2k and 2k + 1 share 32 bytes: the low nibbles, then the high ones.
    qs[32 * (e / 64) + e % 32] |= static_cast<u8>((j & 1) ? q << 4 : q);
  }
}

}  // namespace

bool can_quantize_to(DType t) {
  return t == DType::Q4_0 || t == DType::Q4_1 || t == DType::Q5_0 || t == DType::Q5_1 || t == DType::Q8_0 ||
         t == DType::Q4_K;
}

void quantize_row_ref(DType t, const float* src, void* dst, int64_t n) {
  void (*fn)(const float*, u8*) = nullptr;
  switch (t) {
    case DType::Q4_0: fn = q4_0; break;
    case DType::Q4_1: fn = q4_1; break;
    case DType::Q5_0: fn = q5_0; break;
    case DType::Q5_1: fn = q5_1; break;
    case DType::Q8_0: fn = q8_0; break;
    case DType::Q4_K: fn = q4_k; break;
    default:
      throw std::invalid_argument(std::string("quantize_row_ref: cannot quantize to ") + dtype_name(t));
  }
  const DTypeInfo& info = dtype_info(t);
  if (n % info.block_size != 0)
    throw std::invalid_argument("quantize_row_ref: row length is not a multiple of " + std::to_string(info.block_size));
  u8* out = static_cast<u8*>(dst);
  for (int64_t i = 0; i < n / info.block_size; ++i)
    fn(src + i * info.block_size, out + static_cast<size_t>(i) * info.type_size);
}

}  // namespace tandem::kernels::cpu
