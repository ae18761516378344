// AVX2 matmul kernels for float weights (F32, F16, BF16); activations stay in f32.
// Eight weights are converted once (F16C / shift) and used for every token of a group of
// up to 4. Two accumulators per token (even and odd 8-column chunks) hide FMA latency.
#include "kernels/cpu/float_loads_avx2.hpp"
#include "kernels/cpu/matmul_impl.hpp"
#include "kernels/cpu/simd_avx2.hpp"

// Float rounding must be exactly what is written (no a*b+c contraction), the same for every
// token-group size: SIMD kernel files are compiled with -ffp-contract=off (kernels/CMakeLists.txt).

namespace tandem::kernels::cpu::mm {
namespace {

using namespace avx2;
using u8 = uint8_t;

using F32 = F32Loads;
using F16 = F16Loads;
using BF16 = BF16Loads;

template <class L, int TN>
static void row_group(const Args& a, const u8* wr, int64_t r, int64_t t0) {
  const float* x[TN];
  __m256 a0[TN], a1[TN];
  float tail[TN];
  for (int t = 0; t < TN; ++t) {
    x[t] = a.x + (t0 + t) * a.ldx;
    a0[t] = a1[t] = _mm256_setzero_ps();
    tail[t] = 0.0f;
  }
  int64_t c = 0;
  for (; c + 16 <= a.C; c += 16) {
    const __m256 w0 = L::load8(wr, c), w1 = L::load8(wr, c + 8);
    for (int t = 0; t < TN; ++t) {
      a0[t] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x[t] + c), a0[t]);
      a1[t] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x[t] + c + 8), a1[t]);
    }
  }
  if (c + 8 <= a.C) {
    const __m256 w0 = L::load8(wr, c);
    for (int t = 0; t < TN; ++t) a0[t] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x[t] + c), a0[t]);
    c += 8;
  }
  for (; c < a.C; ++c) {
    const float w = L::load1(wr, c);
    for (int t = 0; t < TN; ++t) tail[t] = __builtin_fmaf(w, x[t][c], tail[t]);
  }
  for (int t = 0; t < TN; ++t) a.y[(t0 + t) * a.ldy + r] = hsum(_mm256_add_ps(a0[t], a1[t])) + tail[t];
}

template <class L>
void rows(const Args& a, int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
  for (int64_t r = r0; r < r1; ++r) {
    const u8* wr = a.w + static_cast<size_t>(r) * a.w_stride;
    int64_t t = t0;
    for (; t + 4 <= t1; t += 4) row_group<L, 4>(a, wr, r, t);
    switch (t1 - t) {
      case 3: row_group<L, 3>(a, wr, r, t); break;
      case 2: row_group<L, 2>(a, wr, r, t); break;
      case 1: row_group<L, 1>(a, wr, r, t); break;
      default: break;
    }
  }
}

}  // namespace

RowsFn avx2_rows_float(DType t) {
  switch (t) {
    case DType::F32: return rows<F32>;
    case DType::F16: return rows<F16>;
    case DType::BF16: return rows<BF16>;
    default: return nullptr;
  }
}

}  // namespace tandem::kernels::cpu::mm
