// The machine's streaming read bandwidth, the roofline of decoding (every weight byte is
// read once per token): the figure bench_matmul and bench_forward set the kernels against.
#pragma once
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/cpu/thread_pool.hpp"

namespace tandem::bench {

// Sum of n bytes as 64-bit words, four independent AVX2 streams (n: a multiple of 128).
__attribute__((target("avx2"))) inline uint64_t read_sum(const uint8_t* p, size_t n) {
  __m256i a = _mm256_setzero_si256(), b = a, c = a, d = a;
  for (size_t i = 0; i + 128 <= n; i += 128) {
    a = _mm256_add_epi64(a, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i)));
    b = _mm256_add_epi64(b, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + 32)));
    c = _mm256_add_epi64(c, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + 64)));
    d = _mm256_add_epi64(d, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + 96)));
  }
  a = _mm256_add_epi64(_mm256_add_epi64(a, b), _mm256_add_epi64(c, d));
  return static_cast<uint64_t>(_mm256_extract_epi64(a, 0) + _mm256_extract_epi64(a, 3));
}

// One read of buf split over the pool's threads; the sums go to `sink` so nothing is elided.
inline void read_once(kernels::cpu::ThreadPool& pool, const std::vector<uint8_t>& buf, uint64_t* sink) {
  pool.run([&](int ith, int nth) {
    const size_t part = buf.size() / static_cast<size_t>(nth) / 128 * 128;
    sink[ith] = read_sum(buf.data() + part * static_cast<size_t>(ith), part);
  });
}

// GB/s of the median of `reps` reads of a 256 MB buffer (several times any L3 here) with
// the pool's threads: the median, as for the timings it is set against (on a shared
// machine single reads range widely). Needs AVX2 (every machine the CPU kernels target has it).
inline double read_bandwidth_gbs(kernels::cpu::ThreadPool& pool, int reps = 7) {
  std::vector<uint8_t> buf(size_t{256} << 20, 1);
  std::vector<uint64_t> sink(static_cast<size_t>(std::max(64, pool.size())));
  read_once(pool, buf, sink.data());  // fault the pages in
  std::vector<double> gbs;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    read_once(pool, buf, sink.data());
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    gbs.push_back(static_cast<double>(buf.size()) / s / 1e9);
  }
  volatile uint64_t keep = sink[0];
  (void)keep;
  std::sort(gbs.begin(), gbs.end());
  return gbs[gbs.size() / 2];
}

}  // namespace tandem::bench
