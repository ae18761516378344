// Activation quantization for the integer matmul paths, scalar version, and the layout
// of the quantized rows (see matmul_impl.hpp). The SIMD versions (act_quant_avx2.cpp)
// produce the same bits: symmetric int8 with d = amax/127, codes round(x * 127/amax)
// rounded to nearest-even, so every ISA sees identical activations.
#include <cmath>

#include "kernels/cpu/matmul_impl.hpp"

namespace tandem::kernels::cpu::mm {

Family family(DType t) {
  switch (t) {
    case DType::F32:
    case DType::F16:
    case DType::BF16:
      return Family::Float;
    case DType::Q4_0:
    case DType::Q4_1:
    case DType::Q5_0:
    case DType::Q5_1:
    case DType::Q8_0:
      return Family::Q32;
    case DType::Q2_K:
    case DType::Q3_K:
    case DType::Q4_K:
    case DType::Q5_K:
    case DType::Q6_K:
      return Family::QK;
    default:
      return Family::None;
  }
}

ActLayout act_layout(Family f, int64_t C) {
  ActLayout l;
  l.C = C;
  l.block = f == Family::QK ? 256 : 32;
  l.nb = C / l.block;
  l.d_off = static_cast<size_t>(C);
  l.aux_off = l.d_off + sizeof(float) * static_cast<size_t>(l.nb);
  const size_t nb = static_cast<size_t>(l.nb);
  if (f == Family::QK) {
    l.fsum_off = l.aux_off + sizeof(int16_t) * 16 * nb;
    l.bs32_off = l.fsum_off + sizeof(float) * 8 * nb;
    l.off8_off = l.bs32_off + sizeof(int16_t) * 8 * nb;
    l.row_bytes = l.off8_off + sizeof(int32_t) * 32 * nb;
  } else {
    l.fsum_off = l.aux_off + sizeof(float) * nb;
    l.bs32_off = l.off8_off = l.fsum_off;
    l.row_bytes = l.fsum_off;
  }
  l.row_bytes = (l.row_bytes + 63) & ~size_t{63};
  return l;
}

namespace {
// Shared by both block sizes: scale of a block and its codes. Below 1e-30 a block counts as
// zero, so 127/amax never overflows.
float quant_block(const float* x, int n, int8_t* q) {
  float amax = 0.0f;
  for (int i = 0; i < n; ++i) amax = std::fmax(amax, std::fabs(x[i]));
  const float id = amax > 1e-30f ? 127.0f / amax : 0.0f;
  for (int i = 0; i < n; ++i) q[i] = static_cast<int8_t>(std::nearbyint(x[i] * id));
  return amax > 1e-30f ? amax / 127.0f : 0.0f;
}
}  // namespace

void scalar_quant_q32(const float* x, const ActLayout& l, uint8_t* row) {
  int8_t* q = reinterpret_cast<int8_t*>(row);
  float* d = reinterpret_cast<float*>(row + l.d_off);
  float* s = reinterpret_cast<float*>(row + l.aux_off);
  for (int64_t b = 0; b < l.nb; ++b) {
    d[b] = quant_block(x + 32 * b, 32, q + 32 * b);
    int sum = 0;
    for (int i = 0; i < 32; ++i) sum += q[32 * b + i];
    s[b] = d[b] * static_cast<float>(sum);
  }
}

void scalar_quant_qk(const float* x, const ActLayout& l, uint8_t* row) {
  int8_t* q = reinterpret_cast<int8_t*>(row);
  float* d = reinterpret_cast<float*>(row + l.d_off);
  int16_t* bs = reinterpret_cast<int16_t*>(row + l.aux_off);
  float* fs = reinterpret_cast<float*>(row + l.fsum_off);
  int16_t* bs32 = reinterpret_cast<int16_t*>(row + l.bs32_off);
  int32_t* off8 = reinterpret_cast<int32_t*>(row + l.off8_off);
  for (int64_t b = 0; b < l.nb; ++b) {
    d[b] = quant_block(x + 256 * b, 256, q + 256 * b);
    // Sums over each 8 codes; the 16- and 32-element sums are built from them.
    int s8[32];
    for (int k = 0; k < 32; ++k) {
      s8[k] = 0;
      for (int i = 0; i < 8; ++i) s8[k] += q[256 * b + 8 * k + i];
      off8[32 * b + k] = -32 * s8[k];
    }
    for (int g = 0; g < 16; ++g) bs[16 * b + g] = static_cast<int16_t>(s8[2 * g] + s8[2 * g + 1]);
    for (int j = 0; j < 8; ++j) {
      bs32[8 * b + j] = static_cast<int16_t>(bs[16 * b + 2 * j] + bs[16 * b + 2 * j + 1]);
      fs[8 * b + j] = d[b] * static_cast<float>(bs32[8 * b + j]);
    }
  }
}

}  // namespace tandem::kernels::cpu::mm
