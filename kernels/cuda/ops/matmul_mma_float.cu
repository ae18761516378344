// matmul_mma_float: y[t][r] = sum_c x[t][c] * W[r][c] for float weights (F32, F16, BF16) on
// TF32 tensor cores, at every token count: decode passes too, so that a token's result is
// the same bits alone, in a verification pass or beside a prompt chunk (one kernel, one
// order of operations for every batch).
//
// Precision: an operand v is split into three TF32 values, v = v1 + v2 + v3 exactly (v1 its
// TF32 rounding, v2 that of v - v1, v3 the rest: 33 significant bits hold float's 24), so
// every product of parts is exact in float. F16 and BF16 weights are TF32 values already:
// w·x1 + w·x2 + w·x3 is w·x with nothing dropped (three products). F32 weights take the six
// products down to ~2^-33 of w·x (w1x1; w1x2, w2x1, w2x2, w1x3, w3x1). The w1x1 (or w·x1)
// products are summed per 32-column chunk and the chunks into a running total; the small
// terms into an accumulator of their own, added last: the rounding is that of float sums of
// the exact products, about as close to the CPU's dot products as their own order is.
//
// A block is one warp: 16 weight rows (one mma tile's, so decode has blocks for every SM)
// and 32 tokens (four tiles of 8). Per chunk of 32 columns a lane loads 8 consecutive
// columns of its two rows (gid and gid + 8) and of its token of each tile (16-byte loads
// where the layout allows), and the chunk's four k-steps take the lane's columns 2s and
// 2s + 1 as k = tid and k = tid + 4, for A and B alike: each (row, token) is summed over the
// same columns in the same order, chunk after chunk, whatever the batch.
#include "kernels/cuda/dequant.cuh"
#include "kernels/cuda/matmul_group.cuh"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/ops.hpp"
#include "kernels/cuda/qkv_epilogue.cuh"

