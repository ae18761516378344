// AVX2 Q4_0 quantization: what `--draft-type auto` (the default) and `q4_0` do to a draft's
// matrices as it loads (engine/model/requantize.cpp), bit for bit quantize_row_ref's:
// - the scale from the signed element of largest magnitude (the first of equal ones);
// - each code trunc(x * id + 8.5) with the product and sum taken in double and rounded once
//   to float, as the reference (gguf-py's numpy) does, then clamped to 0..15.
// Blocks holding a NaN or an infinity, or whose inverse scale is not finite, go to the
// reference, whose comparisons and conversions define what they become.
#include <immintrin.h>

#include <cmath>
#include <cstring>

#include "kernels/cpu/fp16.hpp"
#include "kernels/cpu/matmul_impl.hpp"
#include "kernels/cpu/quant.hpp"
#include "kernels/cpu/quant_blocks.hpp"

// (compiled with -ffp-contract=off, as every SIMD kernel file: kernels/CMakeLists.txt;
// the double multiply and add below must not fuse)

namespace tandem::kernels::cpu::mm {
namespace {

using u8 = uint8_t;

// 8 codes: trunc(float(double(x) * id + 8.5)) clamped to 0..15.
inline __m256i codes8(__m256 x, __m256d id) {
  const __m256d half8 = _mm256_set1_pd(8.5);
  const __m256d lo = _mm256_add_pd(_mm256_mul_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(x)), id), half8);
  const __m256d hi = _mm256_add_pd(_mm256_mul_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(x, 1)), id), half8);
  const __m256 f = _mm256_set_m128(_mm256_cvtpd_ps(hi), _mm256_cvtpd_ps(lo));
  const __m256i c = _mm256_cvttps_epi32(f);
  return _mm256_min_epi32(_mm256_max_epi32(c, _mm256_setzero_si256()), _mm256_set1_epi32(15));
}

// One block of 32; false when the reference must do it.
bool q4_0_block(const float* x, u8* b) {
  const __m256 sign = _mm256_set1_ps(-0.0f), inf = _mm256_set1_ps(INFINITY);
  __m256 v[4], a[4];
  int finite = 0xff;
  for (int i = 0; i < 4; ++i) {
    v[i] = _mm256_loadu_ps(x + 8 * i);
    a[i] = _mm256_andnot_ps(sign, v[i]);
    finite &= _mm256_movemask_ps(_mm256_cmp_ps(a[i], inf, _CMP_LT_OQ));  // false for NaN and inf
  }
  if (finite != 0xff) return false;
  __m256 m = _mm256_max_ps(_mm256_max_ps(a[0], a[1]), _mm256_max_ps(a[2], a[3]));
  m = _mm256_max_ps(m, _mm256_permute2f128_ps(m, m, 1));
  m = _mm256_max_ps(m, _mm256_shuffle_ps(m, m, _MM_SHUFFLE(1, 0, 3, 2)));
  m = _mm256_max_ps(m, _mm256_shuffle_ps(m, m, _MM_SHUFFLE(2, 3, 0, 1)));  // every lane: the largest |x|
  uint32_t at = 0;
  for (int i = 0; i < 4; ++i)
    at |= static_cast<uint32_t>(_mm256_movemask_ps(_mm256_cmp_ps(a[i], m, _CMP_EQ_OQ))) << (8 * i);
  const float max = x[__builtin_ctz(at)];  // the first element of that magnitude, with its sign
  const float d = max / -8.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  if (!std::isfinite(id)) return false;
  const uint16_t h = f32_to_fp16(d);
  std::memcpy(b + blk::q4_0::d, &h, 2);
  const __m256d idd = _mm256_set1_pd(static_cast<double>(id));
  // Byte j holds code j (low nibble) and code j + 16 (high nibble).
  const __m256i lo = _mm256_or_si256(codes8(v[0], idd), _mm256_slli_epi32(codes8(v[2], idd), 4));
  const __m256i hi = _mm256_or_si256(codes8(v[1], idd), _mm256_slli_epi32(codes8(v[3], idd), 4));
  alignas(32) int32_t c[16];
  _mm256_store_si256(reinterpret_cast<__m256i*>(c), lo);
  _mm256_store_si256(reinterpret_cast<__m256i*>(c + 8), hi);
  u8* qs = b + blk::q4_0::qs;
  for (int j = 0; j < 16; ++j) qs[j] = static_cast<u8>(c[j]);
  return true;
}

}  // namespace

bool avx2_quantize(DType t, const float* src, void* dst, int64_t n) {
  if (t != DType::Q4_0 || n % 32 != 0) return false;
  auto* out = static_cast<u8*>(dst);
  const size_t bytes = blk::q4_0::size;
  for (int64_t i = 0; i < n / 32; ++i) {
    const float* x = src + i * 32;
    u8* b = out + static_cast<size_t>(i) * bytes;
    if (!q4_0_block(x, b)) quantize_row_ref(DType::Q4_0, x, b, 32);
  }
  return true;
}

}  // namespace tandem::kernels::cpu::mm
