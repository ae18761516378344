// The machine's int8 multiply-add peak, the compute roofline of a verification pass: at
// n tokens a pass does n multiply-adds per weight, so once n is large enough it is bound by
// this rather than by the read bandwidth (bench/read_bandwidth.hpp). Measured with the
// instruction the kernels use: vpdpbusd on 512-bit vectors where the CPU has AVX-512 VNNI,
// else vpmaddubsw + vpmaddwd + vpaddd on 256-bit ones (32 multiply-adds per triple).
#pragma once
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <vector>

#include "kernels/cpu/quant.hpp"
#include "kernels/cpu/thread_pool.hpp"

namespace tandem::bench {

// 12 independent accumulator chains, so the latency is hidden and the ports are the limit
// (Intel cores with two 512-bit ports issue two vpdpbusd per cycle). The loops over the
// chains must be unrolled: left rolled, GCC kept the accumulators on the stack and the
// figure came out at half the peak (a store-to-load round trip per multiply-add).
__attribute__((target("avx512f,avx512bw,avx512vnni"))) inline int64_t int8_macs_vnni(int64_t iters, int32_t* sink) {
  __m512i acc[12];
  #pragma GCC unroll 12
  for (int i = 0; i < 12; ++i) acc[i] = _mm512_set1_epi32(i);
  __m512i a = _mm512_set1_epi8(3), b = _mm512_set1_epi8(5);
  for (int64_t it = 0; it < iters; ++it) {
    #pragma GCC unroll 12
    for (int i = 0; i < 12; ++i) acc[i] = _mm512_dpbusd_epi32(acc[i], a, b);
    asm volatile("" : "+v"(a));  // a new operand every round: nothing is hoisted
  }
  __m512i s = acc[0];
  #pragma GCC unroll 12
  for (int i = 1; i < 12; ++i) s = _mm512_add_epi32(s, acc[i]);
  alignas(64) int32_t v[16];
  _mm512_store_si512(v, s);
  *sink = v[0] + v[15];
  return iters * 12 * 64;
}

__attribute__((target("avx2"))) inline int64_t int8_macs_avx2(int64_t iters, int32_t* sink) {
  __m256i acc[8];
  #pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) acc[i] = _mm256_set1_epi32(i);
  __m256i a = _mm256_set1_epi8(3), b = _mm256_set1_epi8(5);
  const __m256i ones = _mm256_set1_epi16(1);
  for (int64_t it = 0; it < iters; ++it) {
    #pragma GCC unroll 8
    for (int i = 0; i < 8; ++i)
      acc[i] = _mm256_add_epi32(acc[i], _mm256_madd_epi16(_mm256_maddubs_epi16(a, b), ones));
    asm volatile("" : "+v"(a));
  }
  __m256i s = acc[0];
  #pragma GCC unroll 8
  for (int i = 1; i < 8; ++i) s = _mm256_add_epi32(s, acc[i]);
  alignas(32) int32_t v[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(v), s);
  *sink = v[0] + v[7];
  return iters * 8 * 32;
}

// Whether the peak is measured with vpdpbusd: at the kernels' AVX-512 level (which needs VNNI).
inline bool int8_peak_uses_vnni() {
  return kernels::cpu::active_isa() == kernels::cpu::Isa::Avx512 && __builtin_cpu_supports("avx512vnni");
}
inline const char* int8_peak_instruction() { return int8_peak_uses_vnni() ? "vpdpbusd zmm" : "vpmaddubsw ymm"; }

// Multiply-adds per second (1e9) with all of the pool's threads, median of `reps` runs of
// about 50 ms each, at the kernels' active level (AVX-512 VNNI or AVX2).
inline double int8_peak_gmacs(kernels::cpu::ThreadPool& pool, int reps = 5) {
  const bool vnni = int8_peak_uses_vnni();
  const int64_t iters = vnni ? 4'000'000 : 6'000'000;
  std::vector<int32_t> sink(static_cast<size_t>(std::max(64, pool.size())));
  std::vector<double> g;
  for (int r = 0; r < reps + 1; ++r) {  // the first run wakes the cores up
    std::vector<int64_t> macs(sink.size());
    const auto t0 = std::chrono::steady_clock::now();
    pool.run([&](int ith, int) {
      macs[static_cast<size_t>(ith)] = vnni ? int8_macs_vnni(iters, &sink[static_cast<size_t>(ith)])
                                            : int8_macs_avx2(iters, &sink[static_cast<size_t>(ith)]);
    });
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    double total = 0;
    for (int64_t m : macs) total += static_cast<double>(m);
    if (r > 0) g.push_back(total / s / 1e9);
  }
  volatile int32_t keep = sink[0];
  (void)keep;
  std::sort(g.begin(), g.end());
  return g[g.size() / 2];
}

}  // namespace tandem::bench
