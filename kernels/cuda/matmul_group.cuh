// The matrices of one grouped matmul launch (ops::MatmulWeight, up to kMaxMatmulGroup) as a
// kernel argument: grid.x runs over each matrix's blocks of rows in turn, and a block finds
// its matrix from the prefix of block counts. Everything else a kernel does is per matrix,
// so a row's result is what a launch of its matrix alone computes.
#pragma once
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/dequant.cuh"
#include "kernels/cuda/ops.hpp"
#include "kernels/cuda/qkv_epilogue.cuh"

namespace tandem::kernels::TANDEM_CUDA_NS::dev {

struct MatmulGroup {
  const uint8_t* w[ops::kMaxMatmulGroup];
  size_t w_stride[ops::kMaxMatmulGroup];
  int64_t rows[ops::kMaxMatmulGroup];
  float* y[ops::kMaxMatmulGroup];
  int64_t ldy[ops::kMaxMatmulGroup];
  unsigned first_block[ops::kMaxMatmulGroup + 1];  // grid.x blocks before matrix g
  bool second[ops::kMaxMatmulGroup];                // a two-type launch: matrix g is of the second type
  int n = 0;
  bool accumulate = false;  // y = y + result (a residual connection), else y = result
};

// What a kernel writes for a result r: r, or y + r (add(dst, dst, tmp)'s order).
__device__ __forceinline__ void store_result(const MatmulGroup& g, float* y, float r) {
  *y = g.accumulate ? *y + r : r;
}

// The rows of a tensor-core tile (16 at r0) a lane holds, gid and gid + 8, as result slots,
// and the weight rows they read: epilogue_row's (pair order for a rotated member), row r0 for
// a slot past the matrix (its result is not stored).
struct TileRows {
  int64_t slot[2];
  const uint8_t* w[2];
};
__device__ __forceinline__ TileRows tile_rows(const MatmulGroup& g, const ops::QkvEpilogue* epi, int m, int64_t r0,
                                              int gid) {
  TileRows t;
  for (int h = 0; h < 2; ++h) {
    t.slot[h] = r0 + gid + 8 * h;
    t.w[h] = g.w[m] + static_cast<size_t>(epilogue_row(epi, m, t.slot[h] < g.rows[m] ? t.slot[h] : r0)) * g.w_stride[m];
  }
  return t;
}

// A tensor-core tile's result r for (slot, token t) of member m (matmul_mma, matmul_mma_float):
// through the q/k/v epilogue when epi is set, given the partner slot's result from lane ^ 4
// (every lane must call: the shuffle), else stored; slots and tokens past the ends are not.
__device__ __forceinline__ void store_tile_result(const MatmulGroup& g, const ops::QkvEpilogue* epi, int m,
                                                  int64_t slot, int64_t rows, int64_t t, int64_t n, float r) {
  if (epi) {
    const float partner = __shfl_xor_sync(0xffffffffu, r, 4);
    if (t < n && slot < rows) epilogue_store(*epi, m, slot, t, r, partner, g.y[m], g.ldy[m]);
  } else if (t < n && slot < rows) {
    store_result(g, &g.y[m][t * g.ldy[m] + slot], r);
  }
}

// After a warp's tensor-core tile (16 slots at r0, tokens [t0, t1) of chunk `chunk`, clipped
// to the matrix and to n) is stored: head_norm_arrive for it (every lane calls).
__device__ __forceinline__ void tile_head_norm_arrive(const MatmulGroup& g, const ops::QkvEpilogue& e, int m,
                                                      int64_t r0, int64_t rows, unsigned chunk, int64_t t0,
                                                      int64_t t1, int64_t n) {
  if (r0 >= rows || t0 >= n) return;
  const int ns = static_cast<int>(rows - r0 < 16 ? rows - r0 : 16);
  head_norm_arrive(e, m, r0, ns, chunk, t0, t1 < n ? t1 : n, g.y[m], g.ldy[m]);
}

// Host side: the group of `n_w` matrices with `rows_per_block` rows per block; accumulate:
// results are added to what y holds.
inline MatmulGroup make_group(const ops::MatmulWeight* ws, int n_w, int64_t rows_per_block, bool accumulate) {
  MatmulGroup g;
  g.n = n_w;
  g.accumulate = accumulate;
  g.first_block[0] = 0;
  for (int i = 0; i < n_w; ++i) {
    g.w[i] = ws[i].w, g.w_stride[i] = ws[i].w_stride, g.rows[i] = ws[i].rows;
    g.y[i] = ws[i].y.p, g.ldy[i] = ws[i].y.ld;
    g.second[i] = false;
    g.first_block[i + 1] = g.first_block[i] + static_cast<unsigned>((ws[i].rows + rows_per_block - 1) / rows_per_block);
  }
  return g;
}

// Host side, for the quantized matmuls: calls f(T1, T2) for the launch of `ws` (T2 == T1
// when every member has one type and layout; else the pair of ops::matmul_pair, T1 the
// Q4_K or Q5_0 side), after marking the members of T2 in g.second. False (nothing called)
// for members no launch takes together.
template <int A, int B>
constexpr bool kPairLaunch =
    (kBase<A> == kQ4_K && kBase<B> == kQ6_K) || (kBase<A> == kQ5_0 && kBase<B> == kQ8_0 && kPlanes<A> == kPlanes<B>);
template <typename F>
bool dispatch_launch_types(const ops::MatmulWeight* ws, int n_w, MatmulGroup& g, F&& f) {
  const auto same = [](const ops::MatmulWeight& x, const ops::MatmulWeight& y) {
    return x.type == y.type && x.planes == y.planes;
  };
  int other = -1;
  for (int i = 1; i < n_w && other < 0; ++i)
    if (!same(ws[i], ws[0])) other = i;
  if (other < 0) return dispatch_wtype(ws[0].type, ws[0].planes, [&](auto t) { f(t, t); });
  const bool first_leads = ws[0].type == DType::Q4_K || ws[0].type == DType::Q5_0;
  const ops::MatmulWeight &a = first_leads ? ws[0] : ws[other], &b = first_leads ? ws[other] : ws[0];
  for (int i = 0; i < n_w; ++i) {
    if (!same(ws[i], a) && !same(ws[i], b)) return false;
    g.second[i] = same(ws[i], b);
  }
  bool called = false;
  dispatch_wtype(a.type, a.planes, [&](auto ta) {
    using TA = decltype(ta);
    dispatch_wtype(b.type, b.planes, [&](auto tb) {
      if constexpr (kPairLaunch<TA::value, decltype(tb)::value>) {
        f(TA{}, tb);
        called = true;
      }
    });
  });
  return called;
}

// The matrix of this block and the block's index within it.
__device__ __forceinline__ int group_member(const MatmulGroup& g, unsigned bx, unsigned& local) {
  int m = 0;
  while (m + 1 < g.n && bx >= g.first_block[m + 1]) ++m;
  local = bx - g.first_block[m];
  return m;
}

}  // namespace tandem::kernels::TANDEM_CUDA_NS::dev
