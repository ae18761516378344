// Loading float weights (F32, F16, BF16) as f32: eight at a time (AVX2, F16C) and one at a
// time, for the float matmul kernels of every SIMD level (matmul_float_avx2.cpp,
// matmul_float_avx512.cpp), which must convert alike to compute the same bits. Internal
// linkage (an anonymous namespace): each kernel file keeps its own copy, compiled with its
// own target flags.
#pragma once
#include <cstdint>

#include "kernels/cpu/simd_avx2.hpp"

namespace tandem::kernels::cpu::mm {
namespace {

struct F32Loads {
  static inline __m256 load8(const uint8_t* row, int64_t c) {
    return _mm256_loadu_ps(reinterpret_cast<const float*>(row) + c);
  }
  static inline float load1(const uint8_t* row, int64_t c) {
    float f;
    __builtin_memcpy(&f, row + 4 * c, 4);
    return f;
  }
};
struct F16Loads {
  static inline __m256 load8(const uint8_t* row, int64_t c) { return _mm256_cvtph_ps(avx2::loadu128(row + 2 * c)); }
  static inline float load1(const uint8_t* row, int64_t c) { return avx2::f16(row + 2 * c); }
};
struct BF16Loads {
  static inline __m256 load8(const uint8_t* row, int64_t c) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(avx2::loadu128(row + 2 * c)), 16));
  }
  static inline float load1(const uint8_t* row, int64_t c) {
    uint16_t h;
    __builtin_memcpy(&h, row + 2 * c, 2);
    const uint32_t bits = static_cast<uint32_t>(h) << 16;
    float f;
    __builtin_memcpy(&f, &bits, 4);
    return f;
  }
};

}  // namespace
}  // namespace tandem::kernels::cpu::mm
