// Device decoding of the GGUF weight formats (layouts: kernels/cpu/quant_blocks.hpp).
//
// dequant_elem: one element as float, with the float operations of the CPU reference
// (kernels/cpu/dequant_ref.cpp) in the same order; the kernels are compiled without FMA
// contraction (nvcc --fmad=false, host -ffp-contract=off), so results are bit-identical to
// dequantize_row_ref. Used by get_rows and by the tile dequantization of the GEMM path.
//
// The small-M matmul (ops/matmul_small.cu) reads the same fields as integer codes, scales
// and offset coefficients, as the CPU's integer kernels do (kernels/cpu/matmul_scalar.cpp),
// so that both compute each block's contribution from the same integers.
#pragma once
#include "kernels/cuda/common.cuh"
#include <type_traits>

#include "kernels/dtype.hpp"

namespace tandem::kernels::TANDEM_CUDA_NS::dev {

// Weight type ids as template parameters (GGML numbering, kernels/dtype.hpp).
enum WType : int {
  kF32 = 0, kF16 = 1, kQ4_0 = 2, kQ4_1 = 3, kQ5_0 = 6, kQ5_1 = 7, kQ8_0 = 8,
  kQ2_K = 10, kQ3_K = 11, kQ4_K = 12, kQ5_K = 13, kQ6_K = 14, kBF16 = 30,
  // Q4_0, Q5_0, Q8_0 and Q6_K rows in the planes layout (kernels/cuda/weight_planes.hpp): the
  // quantized matmuls only.
  kQ4_0P = 102, kQ5_0P = 106, kQ8_0P = 108, kQ6_KP = 114,
};
// Whether T is a planes layout, and the type whose blocks it holds.
template <int T> constexpr bool kPlanes = T == kQ4_0P || T == kQ5_0P || T == kQ8_0P || T == kQ6_KP;
template <int T> constexpr int kBase = kPlanes<T> ? T - 100 : T;

template <int T> struct Geo;
template <> struct Geo<kF32> { static constexpr int qk = 1, bytes = 4; };
template <> struct Geo<kF16> { static constexpr int qk = 1, bytes = 2; };
template <> struct Geo<kBF16> { static constexpr int qk = 1, bytes = 2; };
template <> struct Geo<kQ4_0> { static constexpr int qk = 32, bytes = 18; };
template <> struct Geo<kQ4_1> { static constexpr int qk = 32, bytes = 20; };
template <> struct Geo<kQ5_0> { static constexpr int qk = 32, bytes = 22; };
template <> struct Geo<kQ5_1> { static constexpr int qk = 32, bytes = 24; };
template <> struct Geo<kQ8_0> { static constexpr int qk = 32, bytes = 34; };
template <> struct Geo<kQ2_K> { static constexpr int qk = 256, bytes = 84; };
template <> struct Geo<kQ3_K> { static constexpr int qk = 256, bytes = 110; };
template <> struct Geo<kQ4_K> { static constexpr int qk = 256, bytes = 144; };
template <> struct Geo<kQ5_K> { static constexpr int qk = 256, bytes = 176; };
template <> struct Geo<kQ6_K> { static constexpr int qk = 256, bytes = 210; };
template <> struct Geo<kQ4_0P> { static constexpr int qk = 32, bytes = 18; };
template <> struct Geo<kQ5_0P> { static constexpr int qk = 32, bytes = 22; };
template <> struct Geo<kQ8_0P> { static constexpr int qk = 32, bytes = 34; };
template <> struct Geo<kQ6_KP> { static constexpr int qk = 256, bytes = 210; };

// Q4_K/Q5_K: 6-bit scale (is_min = 0) or min (1) of group j (0..7) from the 12 packed bytes.
__device__ __forceinline__ int k4_scale(const uint8_t* s, int j, int is_min) {
  if (j < 4) return s[j + 4 * is_min] & 63;
  const int lo = is_min ? (s[j + 4] >> 4) : (s[j + 4] & 0x0f);
  return lo | ((s[j - 4 + 4 * is_min] >> 6) << 4);
}
// Q3_K: unsigned 6-bit scale i (0..15); the scale is value - 32.
__device__ __forceinline__ int q3k_scale(const uint8_t* s, int i) {
  const int lo = i < 8 ? (s[i] & 0x0f) : (s[i - 8] >> 4);
  const int hi = (s[8 + i % 4] >> (2 * (i / 4))) & 3;
  return lo | (hi << 4);
}

// Element e (0 <= e < qk) of the block at b.
template <int T>
__device__ __forceinline__ float dequant_elem(const uint8_t* b, int e) {
  if constexpr (T == kF32) {
    return __uint_as_float(ld_u32(b));
  } else if constexpr (T == kF16) {
    return ld_f16(b);
  } else if constexpr (T == kBF16) {
    return bf16_to_f32(ld_u16(b));
  } else if constexpr (T == kQ4_0) {
    const int q = e < 16 ? (b[2 + e] & 0x0f) : (b[2 + e - 16] >> 4);
    return __fmul_rn(ld_f16(b), static_cast<float>(q - 8));
  } else if constexpr (T == kQ4_1) {
    const int q = e < 16 ? (b[4 + e] & 0x0f) : (b[4 + e - 16] >> 4);
    return __fadd_rn(__fmul_rn(ld_f16(b), static_cast<float>(q)), ld_f16(b + 2));
  } else if constexpr (T == kQ5_0 || T == kQ5_1) {
    constexpr int qh_off = T == kQ5_0 ? 2 : 4, qs_off = qh_off + 4;
    const uint32_t qh = ld_u32(b + qh_off);
    const int lo = e < 16 ? (b[qs_off + e] & 0x0f) : (b[qs_off + e - 16] >> 4);
    const int q = lo | static_cast<int>(((qh >> e) & 1u) << 4);
    if constexpr (T == kQ5_0) return __fmul_rn(ld_f16(b), static_cast<float>(q - 16));
    else return __fadd_rn(__fmul_rn(ld_f16(b), static_cast<float>(q)), ld_f16(b + 2));
  } else if constexpr (T == kQ8_0) {
    return __fmul_rn(static_cast<float>(static_cast<int8_t>(b[2 + e])), ld_f16(b));
  } else if constexpr (T == kQ2_K) {
    const int g = e / 16;
    const float dl = __fmul_rn(ld_f16(b + 80), static_cast<float>(b[g] & 0x0f));
    const float ml = __fmul_rn(ld_f16(b + 82), static_cast<float>(b[g] >> 4));
    const int q = (b[16 + 32 * (e / 128) + e % 32] >> (2 * ((e / 32) % 4))) & 3;
    return __fsub_rn(__fmul_rn(dl, static_cast<float>(q)), ml);
  } else if constexpr (T == kQ3_K) {
    const float dl = __fmul_rn(ld_f16(b + 108), static_cast<float>(q3k_scale(b + 96, e / 16) - 32));
    const int lo = (b[32 + 32 * (e / 128) + e % 32] >> (2 * ((e / 32) % 4))) & 3;
    const int hi = (b[e % 32] >> (e / 32)) & 1;
    return __fmul_rn(dl, static_cast<float>(lo - (hi ? 0 : 4)));
  } else if constexpr (T == kQ4_K || T == kQ5_K) {
    const int j = e / 32;
    const float dl = __fmul_rn(ld_f16(b), static_cast<float>(k4_scale(b + 4, j, 0)));
    const float ml = __fmul_rn(ld_f16(b + 2), static_cast<float>(k4_scale(b + 4, j, 1)));
    constexpr int qs_off = T == kQ4_K ? 16 : 48;
    const uint8_t byte = b[qs_off + 32 * (e / 64) + e % 32];
    int q = (j & 1) ? (byte >> 4) : (byte & 0x0f);
    if constexpr (T == kQ5_K) q |= ((b[16 + e % 32] >> j) & 1) << 4;
    return __fsub_rn(__fmul_rn(dl, static_cast<float>(q)), ml);
  } else {  // Q6_K
    const int half = e / 128, k = (e % 128) / 32, l = e % 32;
    const uint8_t lb = b[64 * half + l + 32 * (k & 1)];
    const int lo = k < 2 ? (lb & 0x0f) : (lb >> 4);
    const int hi = (b[128 + 32 * half + l] >> (2 * k)) & 3;
    const float dl = __fmul_rn(ld_f16(b + 208), static_cast<float>(static_cast<int8_t>(b[192 + e / 16])));
    return __fmul_rn(dl, static_cast<float>((lo | (hi << 4)) - 32));
  }
}

// Element c of a row.
template <int T>
__device__ __forceinline__ float dequant_row_elem(const uint8_t* row, int64_t c) {
  constexpr int qk = Geo<T>::qk;
  return dequant_elem<T>(row + (c / qk) * Geo<T>::bytes, static_cast<int>(c % qk));
}

}  // namespace tandem::kernels::TANDEM_CUDA_NS::dev

