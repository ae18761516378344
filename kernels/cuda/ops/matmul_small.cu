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
// A lane unpacks its codes once per block into words of four bytes (word-wide for the
// types the real models use: Q4_0, Q4_1, Q5_0, Q8_0, Q4_K, Q6_K; element by element for the
// others), takes its integer parts for each token with __dp4a over 4-byte activation
// loads, and the lanes sharing a block add their parts with shuffles: exact integers, so
// the result is the same bits as element-wise products summed anywhere.
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

__device__ __forceinline__ int pack4(int c0, int c1, int c2, int c3) {
  return static_cast<int>((static_cast<uint32_t>(c0) & 0xffu) | ((static_cast<uint32_t>(c1) & 0xffu) << 8) |
                          ((static_cast<uint32_t>(c2) & 0xffu) << 16) | ((static_cast<uint32_t>(c3) & 0xffu) << 24));
}
// Bits 0..3 of x to bit 4 of bytes 0..3 (the fifth bit of four Q5 codes).
__device__ __forceinline__ uint32_t spread4_to_bit4(uint32_t x) {
  return ((x & 1u) | ((x & 2u) << 7) | ((x & 4u) << 14) | ((x & 8u) << 21)) << 4;
}

// A lane's codes of a 32-block as two words: elements 4s..4s+3 and 16+4s..16+4s+3 (s the
// sub-lane), each byte one code (unsigned for Q4/Q5, signed for Q8_0).
template <int T>
__device__ __forceinline__ void q32_words(const uint8_t* b, int sub, int& lo, int& hi) {
  if constexpr (T == dev::kQ8_0) {
    lo = static_cast<int>(dev::ld_u32(b + 2 + 4 * sub));
    hi = static_cast<int>(dev::ld_u32(b + 18 + 4 * sub));
  } else if constexpr (T == dev::kQ4_0 || T == dev::kQ4_1) {
    const uint32_t w = dev::ld_u32(b + (T == dev::kQ4_0 ? 2 : 4) + 4 * sub);
    lo = static_cast<int>(w & 0x0f0f0f0fu);
    hi = static_cast<int>((w >> 4) & 0x0f0f0f0fu);
  } else if constexpr (T == dev::kQ5_0) {
    const uint32_t qh = dev::ld_u32(b + 2);
    const uint32_t w = dev::ld_u32(b + 6 + 4 * sub);
    lo = static_cast<int>((w & 0x0f0f0f0fu) | spread4_to_bit4((qh >> (4 * sub)) & 0xfu));
    hi = static_cast<int>(((w >> 4) & 0x0f0f0f0fu) | spread4_to_bit4((qh >> (16 + 4 * sub)) & 0xfu));
  } else {
    const int e = 4 * sub;
    lo = pack4(q32_code<T>(b, e), q32_code<T>(b, e + 1), q32_code<T>(b, e + 2), q32_code<T>(b, e + 3));
    hi = pack4(q32_code<T>(b, 16 + e), q32_code<T>(b, 17 + e), q32_code<T>(b, 18 + e), q32_code<T>(b, 19 + e));
  }
}

// A lane's 32 codes of a K-quant block (elements 32s..32s+31) as eight words.
template <int T>
__device__ __forceinline__ void k_words(const uint8_t* b, int sub, int* w) {
  if constexpr (T == dev::kQ4_K) {
    const uint8_t* qs = b + 16 + 32 * (sub / 2);
    const int shift = 4 * (sub & 1);
    for (int j = 0; j < 8; ++j) w[j] = static_cast<int>((dev::ld_u32(qs + 4 * j) >> shift) & 0x0f0f0f0fu);
  } else if constexpr (T == dev::kQ6_K) {
    const int half = sub / 4, k = sub % 4;
    const uint8_t* ql = b + 64 * half + 32 * (k & 1);
    const uint8_t* qh = b + 128 + 32 * half;
    for (int j = 0; j < 8; ++j) {
      const uint32_t lo = (dev::ld_u32(ql + 4 * j) >> (k < 2 ? 0 : 4)) & 0x0f0f0f0fu;
      const uint32_t hi = (dev::ld_u32(qh + 4 * j) >> (2 * k)) & 0x03030303u;
      w[j] = static_cast<int>(lo | (hi << 4));
    }
  } else {
    const int e = 32 * sub;
    for (int j = 0; j < 8; ++j)
      w[j] = pack4(k_code<T>(b, e + 4 * j), k_code<T>(b, e + 4 * j + 1), k_code<T>(b, e + 4 * j + 2),
                   k_code<T>(b, e + 4 * j + 3));
  }
}