namespace tandem::kernels::TANDEM_CUDA_NS {
namespace {

constexpr int kRows = 16;   // weight rows a block (one warp)
constexpr int kTiles = 4;   // token tiles of 8 a block
constexpr int kBlockTokens = 8 * kTiles;
constexpr int kChunk = 32;  // columns a k-chunk covers, 8 a lane

struct FloatMmaArgs {
  dev::MatmulGroup g;
  int64_t cols;
  const float* x;
  int64_t ldx;
  int64_t n;
  bool epi;  // e applies (the q/k/v projections of a layer)
  ops::QkvEpilogue e;
};

// Columns c .. c + 7 of a weight row as floats: two (F32) or one (F16, BF16) 16-byte loads
// when Vec (the caller checked alignment and that every chunk is whole), else element by
// element with zeros past the row's end.
template <int T, bool Vec>
__device__ __forceinline__ void load_w8(const uint8_t* row, int64_t c, int64_t cols, float (&w)[8]) {
  constexpr int bytes = dev::Geo<T>::bytes;
  if constexpr (Vec) {
    uint32_t u[4];
    dev::ld_u128_a16(row + c * bytes, u);
    if constexpr (T == dev::kF32) {
      uint32_t u2[4];
      dev::ld_u128_a16(row + c * bytes + 16, u2);
      for (int i = 0; i < 4; ++i) w[i] = __uint_as_float(u[i]), w[4 + i] = __uint_as_float(u2[i]);
    } else {
      for (int i = 0; i < 8; ++i) {
        const uint32_t h = (u[i / 2] >> (16 * (i % 2))) & 0xffffu;
        w[i] = T == dev::kF16 ? dev::f16_to_f32(h) : dev::bf16_to_f32(h);
      }
    }
  } else {
    for (int i = 0; i < 8; ++i) w[i] = c + i < cols ? dev::dequant_elem<T>(row + (c + i) * bytes, 0) : 0.0f;
  }
}

// Columns c .. c + 7 of an activation row (zeros past its end).
template <bool Vec>
__device__ __forceinline__ void load_x8(const float* xr, int64_t c, int64_t cols, float (&v)[8]) {
  if constexpr (Vec) {
    uint32_t u[4], u2[4];
    const uint8_t* p = reinterpret_cast<const uint8_t*>(xr + c);
    dev::ld_u128_a16(p, u);
    dev::ld_u128_a16(p + 16, u2);
    for (int i = 0; i < 4; ++i) v[i] = __uint_as_float(u[i]), v[4 + i] = __uint_as_float(u2[i]);
  } else {
    for (int i = 0; i < 8; ++i) v[i] = c + i < cols ? xr[c + i] : 0.0f;
  }
}

template <int T, bool Vec>
__global__ void __launch_bounds__(32) matmul_mma_float_kernel(const __grid_constant__ FloatMmaArgs a) {
  TANDEM_GRID_DEPENDENCY();
  constexpr int kWParts = T == dev::kF32 ? 3 : 1;  // F16 and BF16 weights are TF32 values
  const int lane = threadIdx.x, gid = lane / 4, tid = lane % 4;
  unsigned bx;
  const int m_of = dev::group_member(a.g, blockIdx.x, bx);
  const int64_t rows = a.g.rows[m_of];
  const int64_t r0 = static_cast<int64_t>(bx) * kRows;
  // This lane's slots of the A fragment and of the results, and the weight rows they read.
  const ops::QkvEpilogue* epi = a.epi ? &a.e : nullptr;
  const dev::TileRows tr = dev::tile_rows(a.g, epi, m_of, r0, gid);
  const int64_t(&slot)[2] = tr.slot;
  const uint8_t* const(&wrow)[2] = tr.w;
  const int64_t t0 = static_cast<int64_t>(blockIdx.y) * kBlockTokens;
  const int n_tiles = static_cast<int>((a.n - t0 + 7) / 8 < kTiles ? (a.n - t0 + 7) / 8 : kTiles);
  // Result i of tile j ((slot[i / 2], token t0 + 8j + 2tid + i % 2)): the main products'
  // total over the chunks so far, and the small terms'.
  float total[kTiles][4], small[kTiles][4];
  for (int j = 0; j < kTiles; ++j)
    for (int i = 0; i < 4; ++i) total[j][i] = 0.0f, small[j][i] = 0.0f;

  for (int64_t c0 = 0; c0 < a.cols; c0 += kChunk) {
    const int64_t c = c0 + 8 * tid;
    uint32_t wp[2][8][3];  // [row gid, gid + 8][column][part]
    for (int h = 0; h < 2; ++h) {
      float w[8];
      load_w8<T, Vec>(wrow[h], c, a.cols, w);
      for (int i = 0; i < 8; ++i) dev::tf32_parts<kWParts>(w[i], wp[h][i]);
    }
    for (int j = 0; j < kTiles; ++j) {  // a constant trip count: the sums stay in registers
      if (j >= n_tiles) break;
      const int64_t tb = t0 + 8 * j + gid;  // this lane's B-fragment token
      float xv[8];
      if (tb < a.n) {
        load_x8<Vec>(a.x + tb * a.ldx, c, a.cols, xv);
      } else {
        for (int i = 0; i < 8; ++i) xv[i] = 0.0f;
      }
      uint32_t xp[8][3];
      for (int i = 0; i < 8; ++i) dev::tf32_parts<3>(xv[i], xp[i]);
      float chunk[4] = {0.0f, 0.0f, 0.0f, 0.0f};  // this chunk's main products
      for (int s = 0; s < 4; ++s) {
        // A: parts of the lane's columns 2s, 2s + 1 of both rows; B: of its token's.
        uint32_t af[3][4] = {}, bf[3][2];
        for (int p = 0; p < kWParts; ++p)
          af[p][0] = wp[0][2 * s][p], af[p][1] = wp[1][2 * s][p], af[p][2] = wp[0][2 * s + 1][p],
          af[p][3] = wp[1][2 * s + 1][p];
        for (int p = 0; p < 3; ++p) bf[p][0] = xp[2 * s][p], bf[p][1] = xp[2 * s + 1][p];
        dev::mma_tf32_split<kWParts, 3>(chunk, small[j], af, bf);
      }
      for (int i = 0; i < 4; ++i) total[j][i] = total[j][i] + chunk[i];
    }
  }
  TANDEM_UNROLL
  for (int j = 0; j < kTiles; ++j)
    TANDEM_UNROLL
    for (int i = 0; i < 4; ++i) {
      const int64_t t = t0 + 8 * j + 2 * tid + i % 2;
      // Slot s ^ 1 is lane ^ 4's, for the same tokens.
      dev::store_tile_result(a.g, epi, m_of, slot[i / 2], rows, t, a.n, total[j][i] + small[j][i]);
    }
  if (epi) dev::tile_head_norm_arrive(a.g, *epi, m_of, r0, rows, blockIdx.y, t0, t0 + kBlockTokens, a.n);
}

}  // namespace

void ops::matmul_mma_float(Stream s, DType t, const MatmulWeight* ws, int n_w, int64_t cols, const float* x,
                           int64_t ldx, int64_t n, bool accumulate, const QkvEpilogue* epi) {
  const FloatMmaArgs a{dev::make_group(ws, n_w, kRows, accumulate), cols, x, ldx, n, epi != nullptr,
                       epi ? *epi : QkvEpilogue{}};
  if (a.g.first_block[n_w] == 0 || n == 0) return;
  // 16-byte loads where every chunk is whole and every row (weights, activations) starts
  // 16-byte aligned; the values loaded, and so the results, are the same either way.
  bool vec = cols % kChunk == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0 && ldx % 4 == 0;
  for (int i = 0; i < n_w; ++i)
    vec = vec && reinterpret_cast<uintptr_t>(ws[i].w) % 16 == 0 && ws[i].w_stride % 16 == 0;
  const dim3 grid(a.g.first_block[n_w], static_cast<unsigned>((n + kBlockTokens - 1) / kBlockTokens));
  dev::dispatch_wtype(t, [&](auto wt) {
    constexpr int T = decltype(wt)::value;
    if constexpr (dev::Geo<T>::qk == 1) {
      void (*kernel)(FloatMmaArgs) = vec ? matmul_mma_float_kernel<T, true> : matmul_mma_float_kernel<T, false>;
      TANDEM_LAUNCH(kernel, grid, 32, 0, static_cast<cudaStream_t>(s))(a);
    }
  });
}

}  // namespace tandem::kernels::TANDEM_CUDA_NS
