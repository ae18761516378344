// matmul_small: y[t][r] = sum_c x[t][c] * W[r][c] for up to 16 tokens per weight read, for
// quantized weights. Blocks of 4 warps, grid.y over chunks of 16 tokens. A weight row is
// shared by RowWarps warps (1, 2 or 4 by the row's length: long rows such as a down
// projection's are split among a block's warps, so that a launch of few rows still keeps
// many warps reading; a split-K whose parts are summed in block order, so the bits do not
// change). Which lane does what depends on the row length only, never on the number of
// tokens, so a token's result is the same bits whether it is computed alone or with 15
// others (batch invariance).
//
// Quantized weights compute what the CPU's scalar reference computes, bit for bit
// (kernels/cpu/matmul_scalar.cpp): activations quantized to int8 blocks (quantize_act),
// exact integer dot products per block, each block's float contribution with the
// reference's operations, and the contributions summed in block order. ops/matmul_mma.cu
// computes the same bits on tensor cores for larger batches, so the backend may pick
// either for any token count. 4 lanes share a 32-block, 8 lanes a 256-block (so rows of
// few K-quant blocks still keep the warp busy): a round covers RowWarps x groups
// consecutive blocks, block b0 + w * groups + g to lane group g of the row's warp w. A lane
// unpacks its codes once per block into words of four bytes, takes its integer parts for
// each token with __dp4a, the lanes sharing a block add them with shuffles (exact
// integers), the group's first lane turns them into the block's float contribution, and
// lane m of the row's first warp adds the round's contributions for token m in block order.
// The activation sums the offset and min terms multiply come from quantize_act (16 codes a
// sum), so a lane's work per token is its dot products: for the K-quants two 16-byte
// activation loads, 8 __dp4a and one load of its two sums.
// (Float weights: ops/matmul_mma_float.cu, at every token count.)
#include <stdexcept>

#include "kernels/cuda/matmul_group.cuh"
#include "kernels/cuda/ops.hpp"
#include "kernels/cuda/qcodes.cuh"
#include "kernels/cuda/qkv_epilogue.cuh"

