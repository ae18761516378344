// matmul_small: y[t][r] = sum_c x[t][c] * W[r][c] for up to 16 tokens per weight read, for
// every weight type. One warp per weight row (4 rows per block of 128 threads), grid.y over
// chunks of 16 tokens. Float weights: lane l owns columns l, l+32, ...; quantized weights:
// 4 lanes share a 32-block, 8 lanes a 256-block (so rows of few K-quant blocks still keep
// the warp busy), and lane group g owns blocks g, g+8 (g+4), .... Each lane keeps one
// partial sum per token; the 32 partials are added in a fixed tree (dev::tree_sum32).
// Which lane does what depends on the row length only, never on the number of tokens, so
// a token's result is the same bits whether it is computed alone or with 15 others
// (batch invariance).
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

// A lane's share of a 32-block: sub-lane s (0..3) of the block's 4 lanes owns elements
// 4s..4s+3 and 16+4s..16+4s+3 (one 4-byte run of nibbles). Unsigned codes as the CPU's
// integer kernels use them (the offset or min is applied through c).
template <int T>
__device__ __forceinline__ int q32_code(const uint8_t* b, int e) {
  if constexpr (T == dev::kQ8_0) {
    return static_cast<int8_t>(b[2 + e]);
  } else if constexpr (T == dev::kQ4_0 || T == dev::kQ4_1) {
    const uint8_t* qs = b + (T == dev::kQ4_0 ? 2 : 4);
    return e < 16 ? (qs[e] & 0x0f) : (qs[e - 16] >> 4);
  } else {
    constexpr int qh_off = T == dev::kQ5_0 ? 2 : 4;
    const uint8_t* qs = b + qh_off + 4;
    const int lo = e < 16 ? (qs[e] & 0x0f) : (qs[e - 16] >> 4);
    return lo | (((b[qh_off + e / 8] >> (e % 8)) & 1) << 4);
  }
}

// K-quant block fields (as kernels/cpu/matmul_scalar.cpp uses them:
// y += dx * (d * sum_g sc[g]*dot_g - dm * sum_g mn[g]*bsum_g)): d, dm, the scale and min
// coefficient of group g of 16, and the unsigned code of element e.
template <int T>
__device__ __forceinline__ void k_scales(const uint8_t* b, int g, float& d, float& dm, int& sc, int& mn) {
  if constexpr (T == dev::kQ2_K) {
    d = dev::ld_f16(b + 80), dm = dev::ld_f16(b + 82);
    sc = b[g] & 0x0f, mn = b[g] >> 4;
  } else if constexpr (T == dev::kQ3_K) {
    d = dm = dev::ld_f16(b + 108);
    sc = dev::q3k_scale(b + 96, g) - 32, mn = 4 * sc;
  } else if constexpr (T == dev::kQ4_K || T == dev::kQ5_K) {
    d = dev::ld_f16(b), dm = dev::ld_f16(b + 2);
    sc = dev::k4_scale(b + 4, g / 2, 0), mn = dev::k4_scale(b + 4, g / 2, 1);
  } else {
    d = dm = dev::ld_f16(b + 208);
    sc = static_cast<int8_t>(b[192 + g]), mn = 32 * sc;
  }
}
template <int T>
__device__ __forceinline__ int k_code(const uint8_t* b, int e) {
  if constexpr (T == dev::kQ2_K) {
    return (b[16 + 32 * (e / 128) + e % 32] >> (2 * ((e / 32) % 4))) & 3;
  } else if constexpr (T == dev::kQ3_K) {
    const int lo = (b[32 + 32 * (e / 128) + e % 32] >> (2 * ((e / 32) % 4))) & 3;
    return lo | (((b[e % 32] >> (e / 32)) & 1) << 2);
  } else if constexpr (T == dev::kQ4_K || T == dev::kQ5_K) {
    constexpr int qs_off = T == dev::kQ4_K ? 16 : 48;
    const uint8_t v = b[qs_off + 32 * (e / 64) + e % 32];
    int q = ((e / 32) & 1) ? (v >> 4) : (v & 0x0f);
    if constexpr (T == dev::kQ5_K) q |= ((b[16 + e % 32] >> (e / 32)) & 1) << 4;
    return q;
  } else {
    const int half = e / 128, k = (e % 128) / 32, l = e % 32;
    const uint8_t lb = b[64 * half + l + 32 * (k & 1)];
    const int lo = k < 2 ? (lb & 0x0f) : (lb >> 4);
    return lo | (((b[128 + 32 * half + l] >> (2 * k)) & 3) << 4);
  }
}

