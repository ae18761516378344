// exp(x) for x <= 0, one definition for the host sampler (engine/sampling/sampler.cpp) and the
// device's sampling kernels (kernels/cuda/ops/sampling.cu): the weights of a distribution
// must agree bit for bit on both sides (the device verifier and the host verifier pick the
// same tokens from the same probabilities). Built as host C++ (and under the SIMT emulator)
// and by nvcc as a __host__ __device__ function; C++17, since nvcc builds the kernels so.
// Callers compile it without FMA contraction (nvcc --fmad=false, -ffp-contract=off), so every
// a * b + c rounds twice, as written.
#pragma once
#include <cstdint>

#if defined(__CUDACC__)
#define TANDEM_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define TANDEM_HOST_DEVICE inline
#endif

namespace tandem::kernels {

TANDEM_HOST_DEVICE uint32_t float_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  return __builtin_bit_cast(uint32_t, f);
#endif
}
TANDEM_HOST_DEVICE float bits_float(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  return __builtin_bit_cast(float, u);
#endif
}

// exp(x) for x <= 0 (x = -inf allowed), within ~2 ulp; Cephes' expf polynomial. Branch-free,
// so the host compiler vectorises the loop over the vocabulary, and ours, so the result is
// the same on every platform (libm's last bit differs between libraries). Results below
// FLT_MIN (x < -87.3) are flushed to 0: such a token's probability is below 1e-38 and would
// not survive renormalisation in float anyway.
TANDEM_HOST_DEVICE float exp_nonpos(float x) {
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2Hi = 0.693359375f;  // ln 2 split so n * kLn2Hi is exact for |n| <= 127
  constexpr float kLn2Lo = -2.12194440e-4f;
  constexpr float kMin = -87.3365448f;   // ln(FLT_MIN)
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: adding and subtracting rounds to integer
  // Underflow test and selects on the bits, as masks: float compares and branches would stop
  // GCC from vectorising (it may not if-convert possibly-trapping float code). For x <= 0 the
  // bits grow as x falls, so "x < kMin" is "bits > bits(kMin)"; -inf is caught too.
  const uint32_t xb = float_bits(x);
  const uint32_t keep = 0u - static_cast<uint32_t>(xb <= float_bits(kMin));
  const float xc = bits_float(xb & keep);           // underflow → compute exp(0), masked below
  const float n = (xc * kLog2e + kRound) - kRound;  // round(x / ln 2), in [-126, 0]
  const float r = (xc - n * kLn2Hi) - n * kLn2Lo;   // |r| <= ln2 / 2
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const float scale = bits_float(static_cast<uint32_t>(static_cast<int32_t>(n) + 127) << 23);
  return bits_float(float_bits(p * scale) & keep);
}

}  // namespace tandem::kernels
