// The walk every matmul kernel set shares: weight rows r0..r1, and for each row the tokens
// t0..t1 in groups of G::kGroup (as many as the kernel's registers hold) and one tail group
// of the rest, each group computed by G::run<TN>. Included by SIMD kernel files: everything is
// `static` or instantiated with their own (anonymous-namespace) types, so nothing merges
// across instruction sets at link time.
#pragma once
#include <cstddef>
#include <cstdint>

#include "kernels/cpu/matmul_impl.hpp"

namespace tandem::kernels::cpu::mm {

template <class G, int TN>
static inline void row_tail(const Args& a, const uint8_t* wr, int64_t r, int64_t t, int64_t left) {
  if constexpr (TN > 0) {
    if (left == TN) return G::template run<TN>(a, wr, r, t);
    row_tail<G, TN - 1>(a, wr, r, t, left);
  }
}

// A RowsFn for the kernel whose token groups G runs.
template <class G>
static void rows_by_groups(const Args& a, int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
  for (int64_t r = r0; r < r1; ++r) {
    const uint8_t* wr = a.w + static_cast<size_t>(r) * a.w_stride;
    int64_t t = t0;
    for (; t + G::kGroup <= t1; t += G::kGroup) G::template run<G::kGroup>(a, wr, r, t);
    if (t < t1) row_tail<G, G::kGroup - 1>(a, wr, r, t, t1 - t);
  }
}

}  // namespace tandem::kernels::cpu::mm