namespace tandem::kernels::TANDEM_CUDA_NS::dev {
// Host-side: calls f(std::integral_constant<int, T>{}) for the weight type t; false when t
// is no weight type.
template <typename F>
bool dispatch_wtype(DType t, F&& f) {
  switch (t) {
#define TANDEM_WT_CASE(name)                        \
  case DType::name:                                 \
    f(std::integral_constant<int, k##name>{});      \
    return true;
    TANDEM_WT_CASE(F32)
    TANDEM_WT_CASE(F16)
    TANDEM_WT_CASE(BF16)
    TANDEM_WT_CASE(Q4_0)
    TANDEM_WT_CASE(Q4_1)
    TANDEM_WT_CASE(Q5_0)
    TANDEM_WT_CASE(Q5_1)
    TANDEM_WT_CASE(Q8_0)
    TANDEM_WT_CASE(Q2_K)
    TANDEM_WT_CASE(Q3_K)
    TANDEM_WT_CASE(Q4_K)
    TANDEM_WT_CASE(Q5_K)
    TANDEM_WT_CASE(Q6_K)
#undef TANDEM_WT_CASE
    default:
      return false;
  }
}
// The same for the quantized matmuls, whose weights may be in the planes layout (planes:
// Q4_0, Q5_0, Q8_0 and Q6_K only; false for any other type).
template <typename F>
bool dispatch_wtype(DType t, bool planes, F&& f) {
  if (!planes) return dispatch_wtype(t, static_cast<F&&>(f));
  if (t == DType::Q4_0) f(std::integral_constant<int, kQ4_0P>{});
  else if (t == DType::Q5_0) f(std::integral_constant<int, kQ5_0P>{});
  else if (t == DType::Q8_0) f(std::integral_constant<int, kQ8_0P>{});
  else if (t == DType::Q6_K) f(std::integral_constant<int, kQ6_KP>{});
  else return false;
  return true;
}
}  // namespace tandem::kernels::TANDEM_CUDA_NS::dev
