// The walk the tiled kernels share (pack_tiles.hpp): the 16-row groups that rows r0..r1
// touch, and for each the tokens t0..t1 in groups of G::kGroup and one tail group of the
// rest, each computed by G::run<TN>(args, group's first tile, group's first row, lanes to
// store, first token). A range may start or end inside a group: its other lanes are
// computed and dropped. Rows after the last whole group are stored as in the file and go to
// `rows_after`, the row kernel of the same activations. Included by SIMD kernel files:
// everything is `static` or instantiated with their own types (see row_groups.hpp).
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "kernels/cpu/matmul_impl.hpp"
#include "kernels/cpu/pack_tiles.hpp"

namespace tandem::kernels::cpu::mm {

template <class G, int TN>
static inline void tile_tail(const Args& a, const uint8_t* gw, int64_t g, uint16_t keep, int64_t t, int64_t left) {
  if constexpr (TN > 0) {
    if (left == TN) return G::template run<TN>(a, gw, g, keep, t);
    tile_tail<G, TN - 1>(a, gw, g, keep, t, left);
  }
}

template <class G>
static void rows_by_tiles(const Args& a, int64_t r0, int64_t r1, int64_t t0, int64_t t1, RowsFn rows_after) {
  const int64_t full = tiled_rows(a.R), end = std::min(r1, full);
  for (int64_t g = r0 / kTileRows * kTileRows; g < end; g += kTileRows) {
    const uint8_t* gw = a.w + static_cast<size_t>(g) * a.w_stride;
    const int lo = static_cast<int>(std::max(r0, g) - g), hi = static_cast<int>(std::min(end, g + kTileRows) - g);
    const auto keep = static_cast<uint16_t>(((1u << hi) - 1u) & ~((1u << lo) - 1u));
    int64_t t = t0;
    for (; t + G::kGroup <= t1; t += G::kGroup) G::template run<G::kGroup>(a, gw, g, keep, t);
    if (t < t1) tile_tail<G, G::kGroup - 1>(a, gw, g, keep, t, t1 - t);
  }
  if (r1 > full) rows_after(a, std::max(r0, full), r1, t0, t1);
}

}  // namespace tandem::kernels::cpu::mm
