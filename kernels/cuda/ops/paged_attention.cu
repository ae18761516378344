// paged_attention: causal GQA attention of each query token over its sequence's cached
// keys/values, read through the block table; sliding window, softcap and tree nodes' keys
// as on the CPU.
//
// Flash-decoding with a fixed split: a token's context [j0, p] is cut into spans of
// kAttnSplit positions. Kernel 1 runs one block per (query tile, kv head, span), a query
// tile being up to 8 consecutive tokens of one sequence (one token in a decode pass): the
// scores of the tile's query heads for every position of the span (into shared memory),
// their max and exp-sum (warp reductions in a fixed lane order), and the exp-weighted sum of
// the V rows. K and V rows reach the block in chunks staged in shared memory, copied by the
// block's threads with 16-byte loads where the cache allows, so each row is read from
// global memory once for the whole tile and query group, in whole transactions.
//
// Both products run on TF32 tensor cores (m16n8k8), the tile's query heads as the 16 rows:
// scores Q K^T with k over the head's dimensions, then P V with k over the positions. The
// float operands are split exactly into TF32 parts (dev::split3_tf32; F16 cache values are
// TF32 values already), so each product is that of the floats to about 2^-22. A score is a
// function of its query row and key alone. A V sum takes its positions in k-steps of 8
// aligned to multiples of 8 of the position, whatever the tile: a token's steps are the same
// alone and in a tile, and a step's positions outside the token's range have probability
// +0, which adds nothing. So a token's bits are the same decoded, verified or prefilled
// (batch invariance; one exception: a non-finite V value of a position that another token
// of the tile reads makes 0 times it NaN). Kernel 2 merges a token's span states in span
// order, a block per (token, kv head). grid.z is sized from the block table's width and
// blocks past a token's last span return at once. When the table is too narrow for any
// context to have two spans (max_parts == 1: every decode and verification pass below 512
// positions), kernel 1 also does kernel 2's work for its one span with the same functions
// (merge_scale, merge_elem), and kernel 2 is not launched. Whichever kernel writes a KV
// head's group of outputs can also quantize them for the output projection
// (AttnParams::quant, quantize_act's bits), which then needs no launch of its own.
#include <atomic>

#include "kernels/cuda/act_rows.cuh"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/ops.hpp"

