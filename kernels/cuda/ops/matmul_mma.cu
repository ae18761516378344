// matmul_mma: y[t][r] = sum_c x[t][c] * W[r][c] for quantized weights on int8 tensor cores,
// for any number of tokens (prefill chunks, verification and batched decode passes).
//
// The result is the CPU's scalar reference, bit for bit (kernels/cpu/matmul_scalar.cpp), as
// ops/matmul_small.cu's is: the integer dot product of each weight block with each token's
// int8 activations is exact wherever it is computed, here by mma.sync (kernels/cuda/mma.cuh);
// each block's float contribution uses the reference's operations (no contraction: nvcc
// --fmad=false), and the contributions are summed in block order. So a token's logits are
// the same bits alone, in any batch, and through either kernel.
//
// A block of 4 warps covers 64 weight rows (16 a warp: one mma tile's rows) and 32 tokens
// (four tiles of 8). Per weight block, a lane unpacks its A fragment straight from the
// quantized rows (the q32 fragment layout is the 4-lane share of matmul_small), takes each
// token tile's activations as its B fragment, and one more mma against all-ones codes gives
// the tokens' activation sums (the offset and min terms; one instruction a tile, fewer than
// loading quantize_act's sums for each of the lane's results). The 32-element types take one
// m16n8k32 per block; Q4_K and Q5_K (one scale per 32) one per 32 elements; Q2_K, Q3_K and
// Q6_K (one scale per 16) one m16n8k16 per 16 elements. Integer sums over the groups of a
// K-quant block are exact (int32 holds them), then one float contribution per block.
#include <stdexcept>

#include "kernels/cuda/matmul_group.cuh"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/ops.hpp"
#include "kernels/cuda/qcodes.cuh"
#include "kernels/cuda/qkv_epilogue.cuh"

