// Helpers shared by every kernel file (kernels/cuda/ops/*.cu). Each kernel file is compiled
// twice: by nvcc for the device (namespace cuda_dev) and as host C++ under the SIMT
// emulator (namespace cuda_emu); TANDEM_CUDA_NS names the one being built.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kernels/cuda/simt/simt.hpp"

#ifndef TANDEM_CUDA_NS
#error "TANDEM_CUDA_NS must be defined (cuda_dev or cuda_emu) by the build"
#endif

// A device function kept out of line: one copy per kernel file instead of one in every
// instantiation of the kernels that call it (device code size, which the bundle carries).
#if TANDEM_SIMT_EMULATED
#define TANDEM_DEVICE_NOINLINE __attribute__((noinline))
#else
#define TANDEM_DEVICE_NOINLINE __noinline__
#endif

// A loop over a kernel's register tiles unrolled: indexed by a variable, a thread's array
// lives in local memory (global memory behind L1), not in registers.
// (On the host only a hint: clang warns where it cannot follow it, as in a loop with a break,
// so the emulated build under clang goes without.)
#if !TANDEM_SIMT_EMULATED
#define TANDEM_UNROLL _Pragma("unroll")
#elif defined(__clang__)
#define TANDEM_UNROLL
#else
#define TANDEM_UNROLL _Pragma("GCC unroll 16")
#endif

namespace tandem::kernels::TANDEM_CUDA_NS::dev {

// Bits of the device error word (see CudaBackend::check_errors): a kernel that meets a bad
// index does not write through it, sets its bit and carries on.
enum ErrorBits : int {
  kErrTokenId = 1,         // get_rows: id outside the table
  kErrKvSlot = 2,          // kv_store: slot outside the cache
  kErrAttnSequence = 4,    // paged_attention: sequence index outside the block table
  kErrAttnPosition = 8,    // paged_attention: position beyond the block table
  kErrAttnBlock = 16,      // paged_attention: block id outside the cache
  kErrVerify = 32,         // verify_greedy: draft count or rows out of range
  kErrMaskIndex = 64,      // mask_rows: row or mask index out of range
};

constexpr int kWarp = 32;

// The engine's rank key (engine/sampling/sampler.cpp): float order as int32, -0 == +0, NaN
// as -inf, so maxima and argmaxes are exact integer comparisons.
constexpr int32_t kNegInfKey = -0x7F800000;
__device__ __forceinline__ int32_t rank_key(float f) {
  const int32_t b = __float_as_int(f);
  const int32_t mag = b & 0x7FFFFFFF;
  const int32_t sign = b >> 31;
  const int32_t k = (mag ^ sign) - sign;
  return mag > 0x7F800000 ? kNegInfKey : k;
}

__device__ __forceinline__ int imin(int a, int b) { return a < b ? a : b; }
__device__ __forceinline__ int imax(int a, int b) { return a > b ? a : b; }
__device__ __forceinline__ float fmax2(float a, float b) { return a > b ? a : b; }

// Little-endian loads from byte addresses: quantization blocks put 16/32-bit fields at
// offsets that are not multiples of their size (Q5_0 qh at 2 of 22 bytes, Q3_K scales at
// 96 of 110), and the device faults on misaligned wide loads. 16-bit fields always sit at
// even offsets of even-sized blocks.
__device__ __forceinline__ uint32_t ld_u16(const uint8_t* p) { return *reinterpret_cast<const uint16_t*>(p); }
__device__ __forceinline__ uint32_t ld_u32(const uint8_t* p) {
  return uint32_t(p[0]) | (uint32_t(p[1]) << 8) | (uint32_t(p[2]) << 16) | (uint32_t(p[3]) << 24);
}

// Loads at addresses the weight layout keeps aligned (each caller says why): one 4- or
// 16-byte load, or two 2-byte ones, instead of four byte loads a word. A GPU faults on a
// misaligned wide load; the emulator checks the same and throws (simt::misaligned).
__device__ __forceinline__ void check_aligned(const void* p, unsigned bytes) {
#if TANDEM_SIMT_EMULATED
  if (reinterpret_cast<uintptr_t>(p) % bytes != 0) ::tandem::simt::misaligned(p, bytes);
#else
  (void)p, (void)bytes;
#endif
}
__device__ __forceinline__ uint32_t ld_u32_a4(const uint8_t* p) {
  check_aligned(p, 4);
#if TANDEM_SIMT_EMULATED
  uint32_t v;
  std::memcpy(&v, p, 4);  // host C++: no aliasing through uint32_t*
  return v;
#else
  return *reinterpret_cast<const uint32_t*>(p);
#endif
}
__device__ __forceinline__ uint32_t ld_u32_a2(const uint8_t* p) {
  check_aligned(p, 2);
  return ld_u16(p) | (ld_u16(p + 2) << 16);
}
// Sixteen bytes from a 16-aligned address as four little-endian words.
__device__ __forceinline__ void ld_u128_a16(const uint8_t* p, uint32_t (&w)[4]) {
  check_aligned(p, 16);
#if TANDEM_SIMT_EMULATED
  std::memcpy(w, p, 16);
#else
  const uint4 v = *reinterpret_cast<const uint4*>(p);
  w[0] = v.x, w[1] = v.y, w[2] = v.z, w[3] = v.w;
#endif
}

__device__ __forceinline__ float f16_to_f32(uint32_t bits) {
  return __half2float(__ushort_as_half(static_cast<unsigned short>(bits)));
}
__device__ __forceinline__ uint16_t f32_to_f16(float f) { return __half_as_ushort(__float2half_rn(f)); }
__device__ __forceinline__ float bf16_to_f32(uint32_t bits) { return __uint_as_float(bits << 16); }
__device__ __forceinline__ float ld_f16(const uint8_t* p) { return f16_to_f32(ld_u16(p)); }

// Butterfly over the warp: every lane gets the same result, in an order fixed by the lane
// numbering only.
__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o >= 1; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ double warp_sum(double v) {
  for (int o = 16; o >= 1; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
// The sum over a block of kThreads threads (every thread gets it): the warps' butterflies,
// then the warps' sums in warp order, so the same bits every run.
template <int kThreads>
__device__ double block_sum_double(double v) {
  __shared__ double sh[kThreads / kWarp];
  v = warp_sum(v);
  if (threadIdx.x % kWarp == 0) sh[threadIdx.x / kWarp] = v;
  __syncthreads();
  double r = sh[0];
  for (int w = 1; w < kThreads / kWarp; ++w) r += sh[w];
  __syncthreads();  // sh may be written again by the next call
  return r;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o >= 1; o /= 2) v = fmax2(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

}  // namespace tandem::kernels::TANDEM_CUDA_NS::dev
