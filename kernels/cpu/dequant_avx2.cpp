// AVX2 dequantization for the types that are common as embedding tables (F16, BF16, Q4_0,
// Q8_0, Q4_K, Q6_K); the rest fall back to the reference. The float operations are the
// reference's, in the same order and uncontracted, so results are bit-identical.
#include "kernels/cpu/matmul_impl.hpp"
#include "kernels/cpu/quant_blocks.hpp"
#include "kernels/cpu/simd_avx2.hpp"

// (compiled with -ffp-contract=off, as every SIMD kernel file: kernels/CMakeLists.txt)

namespace tandem::kernels::cpu::mm {
namespace {

using namespace avx2;
using u8 = uint8_t;

// 8 codes starting at p (unsigned or signed bytes) as floats, minus off.
static inline __m256 codes8_u(const u8* p, int off) {
  const __m256i v = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
  return _mm256_cvtepi32_ps(_mm256_sub_epi32(v, _mm256_set1_epi32(off)));
}
static inline __m256 codes8_s(const u8* p) {
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}

void q4_0(const u8* b, float* y) {
  alignas(32) u8 c[32];
  const __m128i q = loadu128(b + blk::q4_0::qs);
  _mm256_store_si256(reinterpret_cast<__m256i*>(c),
                     _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(q, 4), q), _mm256_set1_epi8(0x0f)));
  const __m256 d = _mm256_set1_ps(f16(b + blk::q4_0::d));
  for (int k = 0; k < 4; ++k) _mm256_storeu_ps(y + 8 * k, _mm256_mul_ps(d, codes8_u(c + 8 * k, 8)));
}

void q8_0(const u8* b, float* y) {
  const __m256 d = _mm256_set1_ps(f16(b + blk::q8_0::d));
  for (int k = 0; k < 4; ++k) _mm256_storeu_ps(y + 8 * k, _mm256_mul_ps(codes8_s(b + blk::q8_0::qs + 8 * k), d));
}

void q4_k(const u8* b, float* y) {
  const float d = f16(b + blk::q4_k::d), dmin = f16(b + blk::q4_k::dmin);
  const blk::K4Scales k = blk::unpack_k4_scales(b + blk::q4_k::scales);
  alignas(32) u8 c[64];
  for (int g = 0; g < 4; ++g) {
    const __m256i q = loadu(b + blk::q4_k::qs + 32 * g);
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    _mm256_store_si256(reinterpret_cast<__m256i*>(c), _mm256_and_si256(q, m4));
    _mm256_store_si256(reinterpret_cast<__m256i*>(c + 32), _mm256_and_si256(_mm256_srli_epi16(q, 4), m4));
    for (int h = 0; h < 2; ++h) {
      const int j = 2 * g + h;
      const __m256 dl = _mm256_set1_ps(d * static_cast<float>(blk::byte_of(k.sc, j)));
      const __m256 ml = _mm256_set1_ps(dmin * static_cast<float>(blk::byte_of(k.mn, j)));
      for (int i = 0; i < 4; ++i)
        _mm256_storeu_ps(y + 32 * j + 8 * i, _mm256_sub_ps(_mm256_mul_ps(dl, codes8_u(c + 32 * h + 8 * i, 0)), ml));
    }
  }
}

void q6_k(const u8* b, float* y) {
  const float d = f16(b + blk::q6_k::d);
  const int8_t* sc = reinterpret_cast<const int8_t*>(b + blk::q6_k::scales);
  const __m256i m4 = _mm256_set1_epi8(0x0f), m30 = _mm256_set1_epi8(0x30);
  alignas(32) u8 c[128];
  for (int h = 0; h < 2; ++h) {
    const __m256i l0 = loadu(b + blk::q6_k::ql + 64 * h), l1 = loadu(b + blk::q6_k::ql + 64 * h + 32);
    const __m256i hb = loadu(b + blk::q6_k::qh + 32 * h);
    auto* cv = reinterpret_cast<__m256i*>(c);
    _mm256_store_si256(cv + 0, _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_and_si256(_mm256_slli_epi16(hb, 4), m30)));
    _mm256_store_si256(cv + 1, _mm256_or_si256(_mm256_and_si256(l1, m4), _mm256_and_si256(_mm256_slli_epi16(hb, 2), m30)));
    _mm256_store_si256(cv + 2, _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4), _mm256_and_si256(hb, m30)));
    _mm256_store_si256(cv + 3, _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                                               _mm256_and_si256(_mm256_srli_epi16(hb, 2), m30)));
    for (int g = 0; g < 8; ++g) {  // groups of 16 within this half
      const __m256 dl = _mm256_set1_ps(d * static_cast<float>(sc[8 * h + g]));
      for (int i = 0; i < 2; ++i)
        _mm256_storeu_ps(y + 128 * h + 16 * g + 8 * i, _mm256_mul_ps(dl, codes8_u(c + 16 * g + 8 * i, 32)));
    }
  }
}

}  // namespace

bool avx2_dequant(DType t, const void* src, float* dst, int64_t n) {
  const u8* p = static_cast<const u8*>(src);
  switch (t) {
    case DType::F16: {
      int64_t i = 0;
      for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(loadu128(p + 2 * i)));
      for (; i < n; ++i) dst[i] = f16(p + 2 * i);
      return true;
    }
    case DType::BF16: {
      int64_t i = 0;
      for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(loadu128(p + 2 * i)), 16)));
      for (; i < n; ++i) {
        const uint32_t bits = static_cast<uint32_t>(blk::u16_at(p + 2 * i)) << 16;
        __builtin_memcpy(dst + i, &bits, 4);
      }
      return true;
    }
    default:
      break;
  }
  void (*fn)(const u8*, float*) = nullptr;
  int bs = 0, ts = 0;
  switch (t) {
    case DType::Q4_0: fn = q4_0, bs = 32, ts = blk::q4_0::size; break;
    case DType::Q8_0: fn = q8_0, bs = 32, ts = blk::q8_0::size; break;
    case DType::Q4_K: fn = q4_k, bs = 256, ts = blk::q4_k::size; break;
    case DType::Q6_K: fn = q6_k, bs = 256, ts = blk::q6_k::size; break;
    default: return false;
  }
  if (n % bs != 0) return false;  // the reference reports the error
  for (int64_t i = 0; i < n / bs; ++i) fn(p + i * ts, dst + i * bs);
  return true;
}

}  // namespace tandem::kernels::cpu::mm