namespace tandem::kernels::TANDEM_CUDA_NS {
namespace {

constexpr int kWarps = 4;   // 16 weight rows each
constexpr int kTiles = 4;   // token tiles of 8 per block
constexpr int kBlockTokens = 8 * kTiles;
constexpr uint32_t kOnes = 0x01010101u;

struct MmaArgs {
  dev::MatmulGroup g;
  int64_t cols;
  const int8_t* q;  // activation codes [n][cols] and scales [n][cols / block]
  const float* d;
  int64_t n;
  bool epi;  // e applies (the q/k/v projections of a layer)
  ops::QkvEpilogue e;
};

template <int T>
constexpr bool kScalePer16 = T == dev::kQ2_K || T == dev::kQ3_K || dev::kBase<T> == dev::kQ6_K;

// The tiles of block bx of matrix m_of.
template <int T>
__device__ __forceinline__ void mma_rows(const MmaArgs& a, int m_of, unsigned bx) {
  constexpr int qk = dev::Geo<T>::qk;
  const int warp = threadIdx.x / dev::kWarp, lane = threadIdx.x % dev::kWarp;
  const int gid = lane / 4, tid = lane % 4;
  const int64_t rows = a.g.rows[m_of];
  const int64_t r0 = (static_cast<int64_t>(bx) * kWarps + warp) * 16;
  if (r0 >= rows) return;  // the whole warp leaves together
  // This lane's slots of the A fragment and of the results, and the weight rows they read.
  const ops::QkvEpilogue* epi = a.epi ? &a.e : nullptr;
  const dev::TileRows tr = dev::tile_rows(a.g, epi, m_of, r0, gid);
  const int64_t(&slot)[2] = tr.slot;
  const uint8_t* const(&wrow)[2] = tr.w;
  const int64_t t0 = static_cast<int64_t>(blockIdx.y) * kBlockTokens;
  const int n_tiles = static_cast<int>((a.n - t0 + 7) / 8 < kTiles ? (a.n - t0 + 7) / 8 : kTiles);
  const int64_t nb = a.cols / qk;
  // acc/off[j][i]: result i of tile j ((row[i / 2], token t0 + 8j + 2tid + i % 2)).
  float acc[kTiles][4], off[kTiles][4];
  for (int j = 0; j < kTiles; ++j)
    for (int i = 0; i < 4; ++i) acc[j][i] = 0.0f, off[j][i] = 0.0f;
  const int zero[4] = {0, 0, 0, 0};

  for (int64_t b = 0; b < nb; ++b) {
    const decltype(dev::block_at<T>(wrow[0], b, nb)) blk[2] = {dev::block_at<T>(wrow[0], b, nb),
                                                              dev::block_at<T>(wrow[1], b, nb)};
    int isum[kTiles][4], msum[kTiles][4];  // integer parts (q32: dot and activation sum)
    if constexpr (qk == 32) {
      int lo0, hi0, lo1, hi1;
      dev::q32_words<T>(blk[0], tid, lo0, hi0);
      dev::q32_words<T>(blk[1], tid, lo1, hi1);
      const uint32_t af[4] = {uint32_t(lo0), uint32_t(lo1), uint32_t(hi0), uint32_t(hi1)};
      const uint32_t ones[4] = {kOnes, kOnes, kOnes, kOnes};
      for (int j = 0; j < kTiles; ++j) {  // constant trip counts: the sums stay in registers
        if (j >= n_tiles) break;
        const int64_t tb = t0 + 8 * j + gid;  // this lane's B-fragment token
        uint32_t bf[2] = {0u, 0u};
        if (tb < a.n) {
          const int8_t* xq = a.q + tb * a.cols + 32 * b;
          bf[0] = uint32_t(dev::ld_x4(xq + 4 * tid)), bf[1] = uint32_t(dev::ld_x4(xq + 16 + 4 * tid));
        }
        dev::mma_s8_k32(isum[j], af, bf, zero);
        dev::mma_s8_k32(msum[j], ones, bf, zero);
      }
    } else {
      for (int j = 0; j < kTiles; ++j)
        for (int i = 0; i < 4; ++i) isum[j][i] = 0, msum[j][i] = 0;
      constexpr int step = kScalePer16<T> ? 16 : 32;  // elements per scale group
      for (int e0 = 0; e0 < qk; e0 += step) {
        int sc[2], mn[2];
        for (int h = 0; h < 2; ++h) {
          float d, dm;
          dev::k_scales<T>(blk[h], e0 / 16, d, dm, sc[h], mn[h]);
        }
        // This lane's A fragment of the group, unpacked once for every token tile (a load the
        // compiler may not hoist out of a loop that might not run).
        constexpr int kA = kScalePer16<T> ? 2 : 4;
        uint32_t af[kA];
        af[0] = uint32_t(dev::k_word4<T>(blk[0], e0 + 4 * tid)), af[1] = uint32_t(dev::k_word4<T>(blk[1], e0 + 4 * tid));
        if constexpr (kA == 4)
          af[2] = uint32_t(dev::k_word4<T>(blk[0], e0 + 16 + 4 * tid)),
          af[3] = uint32_t(dev::k_word4<T>(blk[1], e0 + 16 + 4 * tid));
        for (int j = 0; j < kTiles; ++j) {
          if (j >= n_tiles) break;
          const int64_t tb = t0 + 8 * j + gid;
          const int8_t* xq = a.q + (tb < a.n ? tb : 0) * a.cols + qk * b + e0;
          int dot[4], bs[4];
          if constexpr (kScalePer16<T>) {
            const uint32_t ones[2] = {kOnes, kOnes};
            const uint32_t bf[1] = {tb < a.n ? uint32_t(dev::ld_x4(xq + 4 * tid)) : 0u};
            dev::mma_s8_k16(dot, af, bf, zero);
            dev::mma_s8_k16(bs, ones, bf, zero);
          } else {
            const uint32_t ones[4] = {kOnes, kOnes, kOnes, kOnes};
            uint32_t bf[2] = {0u, 0u};
            if (tb < a.n) bf[0] = uint32_t(dev::ld_x4(xq + 4 * tid)), bf[1] = uint32_t(dev::ld_x4(xq + 16 + 4 * tid));
            dev::mma_s8_k32(dot, af, bf, zero);
            dev::mma_s8_k32(bs, ones, bf, zero);
          }
          for (int i = 0; i < 4; ++i) {
            isum[j][i] += sc[i / 2] * dot[i];  // sum_g sc[g] * dot_g, exact
            msum[j][i] += mn[i / 2] * bs[i];   // sum_g mn[g] * bsum_g
          }
        }
      }
    }
    // The block's float contribution to each result, as the reference computes it.
    float d[2], c[2];
    for (int h = 0; h < 2; ++h) {
      if constexpr (qk == 32) {
        d[h] = dev::q32_d<T>(blk[h]);
        if constexpr (dev::kBase<T> == dev::kQ8_0) c[h] = 0.0f;
        else if constexpr (dev::kBase<T> == dev::kQ4_0) c[h] = __fmul_rn(-8.0f, d[h]);
        else if constexpr (dev::kBase<T> == dev::kQ5_0) c[h] = __fmul_rn(-16.0f, d[h]);
        else c[h] = dev::ld_f16(blk[h] + 2);
      } else {
        int sc, mn;
        dev::k_scales<T>(blk[h], 0, d[h], c[h], sc, mn);  // d and dm
      }
    }
    for (int j = 0; j < kTiles; ++j) {
      if (j >= n_tiles) break;
      for (int i = 0; i < 4; ++i) {
        const int64_t t = t0 + 8 * j + 2 * tid + i % 2;
        if (t >= a.n) continue;
        const float xd = a.d[t * nb + b];
        const int h = i / 2;
        if constexpr (qk == 32) {
          acc[j][i] += (d[h] * xd) * static_cast<float>(isum[j][i]);
          off[j][i] += c[h] * (xd * static_cast<float>(msum[j][i]));
        } else {
          acc[j][i] += xd * (d[h] * static_cast<float>(isum[j][i]) - c[h] * static_cast<float>(msum[j][i]));
        }
      }
    }
  }
  for (int j = 0; j < kTiles; ++j) {
    if (j >= n_tiles) break;
    for (int i = 0; i < 4; ++i) {
      const int64_t t = t0 + 8 * j + 2 * tid + i % 2;
      // Slot s ^ 1 is lane ^ 4's, for the same tokens.
      dev::store_tile_result(a.g, epi, m_of, slot[i / 2], rows, t, a.n, qk == 32 ? acc[j][i] + off[j][i] : acc[j][i]);
    }
  }
  if (epi) dev::tile_head_norm_arrive(a.g, *epi, m_of, r0, rows, blockIdx.y, t0, t0 + kBlockTokens, a.n);
}

template <int T>
__global__ void __launch_bounds__(kWarps * 32) matmul_mma_kernel(const __grid_constant__ MmaArgs a) {
  TANDEM_GRID_DEPENDENCY();
  unsigned bx;
  const int m_of = dev::group_member(a.g, blockIdx.x, bx);
  mma_rows<T>(a, m_of, bx);
}

// A launch of two weight types (ops::matmul_pair): each matrix's rows with its own type's code.
template <int T1, int T2>
__global__ void __launch_bounds__(kWarps * 32) matmul_mma_pair_kernel(const __grid_constant__ MmaArgs a) {
  TANDEM_GRID_DEPENDENCY();
  unsigned bx;
  const int m_of = dev::group_member(a.g, blockIdx.x, bx);
  if (a.g.second[m_of]) mma_rows<T2>(a, m_of, bx);
  else mma_rows<T1>(a, m_of, bx);
}

}  // namespace

void ops::matmul_mma(Stream s, const MatmulWeight* ws, int n_w, int64_t cols, const ActQuant& x, int64_t n,
                     bool accumulate, const QkvEpilogue* epi) {
  MmaArgs a{dev::make_group(ws, n_w, 16 * kWarps, accumulate), cols, x.q, x.d, n, epi != nullptr,
            epi ? *epi : QkvEpilogue{}};
  if (a.g.first_block[n_w] == 0 || n == 0) return;
  const dim3 grid(a.g.first_block[n_w], static_cast<unsigned>((n + kBlockTokens - 1) / kBlockTokens));
  const bool launched = dev::dispatch_launch_types(ws, n_w, a.g, [&](auto t1, auto t2) {
    constexpr int T1 = decltype(t1)::value, T2 = decltype(t2)::value;
    void (*kernel)(MmaArgs) = nullptr;
    if constexpr (dev::Geo<T1>::qk > 1 && T1 == T2) kernel = matmul_mma_kernel<T1>;
    else if constexpr (dev::Geo<T1>::qk > 1) kernel = matmul_mma_pair_kernel<T1, T2>;
    if (kernel) TANDEM_LAUNCH(kernel, grid, kWarps * 32, 0, static_cast<cudaStream_t>(s))(a);
  });
  if (!launched) throw std::logic_error("matmul_mma: weight types no launch takes together");
}

}  // namespace tandem::kernels::TANDEM_CUDA_NS
