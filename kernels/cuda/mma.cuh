// Integer tensor-core products (sm_80 and later): one warp multiplies a 16 x K int8 tile of
// weights with a K x 8 int8 tile of activations into 16 x 8 exact int32 sums. Fragment
// layouts: kernels/cuda/simt/simt.hpp (the emulator's model of the instruction), as the
// PTX ISA documents them. Every lane of the warp must call, with the same control flow.
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

}  // namespace tandem::kernels::TANDEM_CUDA_NS::dev
