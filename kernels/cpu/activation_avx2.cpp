// The AVX2 gated activations (see activation_impl.hpp), 8 elements at a time with the
// vector exp (avx2::exp8, relative error about 2e-7) instead of one libm call each: in a
// decode pass of the Qwen 1.5B that call was 28 x 8960 per token, about 3% of a one-token
// pass and more of a verification pass, whose matmuls cost little more per token.
//
//   SiLU:       y = g / (1 + exp(-g)) * u                              (as the scalar twin)
//   GELU tanh:  0.5 g (1 + tanh(z)) = g / (1 + exp(-2z)),  z = sqrt(2/pi) (g + 0.044715 g^3)
// The GELU identity avoids 1 + tanh(z), which cancels for z well below 0 (the scalar twin
// loses most of a tiny result's digits there; this keeps them).
// The row's last n % 8 elements go through the same vector code on a padded copy, so every
// element's result is the same bits wherever it sits in a row.
#include <immintrin.h>

#include <algorithm>

#include "kernels/cpu/activation_impl.hpp"
#include "kernels/cpu/simd_avx2.hpp"

// Float rounding exactly as written (-ffp-contract=off, kernels/CMakeLists.txt).

namespace tandem::kernels::cpu {
namespace {

template <Activation A>
static inline __m256 act8(__m256 g, __m256 u) {
  const __m256 one = _mm256_set1_ps(1.0f);
  __m256 a = g;  // the argument of the logistic: g, or 2z
  if constexpr (A == Activation::GeluTanh) {
    const __m256 g3 = _mm256_mul_ps(_mm256_mul_ps(g, g), g);
    a = _mm256_mul_ps(_mm256_set1_ps(2.0f * 0.7978845608028654f),
                      _mm256_fmadd_ps(_mm256_set1_ps(0.044715f), g3, g));
  }
  const __m256 e = avx2::exp8(_mm256_sub_ps(_mm256_setzero_ps(), a));
  return _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(one, e)), u);
}

template <Activation A>
void rows(const float* g, const float* u, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, act8<A>(_mm256_loadu_ps(g + i), _mm256_loadu_ps(u + i)));
  if (i == n) return;
  alignas(32) float gt[8] = {}, ut[8] = {}, yt[8];
  std::copy(g + i, g + n, gt);
  std::copy(u + i, u + n, ut);
  _mm256_store_ps(yt, act8<A>(_mm256_load_ps(gt), _mm256_load_ps(ut)));
  std::copy(yt, yt + (n - i), y + i);
}

}  // namespace

void gated_act_row_avx2(const float* g, const float* u, float* y, int64_t n, Activation act) {
  if (act == Activation::SiLU) rows<Activation::SiLU>(g, u, y, n);
  else rows<Activation::GeluTanh>(g, u, y, n);
}

}  // namespace tandem::kernels::cpu