namespace tandem::kernels::TANDEM_CUDA_NS {
namespace {

constexpr int kThreads = 128, kWarps = kThreads / dev::kWarp;
constexpr int kSplit = ops::kAttnSplit;
// Row strides in shared memory, in floats, chosen so that the lanes of a fragment load hit 32
// different banks: queries (later the V sums) and staged K rows hd8 + 4, staged V rows
// hd8 + 8 (hd8: head_dim rounded up to the k-step of 8), scores kSplit + 4.
constexpr int kScoreStride = kSplit + 4;
__host__ __device__ constexpr int hd8_of(int hd) { return (hd + 7) & ~7; }

// A token's context, or false (and an error bit) when its metadata is out of range. A tree
// node (mask not 0) reads its logical keys through tree_key_index (kernels/tree_keys.hpp).
struct Ctx {
  int32_t p, j0, parts;
  const int32_t* bt;
  int32_t tree_base;
  uint64_t mask;
  __device__ __forceinline__ int32_t key(int32_t j) const { return tree_key_index(j, tree_base, mask); }
};
__device__ __forceinline__ bool token_ctx(const ops::AttnParams& a, int64_t t, Ctx& c, int* err, bool report) {
  const int32_t p = a.pos[t], s = a.seq[t];
  if (s < 0 || s >= a.n_seqs) {
    if (report) atomicOr(err, static_cast<int>(dev::kErrAttnSequence));
    return false;
  }
  if (p < 0 || p / a.block_size >= a.bt_cols) {
    if (report) atomicOr(err, static_cast<int>(dev::kErrAttnPosition));
    return false;
  }
  c.tree_base = p + 1;
  c.mask = 0;
  if (a.tree) {
    const int32_t* f = a.tree + t * kTreeFields;
    c.mask = tree_mask_of(f);
    c.tree_base = f[0];
    const int32_t last = c.mask ? tree_last_key(f[0], c.mask) : p;
    if (c.mask && (f[0] < 0 || f[0] + tree_popcount64(c.mask) != p + 1 || last / a.block_size >= a.bt_cols)) {
      if (report) atomicOr(err, static_cast<int>(dev::kErrAttnPosition));
      return false;
    }
  }
  c.p = p;
  c.j0 = a.window > 0 ? dev::imax(0, p - a.window + 1) : 0;
  c.parts = (p - c.j0) / kSplit + 1;
  c.bt = a.block_table + static_cast<int64_t>(s) * a.bt_cols;
  return true;
}

__device__ __forceinline__ size_t state_floats(const ops::AttnParams& a) {
  const int group = a.n_heads / a.n_kv_heads;
  return static_cast<size_t>(group) * (2 + a.head_dim);
}

// Kernel 2's arithmetic for head g of a token whose span states (parts of them, sf floats
// apart) start at base: the largest max, 1 / the rescaled exp-sum (0 when nothing counts),
// and output element i before that scale.
__device__ __forceinline__ void merge_scale(const float* base, int parts, size_t sf, int group, int g, float& mx,
                                            float& inv) {
  mx = -INFINITY;
  for (int p = 0; p < parts; ++p) mx = dev::fmax2(mx, base[p * sf + g]);
  float l = 0.0f;
  for (int p = 0; p < parts; ++p) {
    const float m = base[p * sf + g];
    if (m == -INFINITY) continue;
    l += base[p * sf + group + g] * expf(m - mx);
  }
  inv = l > 0.0f ? 1.0f / l : 0.0f;
}
__device__ __forceinline__ float merge_elem(const float* base, int parts, size_t sf, int group, int g, int hd, int i,
                                            float mx) {
  float acc = 0.0f;
  for (int p = 0; p < parts; ++p) {
    const float m = base[p * sf + g];
    if (m == -INFINITY) continue;
    acc += base[p * sf + 2 * group + g * hd + i] * expf(m - mx);
  }
  return acc;
}

// The group of KV head kvh of token t's output (written by this block, made visible by the
// caller's barrier) quantized into a.quant: a warp a block of quant.block values.
__device__ __forceinline__ void quantize_group(const ops::AttnParams& a, int64_t t, int kvh) {
  if (a.quant.block == 0) return;
  const int gw = a.n_heads / a.n_kv_heads * a.head_dim, blk = a.quant.block;
  const int64_t cols = static_cast<int64_t>(a.n_heads) * a.head_dim, c0 = static_cast<int64_t>(kvh) * gw;
  const float* row = a.out + t * a.ldo + c0;
  for (int b = threadIdx.x / dev::kWarp; b < gw / blk; b += kThreads / dev::kWarp)
    dev::quantize_block(row + b * blk, blk, a.quant.q + t * cols + c0 + b * blk,
                        a.quant.d + t * (cols / blk) + c0 / blk + b, a.quant.s + t * (cols / 16) + (c0 + b * blk) / 16);
}

// The widest load (16 or 4 bytes, else one element) that every K/V row start of this call
// is aligned to: row stride, head offset and both cache bases.
bool rows_aligned(const ops::AttnParams& a, size_t w) {
  const size_t head = static_cast<size_t>(a.head_dim) * (a.kv_f16 ? 2 : 4);
  return head % w == 0 && a.kv_row_bytes % w == 0 && reinterpret_cast<uintptr_t>(a.k) % w == 0 &&
         reinterpret_cast<uintptr_t>(a.v) % w == 0;
}
int stage_bytes(const ops::AttnParams& a) { return rows_aligned(a, 16) ? 16 : rows_aligned(a, 4) ? 4 : a.kv_f16 ? 2 : 4; }

// Shared memory of a span block for up to `tile` tokens, staging `chunk` rows at a time:
// each token's group of queries (later its V sums) and span scores, the staged rows, their
// flags, and each token's span (first position, count).
size_t span_shared_bytes(const ops::AttnParams& a, int chunk, int tile) {
  const size_t rows = static_cast<size_t>(tile) * (a.n_heads / a.n_kv_heads), hd8 = hd8_of(a.head_dim);
  return sizeof(float) * (rows * (hd8 + 4 + kScoreStride) + static_cast<size_t>(chunk) * (hd8 + 8)) +
         sizeof(int) * (static_cast<size_t>(chunk) + 2 * static_cast<size_t>(tile));
}
constexpr int kMaxChunk = 32, kMinChunk = 8, kMaxTile = 8;  // chunks: whole k-steps of 8
constexpr size_t kSharedLimit = 48 * 1024;  // what a kernel gets without cudaFuncSetAttribute
// A query tile's budget: within the opt-in limit of every architecture built (sm_80: 163 KiB,
// sm_86/89: 99 KiB, sm_90: 227 KiB), leaving room for two blocks an SM on the larger ones.
constexpr size_t kTileShared = 96 * 1024;
// Rows staged at a time by a block of one token: the most (up to 32, a warp's worth) that
// fit the 48 KiB.
int chunk_rows(const ops::AttnParams& a) {
  int c = kMaxChunk;
  while (c > kMinChunk && span_shared_bytes(a, c, 1) > kSharedLimit) c /= 2;
  return c;
}
// Tokens a block may take (a query tile): 8, 4 or 2 where their scores fit kTileShared, and
// 1 for a call of one token (nothing to share).
int tile_tokens(const ops::AttnParams& a) {
  if (a.n_tokens <= 1) return 1;
  for (int t = kMaxTile; t > 1; t /= 2)
    if (span_shared_bytes(a, kMaxChunk, t) <= kTileShared) return t;
  return 1;
}

// Whether token t is in token t - 1's query tile (and its own block has nothing to do):
// the same sequence, neither a tree node, both contexts readable, and t not at a multiple of
// the tile size. Every block decides it alike from the batch's metadata, so a tile needs no
// host round trip and no graph depends on how the batch splits into tiles.
__device__ __forceinline__ bool joins_previous(const ops::AttnParams& a, int64_t t, int tile, int* err) {
  if (tile == 1 || t % tile == 0 || a.seq[t] != a.seq[t - 1]) return false;
  if (a.tree && (tree_mask_of(a.tree + t * kTreeFields) != 0 || tree_mask_of(a.tree + (t - 1) * kTreeFields) != 0))
    return false;
  Ctx c;
  return token_ctx(a, t, c, err, false) && token_ctx(a, t - 1, c, err, false);
}

// Copies the rows of logical keys first .. first + m - 1 of token c's context from cache
// `base` (a.k or a.v) for KV head kvh into rows[r * stride ..] as floats, `vec` bytes a load;
// keys outside [lo, hi] (no token of the tile reads them) are zeros and not read. ok[r]: the
// row was read (its block is in the cache; otherwise it is zeros too, and err, when given,
// gets the bit).
__device__ __forceinline__ void stage_rows(const ops::AttnParams& a, const Ctx& c, const uint8_t* base, int kvh,
                                           int32_t first, int m, int32_t lo, int32_t hi, int vec, float* rows,
                                           int stride, int* ok, int* err) {
  const int hd = a.head_dim, esz = a.kv_f16 ? 2 : 4, per_load = vec / esz, loads = hd / per_load;
  const int64_t n_blocks = a.n_slots / a.block_size;
  for (int idx = threadIdx.x; idx < m * loads; idx += kThreads) {
    const int r = idx / loads, w = idx % loads;
    const int32_t lj = first + r;
    float* dst = rows + r * stride + w * per_load;
    if (lj < lo || lj > hi) {
      if (w == 0) ok[r] = 0;
      for (int e = 0; e < per_load; ++e) dst[e] = 0.0f;
      continue;
    }
    const int32_t j = c.key(lj), blk = c.bt[j / a.block_size];
    const bool valid = blk >= 0 && blk < n_blocks;
    if (w == 0) {
      ok[r] = valid ? 1 : 0;
      if (!valid && err) atomicOr(err, static_cast<int>(dev::kErrAttnBlock));
    }
    if (!valid) {
      for (int e = 0; e < per_load; ++e) dst[e] = 0.0f;
      continue;
    }
    const uint8_t* src = base + (static_cast<size_t>(blk) * a.block_size + j % a.block_size) * a.kv_row_bytes +
                         (static_cast<size_t>(kvh) * hd + static_cast<size_t>(w) * per_load) * esz;
    uint32_t words[4] = {0, 0, 0, 0};
    if (vec == 16) dev::ld_u128_a16(src, words);
    else if (vec == 4) words[0] = dev::ld_u32_a4(src);
    else words[0] = dev::ld_u16(src);  // one f16 element (odd head_dim)
    // Unrolled over the most a load holds (8 f16 values), so every index into words is a
    // constant and the words stay in registers (an index known only at run time puts the
    // array in local memory).
    TANDEM_UNROLL
    for (int e = 0; e < 8; ++e) {
      if (e >= per_load) break;
      dst[e] = a.kv_f16 ? dev::f16_to_f32((words[e / 2] >> (16 * (e % 2))) & 0xFFFFu) : __uint_as_float(words[e % 4]);
    }
  }
}

// One span of a query tile: the tokens t0 .. t0 + nt - 1 of one sequence (or one token of
// any kind). The tile's K and V rows are staged once for all its tokens; each token's
// scores, softmax sums and V sums are computed as for the token alone (the same operations
// in the same order), so its bits do not depend on the tile it fell in. KvF16: the cache's
// values are TF32 values (one part each).
template <bool KvF16>
__global__ void __launch_bounds__(kThreads) attn_span_kernel(ops::AttnParams a, int max_parts, int tile, int chunk,
                                                              int vec, float* states, int* err) {
  TANDEM_GRID_DEPENDENCY();
  constexpr int kKvParts = KvF16 ? 1 : 3;
  TANDEM_DYNAMIC_SHARED(float, smem);
  const int64_t t0 = blockIdx.x;
  const int kvh = blockIdx.y, part = blockIdx.z;
  const int group = a.n_heads / a.n_kv_heads, hd = a.head_dim, gh = group * hd;
  if (joins_previous(a, t0, tile, err)) return;  // the tile's first token's block does its work
  Ctx c;
  if (!token_ctx(a, t0, c, err, kvh == 0 && part == 0 && threadIdx.x == 0)) {
    if (max_parts == 1) {  // kernel 2's zeros for a token it cannot read
      for (int i = threadIdx.x; i < gh; i += kThreads) a.out[t0 * a.ldo + static_cast<int64_t>(kvh) * gh + i] = 0.0f;
      __syncthreads();
      quantize_group(a, t0, kvh);
    }
    return;
  }
  int nt = 1;
  while (nt < tile && t0 + nt < a.n_tokens && joins_previous(a, t0 + nt, tile, err)) ++nt;
  // The mma rows: row u * group + g is head g of token t0 + u; rows past n_rows are zeros.
  const int n_rows = nt * group, m_tiles = (n_rows + 15) / 16;
  const int hd8 = hd8_of(hd), qst = hd8 + 4, kst = hd8 + 4, vst = hd8 + 8;
  float* qs = smem;                              // [n_rows][qst]: the queries, then the V sums
  float* sc = qs + tile * group * qst;           // [n_rows][kScoreStride]: scores, then exp weights
  float* rows = sc + tile * group * kScoreStride;  // [chunk][kst or vst]
  int* ok = reinterpret_cast<int*>(rows + chunk * vst);  // [chunk]
  int* span = ok + chunk;                  // [nt][2]: the token's first position in this span, count (0: none)
  const int me = static_cast<int>(threadIdx.x);
  Ctx cu;  // (every token after t0 joined with a readable context)
  if (me < nt && token_ctx(a, t0 + me, cu, err, false)) {
    const int32_t lo = cu.j0 + part * kSplit;
    span[2 * me] = lo;
    span[2 * me + 1] = part < cu.parts ? dev::imin(cu.p, lo + kSplit - 1) - lo + 1 : 0;
  }
  __syncthreads();
  // The positions the tile's tokens read in this span: [first, last].
  int32_t first = 0, last = -1;
  for (int u = 0; u < nt; ++u) {
    if (span[2 * u + 1] == 0) continue;
    const int32_t lo = span[2 * u], hi = lo + span[2 * u + 1] - 1;
    if (last < first) first = lo, last = hi;
    else first = dev::imin(first, lo), last = dev::imax(last, hi);
  }
  if (last < first) return;  // no token of the tile reaches this span
  // Positions are staged and multiplied from a multiple of 8 on: the V sums' k-steps are the
  // same 8 positions for a token whatever the tile.
  const int32_t base = first & ~7;
  const int n = last - base + 1;
  for (int idx = threadIdx.x; idx < n_rows * hd; idx += kThreads)
    qs[idx / hd * qst + idx % hd] = a.q[(t0 + idx / gh) * a.ldq + static_cast<int64_t>(kvh) * gh + idx % gh];
  const int warp = threadIdx.x / dev::kWarp, lane = threadIdx.x % dev::kWarp, gid = lane / 4, tid = lane % 4;
  // Weight of row `row` (< n_rows) for position j: its exp weight where its token reads j, +0
  // elsewhere.
  const auto weight = [&](int row, int32_t j) {
    const int u = row / group, jj = j - span[2 * u];
    return jj >= 0 && jj < span[2 * u + 1] ? sc[row * kScoreStride + jj] : 0.0f;
  };

  // Scores: per chunk, a warp a (16 rows, 8 positions) tile at a time, k over the dimensions.
  for (int c0 = 0; c0 < n; c0 += chunk) {
    const int m = dev::imin(chunk, n - c0), n_tiles = (m + 7) / 8;
    stage_rows(a, c, a.k, kvh, base + c0, 8 * n_tiles, first, last, vec, rows, kst, ok, err);
    __syncthreads();
    for (int w = warp; w < m_tiles * n_tiles; w += kWarps) {
      const int mt = w / n_tiles, nb = w % n_tiles;
      float s_main[4] = {0.0f, 0.0f, 0.0f, 0.0f}, s_small[4] = {0.0f, 0.0f, 0.0f, 0.0f};
      for (int d0 = 0; d0 < hd8; d0 += 8) {
        uint32_t af[3][4], bf[3][2], pt[3];
        for (int i = 0; i < 4; ++i) {  // A[gid + 8 (i % 2)][tid + 4 (i / 2)]: query row, dimension
          const int row = 16 * mt + gid + 8 * (i % 2), d = d0 + tid + 4 * (i / 2);
          dev::tf32_parts<3>(row < n_rows && d < hd ? qs[row * qst + d] : 0.0f, pt);
          for (int p = 0; p < 3; ++p) af[p][i] = pt[p];
        }
        for (int i = 0; i < 2; ++i) {  // B[tid + 4 i][gid]: dimension, position
          const int d = d0 + tid + 4 * i;
          dev::tf32_parts<kKvParts>(d < hd ? rows[(8 * nb + gid) * kst + d] : 0.0f, pt);
          for (int p = 0; p < 3; ++p) bf[p][i] = pt[p];
        }
        dev::mma_tf32_split<3, kKvParts>(s_main, s_small, af, bf);
      }
      for (int i = 0; i < 4; ++i) {  // C[gid + 8 (i / 2)][2 tid + i % 2]
        const int row = 16 * mt + gid + 8 * (i / 2), r = 8 * nb + 2 * tid + i % 2;
        if (row >= n_rows || r >= m) continue;
        const int u = row / group, jj = base + c0 + r - span[2 * u];
        if (jj < 0 || jj >= span[2 * u + 1]) continue;
        float x = -INFINITY;
        if (ok[r]) {
          x = (s_main[i] + s_small[i]) * a.scale;
          if (a.softcap > 0.0f) x = a.softcap * tanhf(x / a.softcap);
        }
        sc[row * kScoreStride + jj] = x;
      }
    }
    __syncthreads();  // the rows are consumed before the next chunk overwrites them
  }
  const size_t sf = state_floats(a);
  const auto state_of = [&](int u) { return states + (((t0 + u) * a.n_kv_heads + kvh) * max_parts + part) * sf; };
  for (int w = warp; w < n_rows; w += kWarps) {
    const int u = w / group, g = w % group, cnt = span[2 * u + 1];
    if (cnt == 0) continue;
    float* s = sc + w * kScoreStride;
    float mx = -INFINITY;
    for (int jj = lane; jj < cnt; jj += dev::kWarp) mx = dev::fmax2(mx, s[jj]);
    mx = dev::warp_max(mx);
    float sum = 0.0f;
    for (int jj = lane; jj < cnt; jj += dev::kWarp) {
      const float e = mx == -INFINITY ? 0.0f : expf(s[jj] - mx);
      s[jj] = e;
      sum += e;
    }
    sum = dev::warp_sum(sum);
    if (lane == 0) state_of(u)[g] = mx, state_of(u)[group + g] = sum;
  }
  float* acc = qs;  // the queries are no longer read
  for (int idx = threadIdx.x; idx < n_rows * qst; idx += kThreads) acc[idx] = 0.0f;
  __syncthreads();

  // V sums: per chunk, a warp a (16 rows, 8 dimensions) tile at a time, k over the positions;
  // each element's running sum stays with one lane, in shared memory between chunks.
  const int d_tiles = hd8 / 8;
  for (int c0 = 0; c0 < n; c0 += chunk) {
    const int m = dev::imin(chunk, n - c0), k_steps = (m + 7) / 8;
    stage_rows(a, c, a.v, kvh, base + c0, 8 * k_steps, first, last, vec, rows, vst, ok, nullptr);
    __syncthreads();
    for (int w = warp; w < m_tiles * d_tiles; w += kWarps) {
      const int mt = w / d_tiles, db = w % d_tiles;
      float sum[4];
      for (int i = 0; i < 4; ++i) {  // C[gid + 8 (i / 2)][2 tid + i % 2]: row, dimension
        const int row = 16 * mt + gid + 8 * (i / 2);
        sum[i] = row < n_rows ? acc[row * qst + 8 * db + 2 * tid + i % 2] : 0.0f;
      }
      for (int ks = 0; ks < k_steps; ++ks) {
        uint32_t af[3][4], bf[3][2], pt[3];
        for (int i = 0; i < 4; ++i) {  // A[gid + 8 (i % 2)][tid + 4 (i / 2)]: row, position
          const int row = 16 * mt + gid + 8 * (i % 2), r = 8 * ks + tid + 4 * (i / 2);
          dev::tf32_parts<3>(row < n_rows ? weight(row, base + c0 + r) : 0.0f, pt);
          for (int p = 0; p < 3; ++p) af[p][i] = pt[p];
        }
        for (int i = 0; i < 2; ++i) {  // B[tid + 4 i][gid]: position, dimension
          const int d = 8 * db + gid;
          dev::tf32_parts<kKvParts>(d < hd ? rows[(8 * ks + tid + 4 * i) * vst + d] : 0.0f, pt);
          for (int p = 0; p < 3; ++p) bf[p][i] = pt[p];
        }
        dev::mma_tf32_split<3, kKvParts>(sum, sum, af, bf);  // one running sum: main, then small terms
      }
      for (int i = 0; i < 4; ++i) {
        const int row = 16 * mt + gid + 8 * (i / 2);
        if (row < n_rows) acc[row * qst + 8 * db + 2 * tid + i % 2] = sum[i];
      }
    }
    __syncthreads();
  }
  for (int idx = threadIdx.x; idx < nt * gh; idx += kThreads)
    if (span[2 * (idx / gh) + 1] > 0) state_of(idx / gh)[2 * group + idx % gh] = acc[idx / hd * qst + idx % hd];
  if (max_parts == 1) {  // (every token of the tile has its one span here)
    __syncthreads();     // the block's states (global memory) are complete and visible to all its threads
    for (int idx = threadIdx.x; idx < nt * gh; idx += kThreads) {
      const int u = idx / gh, g = idx % gh / hd, i = idx % hd;
      const float* st = state_of(u);
      float mx, inv;
      merge_scale(st, 1, sf, group, g, mx, inv);
      a.out[(t0 + u) * a.ldo + static_cast<int64_t>(kvh) * gh + g * hd + i] =
          merge_elem(st, 1, sf, group, g, hd, i, mx) * inv;
    }
    __syncthreads();
    for (int u = 0; u < nt; ++u) quantize_group(a, t0 + u, kvh);
  }
}

__global__ void __launch_bounds__(kThreads) attn_merge_kernel(ops::AttnParams a, int max_parts, const float* states,
                                                               int* err) {
  TANDEM_GRID_DEPENDENCY();
  const int64_t t = blockIdx.x;
  const int kvh = blockIdx.y, hd = a.head_dim;
  const int group = a.n_heads / a.n_kv_heads;
  float* o = a.out + t * a.ldo + static_cast<int64_t>(kvh) * group * hd;  // the group's heads
  Ctx c;
  if (!token_ctx(a, t, c, err, false)) {
    for (int i = threadIdx.x; i < group * hd; i += kThreads) o[i] = 0.0f;
  } else {
    const size_t sf = state_floats(a);
    const float* base = states + (t * a.n_kv_heads + kvh) * max_parts * sf;
    for (int g = 0; g < group; ++g) {
      float mx, inv;
      merge_scale(base, c.parts, sf, group, g, mx, inv);
      for (int i = threadIdx.x; i < hd; i += kThreads)
        o[g * hd + i] = merge_elem(base, c.parts, sf, group, g, hd, i, mx) * inv;
    }
  }
  __syncthreads();
  quantize_group(a, t, kvh);
}

// Lets the span kernel use `bytes` of dynamic shared memory (above the 48 KiB default): the
// attribute is raised to the most any call has needed, never lowered. (Allowed while a
// stream is being captured: it is not a stream operation.)
template <bool KvF16>
void grant_shared(size_t bytes) {
  static std::atomic<size_t> granted{kSharedLimit};
  size_t have = granted.load();
  while (bytes > have) {
    if (granted.compare_exchange_weak(have, bytes)) {
      // A refusal (a device with less) shows as the launch's error, which the backend checks.
      if (cudaFuncSetAttribute(attn_span_kernel<KvF16>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               static_cast<int>(bytes)) != cudaSuccess)
        granted.store(kSharedLimit);
      return;
    }
  }
}

int max_parts_of(const ops::AttnParams& a) {
  const int64_t max_pos = a.bt_cols * a.block_size;  // positions 0..max_pos-1
  return static_cast<int>(max_pos <= 0 ? 1 : (max_pos - 1) / kSplit + 1);
}

}  // namespace

size_t ops::attention_scratch_floats(const AttnParams& a) {
  const int group = a.n_heads / a.n_kv_heads;
  return static_cast<size_t>(a.n_tokens) * a.n_kv_heads * max_parts_of(a) * group * (2 + a.head_dim);
}

size_t ops::attention_shared_bytes(const AttnParams& a) { return span_shared_bytes(a, chunk_rows(a), 1); }

int ops::paged_attention(Stream s, const AttnParams& a, float* scratch, int* err) {
  if (a.n_tokens == 0) return 0;
  const int mp = max_parts_of(a);
  auto st = static_cast<cudaStream_t>(s);
  const dim3 g1(static_cast<unsigned>(a.n_tokens), static_cast<unsigned>(a.n_kv_heads), static_cast<unsigned>(mp));
  const int tile = tile_tokens(a), chunk = tile > 1 ? kMaxChunk : chunk_rows(a);
  const size_t shared = span_shared_bytes(a, chunk, tile);
  if (a.kv_f16) {
    if (shared > kSharedLimit) grant_shared<true>(shared);
    TANDEM_LAUNCH(attn_span_kernel<true>, g1, kThreads, shared, st)(a, mp, tile, chunk, stage_bytes(a), scratch, err);
  } else {
    if (shared > kSharedLimit) grant_shared<false>(shared);
    TANDEM_LAUNCH(attn_span_kernel<false>, g1, kThreads, shared, st)(a, mp, tile, chunk, stage_bytes(a), scratch, err);
  }
  if (mp == 1) return 1;  // kernel 1 wrote the outputs
  const dim3 g2(static_cast<unsigned>(a.n_tokens), static_cast<unsigned>(a.n_kv_heads));
  TANDEM_LAUNCH(attn_merge_kernel, g2, kThreads, 0, st)(a, mp, scratch, err);
  return 2;
}

}  // namespace tandem::kernels::TANDEM_CUDA_NS
