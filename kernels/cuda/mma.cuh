// Tensor-core products (sm_80 and later). Integer: one warp multiplies a 16 x K int8 tile of
// weights with a K x 8 int8 tile of activations into 16 x 8 exact int32 sums. TF32: a 16 x 8
// tile by an 8 x 8 one into float sums. Fragment layouts: kernels/cuda/simt/simt.hpp (the
// emulator's models of the instructions), as the PTX ISA documents them. Every lane of the
// warp must call, with the same control flow.
#pragma once
#include "kernels/cuda/common.cuh"

namespace tandem::kernels::TANDEM_CUDA_NS::dev {

// d = A B + c, K = 32: a[4], b[2] as mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32.
__device__ __forceinline__ void mma_s8_k32(int (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2],
                                           const int (&c)[4]) {
#if TANDEM_SIMT_EMULATED
  ::tandem::simt::mma_s8<32>(d, a, b, c);
#elif defined(__CUDA_ARCH__)
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%10,%11,%12,%13};\n"
      : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "r"(c[0]), "r"(c[1]), "r"(c[2]),
        "r"(c[3]));
#endif
}

// d = A B + c, K = 16: a[2], b[1] as mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32.
__device__ __forceinline__ void mma_s8_k16(int (&d)[4], const uint32_t (&a)[2], const uint32_t (&b)[1],
                                           const int (&c)[4]) {
#if TANDEM_SIMT_EMULATED
  ::tandem::simt::mma_s8<16>(d, a, b, c);
#elif defined(__CUDA_ARCH__)
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%7,%8,%9,%10};\n"
      : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(b[0]), "r"(c[0]), "r"(c[1]), "r"(c[2]), "r"(c[3]));
#endif
}

// Float tensor-core products on TF32 (sm_80 and later): x rounded to TF32 (cvt.rna.tf32.f32:
// 10 fraction bits, ties away from zero), as float bits.
__device__ __forceinline__ uint32_t to_tf32(float x) {
#if TANDEM_SIMT_EMULATED
  return ::tandem::simt::tf32_rna(x);
#elif defined(__CUDA_ARCH__)
  uint32_t r;
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
  return r;
#else
  return 0u;  // host pass of nvcc: never called
#endif
}

// v = p[0] + p[1] + p[2] exactly, as TF32 values (float bits). An infinity or NaN is kept
// whole in p[0] (the CPU's product of it, not inf - inf), as is a finite v so close to
// float's largest value that its TF32 rounding is infinite.
__device__ __forceinline__ void split3_tf32(float v, uint32_t (&p)[3]) {
  p[0] = to_tf32(v);
  if ((p[0] & 0x7f800000u) == 0x7f800000u) {
    p[1] = p[2] = 0u;
    return;
  }
  const float r = v - __uint_as_float(p[0]);  // exact: p[0] is v to 11 bits
  p[1] = to_tf32(r);
  p[2] = to_tf32(r - __uint_as_float(p[1]));  // exact, and at most 2 bits wide
}

// A float as an operand's TF32 parts for mma_tf32_split: three (split3_tf32), or one where
// the values are TF32 already (F16 and BF16 ones).
template <int Parts>
__device__ __forceinline__ void tf32_parts(float v, uint32_t (&p)[3]) {
  if constexpr (Parts == 3) split3_tf32(v, p);
  else p[0] = to_tf32(v), p[1] = p[2] = 0u;
}

// d = A B + c, 16 x 8 x 8 on TF32 values: a[4], b[2] as
// mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 (layouts: simt::mma_tf32).
__device__ __forceinline__ void mma_tf32_k8(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2],
                                            const float (&c)[4]) {
#if TANDEM_SIMT_EMULATED
  ::tandem::simt::mma_tf32(d, a, b, c);
#elif defined(__CUDA_ARCH__)
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%10,%11,%12,%13};\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]), "f"(c[2]),
        "f"(c[3]));
#endif
}

// One k-step of a split-TF32 product (ops/matmul_mma_float.cu, ops/paged_attention.cu): a[p],
// b[p] the A and B fragments of operand part p (A has AParts, B BParts: 1 when the operand's
// values are TF32 already, else 3). main = A0 B0 + main; small = Ai Bj + small for (i, j) =
// (0, 1), (0, 2), (1, 0), (1, 1), (2, 0) where both parts exist: in this order, on the device
// and in the emulator's model (which exchanges the fragments once for all of them).
template <int AParts, int BParts>
__device__ __forceinline__ void mma_tf32_split(float (&main)[4], float (&small)[4], const uint32_t (&a)[3][4],
                                               const uint32_t (&b)[3][2]) {
#if TANDEM_SIMT_EMULATED
  ::tandem::simt::mma_tf32_split<AParts, BParts>(main, small, a, b);
#else
  mma_tf32_k8(main, a[0], b[0], main);
  if constexpr (BParts == 3) {
    mma_tf32_k8(small, a[0], b[1], small);
    mma_tf32_k8(small, a[0], b[2], small);
  }
  if constexpr (AParts == 3) {
    mma_tf32_k8(small, a[1], b[0], small);
    if constexpr (BParts == 3) mma_tf32_k8(small, a[1], b[1], small);
    mma_tf32_k8(small, a[2], b[0], small);
  }
#endif
}

}  // namespace tandem::kernels::TANDEM_CUDA_NS::dev