// Four int8 activations (a block's element offsets are multiples of 4, rows of quantize_act
// multiples of 32 bytes: aligned).
__device__ __forceinline__ int ld_x4(const int8_t* p) {
#if TANDEM_SIMT_EMULATED
  int v;
  std::memcpy(&v, p, sizeof v);  // host C++: no aliasing through int*
  return v;
#else
  return *reinterpret_cast<const int*>(p);
#endif
}

// The sum of v over the `lanes` lanes sharing a block (aligned groups: xor stays inside).
template <int lanes>
__device__ __forceinline__ int group_sum(int v) {
  for (int o = 1; o < lanes; o *= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Quantized weights: the lanes sharing a block each compute the integer dot products of
// their elements; the group adds them (exact integers: the CPU's sums) and the block's
// first lane accumulates the block's float contribution with the CPU's operations.
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
  } else {
    constexpr int lanes = qk == 32 ? 4 : 8, groups = dev::kWarp / lanes;
    constexpr int ones = 0x01010101;
    const int g = lane / lanes, sub = lane % lanes;
    const int64_t nb = a.cols / qk;
    for (int64_t b0 = 0; b0 < nb; b0 += groups) {  // the same trip count on every lane
      const int64_t b = b0 + g;
      const bool valid = b < nb;
      const uint8_t* wb = wr + (valid ? b : 0) * dev::Geo<T>::bytes;
      // This lane's codes, and for K-quants its two groups' scale and min coefficients.
      int cw[qk == 32 ? 2 : 8] = {};
      int sc0 = 0, sc1 = 0, mn0 = 0, mn1 = 0;
      float kd = 0.0f, kdm = 0.0f;
      if (valid) {
        if constexpr (qk == 32) {
          q32_words<T>(wb, sub, cw[0], cw[1]);
        } else {
          k_words<T>(wb, sub, cw);
          float d, dm;
          k_scales<T>(wb, 2 * sub, d, dm, sc0, mn0);
          k_scales<T>(wb, 2 * sub + 1, d, dm, sc1, mn1);
          int sc, mn;
          k_scales<T>(wb, 0, kd, kdm, sc, mn);
        }
      }
      for (int m = 0; m < kMT; ++m) {
        if (m >= mt) continue;  // mt is the warp's: every lane takes the shuffles below
        int p0 = 0, p1 = 0;
        if (valid) {
          const int8_t* xq = a.q + (t0 + m) * a.cols + qk * b;
          if constexpr (qk == 32) {
            const int x0 = ld_x4(xq + 4 * sub), x1 = ld_x4(xq + 16 + 4 * sub);
            p0 = __dp4a(cw[0], x0, __dp4a(cw[1], x1, 0));
            p1 = __dp4a(ones, x0, __dp4a(ones, x1, 0));
          } else {
            int dot0 = 0, dot1 = 0, bs0 = 0, bs1 = 0;
            for (int j = 0; j < 4; ++j) {
              const int x0 = ld_x4(xq + 32 * sub + 4 * j), x1 = ld_x4(xq + 32 * sub + 16 + 4 * j);
              dot0 = __dp4a(cw[j], x0, dot0), bs0 = __dp4a(ones, x0, bs0);
              dot1 = __dp4a(cw[4 + j], x1, dot1), bs1 = __dp4a(ones, x1, bs1);
            }
            p0 = sc0 * dot0 + sc1 * dot1;  // this lane's share of sum_g sc[g] * dot_g
            p1 = mn0 * bs0 + mn1 * bs1;    // and of sum_g mn[g] * bsum_g
          }
        }
        const int s0 = group_sum<lanes>(p0), s1 = group_sum<lanes>(p1);
        if (!valid || sub != 0) continue;
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
          acc[m] += xd * (kd * static_cast<float>(s0) - kdm * static_cast<float>(s1));
        }
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
