// F16 <-> F32 row conversion, compiled per ISA like attention_impl.hpp (hence `static`: an
// inline function would be one definition for the linker, whichever ISA it was built for).
#pragma once
#include <cstdint>
#if defined(__F16C__)
#include <immintrin.h>
#endif
#include "kernels/cpu/fp16.hpp"

namespace tandem::kernels::cpu::convert_detail {

static inline void to_f32(const uint16_t* src, float* dst, int64_t n) {
  int64_t i = 0;
#if defined(__F16C__)
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
#endif
  for (; i < n; ++i) dst[i] = fp16_to_f32(src[i]);
}

static inline void to_f16(const float* src, uint16_t* dst, int64_t n) {
  int64_t i = 0;
#if defined(__F16C__)
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
#endif
  for (; i < n; ++i) dst[i] = f32_to_fp16(src[i]);
}

}  // namespace tandem::kernels::cpu::convert_detail
