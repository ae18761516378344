// matmul_small: y[t][r] = sum_c x[t][c] * W[r][c] for up to 16 tokens per weight read, for
// every weight type. One warp per weight row (4 rows per block of 128 threads), grid.y over
// chunks of 16 tokens. Lane l owns the weight blocks (or, for float weights, the columns)
// l, l+32, l+64, ... of the row and keeps one partial sum per token; the 32 partials are
// then added in a fixed tree (dev::tree_sum32). Which lane does what depends on the row
// length only, never on the number of tokens, so a token's result is the same bits
// whether it is computed alone or with 15 others (batch invariance).
//
// Quantized weights use the CPU backend's integer formulation: activations quantized to
// int8 blocks (quantize_act), exact integer dot products per block, and the block's float
// contribution computed with the same operations as kernels/cpu/matmul_scalar.cpp; only
// the order in which the per-block contributions are summed differs from the CPU.
#include "kernels/cuda/dequant.cuh"
#include "kernels/cuda/ops.hpp"

namespace tandem::kernels::TANDEM_CUDA_NS {
namespace {

constexpr int kWarps = 4;
constexpr int kMT = ops::kSmallMTokens;

struct MatmulArgs {
  const uint8_t* w;
  size_t w_stride;
  int64_t rows, cols;
  const float* x;  // float weights
  int64_t ldx;
  const int8_t* q;  // quantized weights: codes [n][cols] and scales [n][cols/block]
  const float* d;
  int64_t n;
  float* y;
  int64_t ldy;
};

template <int T>
__global__ void __launch_bounds__(kWarps * 32) matmul_small_kernel(MatmulArgs a) {
  __shared__ float red[kWarps][2][kMT][dev::kWarp];
  const int warp = threadIdx.x / dev::kWarp, lane = threadIdx.x % dev::kWarp;
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kWarps + warp;
  if (r >= a.rows) return;  // the whole warp leaves together
  const int64_t t0 = static_cast<int64_t>(blockIdx.y) * kMT;
  const int mt = static_cast<int>(a.n - t0 < kMT ? a.n - t0 : kMT);
  const uint8_t* wr = a.w + static_cast<size_t>(r) * a.w_stride;
  float acc[kMT], off[kMT];
  for (int m = 0; m < kMT; ++m) acc[m] = 0.0f, off[m] = 0.0f;
  constexpr int qk = dev::Geo<T>::qk;
  if constexpr (qk == 1) {
    for (int64_t c = lane; c < a.cols; c += dev::kWarp) {
      const float wv = dev::dequant_elem<T>(wr + c * dev::Geo<T>::bytes, 0);
      for (int m = 0; m < kMT; ++m)
        if (m < mt) acc[m] += wv * a.x[(t0 + m) * a.ldx + c];
    }
  } else if constexpr (qk == 32) {
    const int64_t nb = a.cols / 32;
    for (int64_t b = lane; b < nb; b += dev::kWarp) {
      dev::Q32Dec wb;
      dev::decode_q32<T>(wr + b * dev::Geo<T>::bytes, wb);
      for (int m = 0; m < kMT; ++m) {
        if (m >= mt) continue;
        const int8_t* xq = a.q + (t0 + m) * a.cols + 32 * b;
        const float xd = a.d[(t0 + m) * nb + b];
        int isum = 0, qsum = 0;
        for (int j = 0; j < 32; ++j) isum += wb.q[j] * xq[j], qsum += xq[j];
        acc[m] += (wb.d * xd) * static_cast<float>(isum);
        off[m] += wb.c * (xd * static_cast<float>(qsum));
      }
    }
  } else {
    const int64_t nb = a.cols / 256;
    for (int64_t b = lane; b < nb; b += dev::kWarp) {
      dev::KDec wb;
      dev::decode_k<T>(wr + b * dev::Geo<T>::bytes, wb);
      for (int m = 0; m < kMT; ++m) {
        if (m >= mt) continue;
        const int8_t* xq = a.q + (t0 + m) * a.cols + 256 * b;
        const float xd = a.d[(t0 + m) * nb + b];
        int isum = 0, msum = 0;
        for (int g = 0; g < 16; ++g) {
          int dot = 0, bsum = 0;
          for (int i = 0; i < 16; ++i) dot += wb.u[16 * g + i] * xq[16 * g + i], bsum += xq[16 * g + i];
          isum += wb.sc[g] * dot;
          msum += wb.mn[g] * bsum;
        }
        acc[m] += xd * (wb.d * static_cast<float>(isum) - wb.dm * static_cast<float>(msum));
      }
    }
  }
  for (int m = 0; m < kMT; ++m)
    if (m < mt) red[warp][0][m][lane] = acc[m], red[warp][1][m][lane] = off[m];
  __syncwarp();
  if (lane < mt) {
    float s = dev::tree_sum32(red[warp][0][lane]);
    if constexpr (qk == 32) s = s + dev::tree_sum32(red[warp][1][lane]);
    a.y[(t0 + lane) * a.ldy + r] = s;
  }
}

template <int T>
__global__ void dequant_rows_kernel(const uint8_t* w, size_t w_stride, int64_t r0, int64_t cols, float* tile) {
  const int64_t r = blockIdx.x;
  const uint8_t* wr = w + static_cast<size_t>(r0 + r) * w_stride;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) tile[r * cols + c] = dev::dequant_row_elem<T>(wr, c);
}

}  // namespace

void ops::matmul_small(Stream s, DType t, const uint8_t* w, size_t w_stride, int64_t rows, int64_t cols,
                       const float* x, int64_t ldx, const int8_t* q, const float* d, int64_t n, F32Rows y) {
  if (rows == 0 || n == 0) return;
  const MatmulArgs a{w, w_stride, rows, cols, x, ldx, q, d, n, y.p, y.ld};
  const dim3 grid(static_cast<unsigned>((rows + kWarps - 1) / kWarps), static_cast<unsigned>((n + kMT - 1) / kMT));
  dev::dispatch_wtype(t, [&](auto wt) {
    TANDEM_LAUNCH(matmul_small_kernel<decltype(wt)::value>, grid, kWarps * 32, 0, static_cast<cudaStream_t>(s))(a);
  });
}

void ops::dequant_rows(Stream s, DType t, const uint8_t* w, size_t w_stride, int64_t r0, int64_t nr, int64_t cols,
                       float* tile) {
  if (nr == 0) return;
  dev::dispatch_wtype(t, [&](auto wt) {
    TANDEM_LAUNCH(dequant_rows_kernel<decltype(wt)::value>, static_cast<unsigned>(nr), 256, 0,
                  static_cast<cudaStream_t>(s))(w, w_stride, r0, cols, tile);
  });
}

}  // namespace tandem::kernels::TANDEM_CUDA_NS
