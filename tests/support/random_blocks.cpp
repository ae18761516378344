#include "tests/support/random_blocks.hpp"

#include <cstring>
#include <random>
#include <stdexcept>
#include <string>

#include "kernels/cpu/fp16.hpp"

namespace tandem::test {
namespace {

using kernels::cpu::f32_to_bf16;
using kernels::cpu::f32_to_fp16;

struct Gen {
  std::mt19937_64 rng;
  float uniform(float lo, float hi) { return std::uniform_real_distribution<float>(lo, hi)(rng); }
  float sign() { return (rng() & 1) ? 1.0f : -1.0f; }
  // A scale magnitude around `mag` (0.5x to 1.5x), random sign if `signed_`.
  float around(float mag, bool signed_) { return uniform(0.5f, 1.5f) * mag * (signed_ ? sign() : 1.0f); }
  void put_f16(uint8_t* p, float v) {
    const uint16_t h = f32_to_fp16(v);
    p[0] = static_cast<uint8_t>(h & 0xff);
    p[1] = static_cast<uint8_t>(h >> 8);
  }
};

// Where the f16 scale fields of each block type are, and how large they should be so that
// dequantized values are of the order of `scale`. Every other byte is a random code or
// packed small scale; any bit pattern there is a valid block.
void fix_scales(DType t, uint8_t* b, float scale, Gen& g) {
  switch (t) {
    case DType::Q4_0: g.put_f16(b, g.around(scale / 8, true)); break;
    case DType::Q4_1:
      g.put_f16(b, g.around(scale / 15, false));
      g.put_f16(b + 2, -g.uniform(0.0f, scale));
      break;
    case DType::Q5_0: g.put_f16(b, g.around(scale / 16, true)); break;
    case DType::Q5_1:
      g.put_f16(b, g.around(scale / 31, false));
      g.put_f16(b + 2, -g.uniform(0.0f, scale));
      break;
    case DType::Q8_0: g.put_f16(b, g.around(scale / 127, true)); break;
    case DType::Q2_K:  // d, dmin at 80, 82; 4-bit scales and mins
      g.put_f16(b + 80, g.around(scale / (15 * 3), false));
      g.put_f16(b + 82, g.around(scale / 15, false));
      break;
    case DType::Q3_K: g.put_f16(b + 108, g.around(scale / (32 * 4), true)); break;
    case DType::Q4_K:
      g.put_f16(b, g.around(scale / (63 * 15), false));
      g.put_f16(b + 2, g.around(scale / 63, false));
      break;
    case DType::Q5_K:
      g.put_f16(b, g.around(scale / (63 * 31), false));
      g.put_f16(b + 2, g.around(scale / 63, false));
      break;
    case DType::Q6_K: g.put_f16(b + 208, g.around(scale / (128 * 32), true)); break;
    default: throw std::invalid_argument(std::string("random_blocks: unsupported type ") + dtype_name(t));
  }
}

}  // namespace

std::vector<uint8_t> random_blocks(DType t, int64_t n_elements, uint64_t seed, float scale) {
  const auto& info = dtype_info(t);
  if (n_elements % info.block_size != 0)
    throw std::invalid_argument("random_blocks: n_elements not a multiple of the block size");
  Gen g{std::mt19937_64(seed * 0x9e3779b97f4a7c15ull + static_cast<uint64_t>(t))};
  std::vector<uint8_t> out(row_bytes(t, n_elements));
  if (t == DType::F32 || t == DType::F16 || t == DType::BF16) {
    std::normal_distribution<float> nd(0.0f, scale);
    for (int64_t i = 0; i < n_elements; ++i) {
      const float v = nd(g.rng);
      uint8_t* p = out.data() + i * info.type_size;
      if (t == DType::F32) {
        std::memcpy(p, &v, 4);
      } else {
        const uint16_t h = t == DType::F16 ? f32_to_fp16(v) : f32_to_bf16(v);
        std::memcpy(p, &h, 2);
      }
    }
    return out;
  }
  for (auto& byte : out) byte = static_cast<uint8_t>(g.rng());
  for (size_t off = 0; off < out.size(); off += info.type_size) fix_scales(t, out.data() + off, scale, g);
  return out;
}

}  // namespace tandem::test
