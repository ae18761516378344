// The engine's counter-based noise (engine/sampling/gumbel.cpp: PositionNoise::uniform) and
// its portable logarithm on the device, operation for operation (IEEE double, no
// contraction: the kernels are built with --fmad=false): the same u and log bits, so
// coupled sampling on the device picks the CPU's token from the same probabilities.
#pragma once
#include <cstdint>

#include "kernels/cuda/common.cuh"

namespace tandem::kernels::TANDEM_CUDA_NS::dev {

constexpr uint64_t kGamma = 0x9e3779b97f4a7c15ULL;
__device__ __forceinline__ uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}
__device__ __forceinline__ double noise_uniform(uint64_t seed, int64_t position, int32_t token) {
  const uint64_t row = mix64(mix64(seed + kGamma) + static_cast<uint64_t>(position) * kGamma);
  const uint64_t h = mix64(row + (static_cast<uint64_t>(static_cast<uint32_t>(token)) + 1) * kGamma);
  return (static_cast<double>(h >> 11) + 0.5) * 0x1.0p-53;
}
// ln x for finite x > 0 (u and -ln u here are never 0, 1, inf or NaN).
__device__ __forceinline__ double portable_log(double x) {
  int e = 0;
  double m = frexp(x, &e);
  if (m < 0.70710678118654752440) {
    m *= 2.0;
    --e;
  }
  const double s = (m - 1.0) / (m + 1.0);
  const double s2 = s * s;
  double t = 1.0 / 23.0;
  for (int k = 21; k >= 1; k -= 2) t = t * s2 + 1.0 / k;
  constexpr double kLn2Hi = 6.93147180369123816490e-01;
  constexpr double kLn2Lo = 1.90821492927058770002e-10;
  return (e * kLn2Hi + 2.0 * s * t) + e * kLn2Lo;
}

}  // namespace tandem::kernels::TANDEM_CUDA_NS::dev