// Quantized weights: the lanes sharing a block each compute the integer dot products of
// their elements; the parts meet in shared memory and the block's first lane adds them
// (exact integers: the CPU's sums) and accumulates the block's float contribution with
// the CPU's operations.
template <int T>
__global__ void __launch_bounds__(kWarps * 32) matmul_small_kernel(MatmulArgs a) {
  __shared__ float red[kWarps][2][kMT][dev::kWarp];
  __shared__ int ired[kWarps][2][kMT][dev::kWarp];
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
  } else {
    constexpr int lanes = qk == 32 ? 4 : 8, groups = dev::kWarp / lanes, per = qk / lanes;
    const int g = lane / lanes, sub = lane % lanes;
    const int64_t nb = a.cols / qk;
    for (int64_t b0 = 0; b0 < nb; b0 += groups) {  // the same trip count on every lane
      const int64_t b = b0 + g;
      const bool valid = b < nb;
      const uint8_t* wb = wr + b * dev::Geo<T>::bytes;
      if (valid) {
        int code[per];
        int elem0;
        int sc0 = 0, sc1 = 0, mn0 = 0, mn1 = 0;
        if constexpr (qk == 32) {
          elem0 = 4 * sub;
          for (int i = 0; i < 4; ++i) code[i] = q32_code<T>(wb, elem0 + i), code[4 + i] = q32_code<T>(wb, 16 + elem0 + i);
        } else {
          elem0 = 32 * sub;  // groups 2 sub and 2 sub + 1
          for (int i = 0; i < 32; ++i) code[i] = k_code<T>(wb, elem0 + i);
          float d, dm;
          k_scales<T>(wb, 2 * sub, d, dm, sc0, mn0);
          k_scales<T>(wb, 2 * sub + 1, d, dm, sc1, mn1);
        }
        for (int m = 0; m < kMT; ++m) {
          if (m >= mt) continue;
          const int8_t* xq = a.q + (t0 + m) * a.cols + qk * b;
          int p0 = 0, p1 = 0;
          if constexpr (qk == 32) {
            for (int i = 0; i < 4; ++i) {
              const int x0 = xq[elem0 + i], x1 = xq[16 + elem0 + i];
              p0 += code[i] * x0 + code[4 + i] * x1;
              p1 += x0 + x1;
            }
          } else {
            int dot0 = 0, dot1 = 0, bs0 = 0, bs1 = 0;
            for (int i = 0; i < 16; ++i) {
              const int x0 = xq[elem0 + i], x1 = xq[elem0 + 16 + i];
              dot0 += code[i] * x0, bs0 += x0;
              dot1 += code[16 + i] * x1, bs1 += x1;
            }
            p0 = sc0 * dot0 + sc1 * dot1;  // this lane's share of sum_g sc[g] * dot_g
            p1 = mn0 * bs0 + mn1 * bs1;    // and of sum_g mn[g] * bsum_g
          }
          ired[warp][0][m][lane] = p0;
          ired[warp][1][m][lane] = p1;
        }
      }
      __syncwarp();
      if (valid && sub == 0) {
        for (int m = 0; m < kMT; ++m) {
          if (m >= mt) continue;
          int s0 = 0, s1 = 0;
          for (int k = 0; k < lanes; ++k) s0 += ired[warp][0][m][lane + k], s1 += ired[warp][1][m][lane + k];
          const float xd = a.d[(t0 + m) * nb + b];
          if constexpr (qk == 32) {
            const float d = dev::ld_f16(wb);
            float c;
            if constexpr (T == dev::kQ8_0) c = 0.0f;
            else if constexpr (T == dev::kQ4_0) c = __fmul_rn(-8.0f, d);
            else if constexpr (T == dev::kQ5_0) c = __fmul_rn(-16.0f, d);
            else c = dev::ld_f16(wb + 2);
            acc[m] += (d * xd) * static_cast<float>(s0);
            off[m] += c * (xd * static_cast<float>(s1));
          } else {
            float d, dm;
            int sc, mn;
            k_scales<T>(wb, 0, d, dm, sc, mn);
            acc[m] += xd * (d * static_cast<float>(s0) - dm * static_cast<float>(s1));
          }
        }
      }
      __syncwarp();
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

}  // namespace tandem::kernels::TANDEM_CUDA_NS