namespace tandem::kernels::TANDEM_CUDA_NS {
namespace {

constexpr int kWarps = 4;
constexpr int kMT = ops::kSmallMTokens;

struct MatmulArgs {
  dev::MatmulGroup g;
  int64_t cols;
  const int8_t* q;  // activation codes [n][cols], scales [n][cols/block], sums [n][cols/16]
  const float* d;
  const int16_t* s;
  int64_t n;
  bool epi;  // e applies (the q/k/v projections of a layer)
  ops::QkvEpilogue e;
};

// The sum of v over the `lanes` lanes sharing a block (aligned groups: xor stays inside).
template <int lanes>
__device__ __forceinline__ int group_sum(int v) {
  for (int o = 1; o < lanes; o *= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Blocks of 32-element and 256-element types a lane group covers (4 and 8 lanes a block).
template <int T>
constexpr int kGroups = dev::kWarp / (dev::Geo<T>::qk == 32 ? 4 : 8);

// The two int16 activation sums at p (4-byte aligned: an even index of the sums' row).
__device__ __forceinline__ void ld_sums2(const int16_t* p, int& s0, int& s1) {
  const uint32_t w = dev::ld_u32_a4(reinterpret_cast<const uint8_t*>(p));
  s0 = static_cast<int16_t>(w & 0xffffu), s1 = static_cast<int16_t>(w >> 16);
}

// The barrier between a round's contributions and their sum: the row's warps.
template <int RowWarps>
__device__ __forceinline__ void row_sync() {
  if constexpr (RowWarps == 1) __syncwarp();
  else __syncthreads();
}

// The rows of block bx of matrix m_of.
template <int T, int RowWarps>
__device__ __forceinline__ void small_rows(const MatmulArgs& a, int m_of, unsigned bx) {
  constexpr int qk = dev::Geo<T>::qk;
  static_assert(qk > 1, "float weights: matmul_mma_float");
  constexpr int lanes = qk == 32 ? 4 : 8, groups = kGroups<T>;
  __shared__ float part[kWarps][kMT][groups][2];    // a round's block contributions
  __shared__ float res[kWarps][kMT];                // the epilogue: each warp's results
  const int warp = threadIdx.x / dev::kWarp, lane = threadIdx.x % dev::kWarp;
  const int row_slot = warp / RowWarps, wr = warp % RowWarps;  // the block's row, this warp's share of it
  // Slot r computes weight row epilogue_row(r) (r itself unless the epilogue rotates this
  // member). With the epilogue every member's rows are whole blocks: no warp leaves early.
  const int64_t r = static_cast<int64_t>(bx) * (kWarps / RowWarps) + row_slot;
  const bool has_row = r < a.g.rows[m_of];
  if (RowWarps == 1 && !has_row) return;  // the whole warp leaves together (no block barrier)
  const ops::QkvEpilogue* epi = a.epi ? &a.e : nullptr;
  const int64_t t0 = static_cast<int64_t>(blockIdx.y) * kMT;
  const int mt = static_cast<int>(a.n - t0 < kMT ? a.n - t0 : kMT);
  // (Rows past the end, with RowWarps > 1: their warps take part in the barriers only.)
  const uint8_t* wrow = a.g.w[m_of] + static_cast<size_t>(dev::epilogue_row(epi, m_of, has_row ? r : 0)) * a.g.w_stride[m_of];
  float* const y = a.g.y[m_of];
  const int64_t ldy = a.g.ldy[m_of];
  const int g = lane / lanes, sub = lane % lanes;
  const int64_t nb = a.cols / qk;
  float acc = 0.0f, off = 0.0f;  // lane m's sums for token t0 + m, in block order
  for (int64_t b0 = 0; b0 < nb; b0 += RowWarps * groups) {  // the same trip count on every lane
    const int64_t b = b0 + wr * groups + g;
    const bool valid = has_row && b < nb;
    const auto wb = dev::block_at<T>(wrow, valid ? b : 0, nb);
    // This lane's codes, and for K-quants its two groups' scale and min coefficients.
    int cw[qk == 32 ? 2 : 8] = {};
    int sc0 = 0, sc1 = 0, mn0 = 0, mn1 = 0;
    float kd = 0.0f, kdm = 0.0f;
    if (valid) {
      if constexpr (qk == 32) {
        dev::q32_words<T>(wb, sub, cw[0], cw[1]);
      } else {
        dev::k_words<T>(wb, sub, cw);
        float d, dm;
        dev::k_scales<T>(wb, 2 * sub, d, dm, sc0, mn0);
        dev::k_scales<T>(wb, 2 * sub + 1, d, dm, sc1, mn1);
        int sc, mn;
        dev::k_scales<T>(wb, 0, kd, kdm, sc, mn);
      }
    }
    for (int m = 0; m < kMT; ++m) {
      if (m >= mt) continue;  // mt is the warp's: every lane takes the shuffles below
      // Token t0 + m's block b: scale xi, codes qk * xi.., sums (qk / 16) * xi.. (rows of
      // nb scales, nb * qk codes, nb * qk / 16 sums).
      const int64_t xi = (t0 + m) * nb + b;
      const int8_t* xq = a.q + qk * xi;
      int p0 = 0, p1 = 0;  // this lane's integer parts (p1: K-quants' min terms)
      if (valid) {
        if constexpr (qk == 32) {
          const int x0 = dev::ld_x4(xq + 4 * sub), x1 = dev::ld_x4(xq + 16 + 4 * sub);
          p0 = __dp4a(cw[0], x0, __dp4a(cw[1], x1, 0));
        } else {
          // This lane's 32 codes (16-byte aligned: cols and the row start are multiples of 256).
          uint32_t x0[4], x1[4];
          dev::ld_u128_a16(reinterpret_cast<const uint8_t*>(xq + 32 * sub), x0);
          dev::ld_u128_a16(reinterpret_cast<const uint8_t*>(xq + 32 * sub + 16), x1);
          int dot0 = 0, dot1 = 0, bs0, bs1;
          for (int j = 0; j < 4; ++j)
            dot0 = __dp4a(cw[j], static_cast<int>(x0[j]), dot0), dot1 = __dp4a(cw[4 + j], static_cast<int>(x1[j]), dot1);
          ld_sums2(a.s + 16 * xi + 2 * sub, bs0, bs1);
          p0 = sc0 * dot0 + sc1 * dot1;  // this lane's share of sum_g sc[g] * dot_g
          p1 = mn0 * bs0 + mn1 * bs1;    // and of sum_g mn[g] * bsum_g
        }
      }
      const int s0 = group_sum<lanes>(p0);
      [[maybe_unused]] const int s1 = qk == 32 ? p1 : group_sum<lanes>(p1);
      if (!valid || sub != 0) continue;
      const float xd = a.d[xi];
      if constexpr (qk == 32) {
        const float d = dev::q32_d<T>(wb);
        float c;
        if constexpr (dev::kBase<T> == dev::kQ8_0) c = 0.0f;
        else if constexpr (dev::kBase<T> == dev::kQ4_0) c = __fmul_rn(-8.0f, d);
        else if constexpr (dev::kBase<T> == dev::kQ5_0) c = __fmul_rn(-16.0f, d);
        else c = dev::ld_f16(wb + 2);
        int bs0 = 0, bs1 = 0;  // the block's activation sum (Q8_0 has no offset term)
        if constexpr (dev::kBase<T> != dev::kQ8_0) ld_sums2(a.s + 2 * xi, bs0, bs1);
        part[warp][m][g][0] = (d * xd) * static_cast<float>(s0);
        part[warp][m][g][1] = c * (xd * static_cast<float>(bs0 + bs1));
      } else {
        part[warp][m][g][0] = xd * (kd * static_cast<float>(s0) - kdm * static_cast<float>(s1));
      }
    }
    row_sync<RowWarps>();
    if (wr == 0 && has_row && lane < mt) {  // the row's first warp adds them in block order
      for (int w = 0; w < RowWarps; ++w) {
        const int64_t left = nb - (b0 + w * groups);
        const int n_valid = left <= 0 ? 0 : left < groups ? static_cast<int>(left) : groups;
        for (int j = 0; j < n_valid; ++j) {
          acc += part[row_slot * RowWarps + w][lane][j][0];
          if constexpr (qk == 32) off += part[row_slot * RowWarps + w][lane][j][1];
        }
      }
    }
    row_sync<RowWarps>();  // the next round's contributions overwrite these
  }
  if (wr != 0 || !has_row) return;
  const float result = qk == 32 ? acc + off : acc;  // lane m < mt: token t0 + m's
  if (epi) {  // (RowWarps == 1: a warp a row)
    if (lane < mt) res[warp][lane] = result;
    __syncthreads();  // slot r ^ 1 is warp ^ 1's
    if (lane < mt) dev::epilogue_store(a.e, m_of, r, t0 + lane, result, res[warp ^ 1][lane], y, ldy);
    dev::head_norm_arrive(a.e, m_of, r, 1, blockIdx.y, t0, t0 + mt, y, ldy);
  } else if (lane < mt) {
    dev::store_result(a.g, &y[(t0 + lane) * ldy + r], result);
  }
}

template <int T, int RowWarps>
__global__ void __launch_bounds__(kWarps * 32) matmul_small_kernel(const __grid_constant__ MatmulArgs a) {
  TANDEM_GRID_DEPENDENCY();
  unsigned bx;
  const int m_of = dev::group_member(a.g, blockIdx.x, bx);
  small_rows<T, RowWarps>(a, m_of, bx);
}

// A launch of two weight types (ops::matmul_pair: a layer's q/k/v of mixed quantizations):
// each matrix's rows with its own type's code, so each has the bits of its own launch.
template <int T1, int T2>
__global__ void __launch_bounds__(kWarps * 32) matmul_small_pair_kernel(const __grid_constant__ MatmulArgs a) {
  TANDEM_GRID_DEPENDENCY();
  unsigned bx;
  const int m_of = dev::group_member(a.g, blockIdx.x, bx);
  if (a.g.second[m_of]) small_rows<T2, 1>(a, m_of, bx);
  else small_rows<T1, 1>(a, m_of, bx);
}

}  // namespace

bool ops::matmul_pair(DType a, bool a_planes, DType b, bool b_planes) {
  if (a == b) return a_planes == b_planes;
  const auto is = [&](DType x, DType y) { return (a == x && b == y) || (a == y && b == x); };
  if (is(DType::Q4_K, DType::Q6_K)) return true;
  if (is(DType::Q5_0, DType::Q8_0)) return a_planes == b_planes;
  return false;
}

int ops::small_row_warps(int64_t blocks_per_row, int groups, bool epilogue) {
  if (epilogue) return 1;  // the epilogue pairs rows of neighbouring warps
  if (blocks_per_row >= 4 * groups) return 4;
  if (blocks_per_row >= 2 * groups) return 2;
  return 1;
}

void ops::matmul_small(Stream s, const MatmulWeight* ws, int n_w, int64_t cols, const ActQuant& x, int64_t n,
                       bool accumulate, const QkvEpilogue* epi) {
  const MatmulArgs a{dev::make_group(ws, n_w, kWarps, accumulate), cols, x.q, x.d, x.s, n, epi != nullptr,
                     epi ? *epi : QkvEpilogue{}};
  if (a.g.first_block[n_w] == 0 || n == 0) return;
  const auto st = static_cast<cudaStream_t>(s);
  MatmulArgs b = a;
  const bool launched = dev::dispatch_launch_types(ws, n_w, b.g, [&](auto t1, auto t2) {
    constexpr int T1 = decltype(t1)::value, T2 = decltype(t2)::value;
    if constexpr (dev::Geo<T1>::qk > 1 && T1 == T2) {
      const int rw = ops::small_row_warps(cols / dev::Geo<T1>::qk, kGroups<T1>, epi != nullptr);
      b.g = dev::make_group(ws, n_w, kWarps / rw, accumulate);
      const dim3 grid(b.g.first_block[n_w], static_cast<unsigned>((n + kMT - 1) / kMT));
      void (*kernel)(MatmulArgs) =
          rw == 4 ? matmul_small_kernel<T1, 4> : rw == 2 ? matmul_small_kernel<T1, 2> : matmul_small_kernel<T1, 1>;
      TANDEM_LAUNCH(kernel, grid, kWarps * 32, 0, st)(b);
    } else if constexpr (dev::Geo<T1>::qk > 1) {  // two types: a warp a row
      const dim3 grid(b.g.first_block[n_w], static_cast<unsigned>((n + kMT - 1) / kMT));
      void (*kernel)(MatmulArgs) = matmul_small_pair_kernel<T1, T2>;
      TANDEM_LAUNCH(kernel, grid, kWarps * 32, 0, st)(b);
    }
  });
  if (!launched) throw std::logic_error("matmul_small: weight types no launch takes together");
}

}  // namespace tandem::kernels::TANDEM_CUDA_NS
