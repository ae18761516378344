// paged_attention: causal GQA attention of each query token over its sequence's cached
// keys/values, read through the block table; sliding window, softcap and tree nodes' keys
// as on the CPU.
//
// Flash-decoding with a fixed split: a token's context [j0, p] is cut into spans of
// kAttnSplit positions. Kernel 1 runs one block per (token, kv head, span): the scores of
// the group's query heads for every position of the span (into shared memory), their max
// and exp-sum (warp reductions in a fixed lane order), and the exp-weighted sum of the V
// rows (one thread per (head, dim), positions in order). K and V rows reach the block in
// chunks staged in shared memory: the block's threads copy a chunk's rows with 16-byte
// loads where the cache allows (consecutive threads, consecutive bytes of a row), so each
// row is read from global memory once for the whole query group, in whole transactions;
// the arithmetic on them is the same whatever the chunk size (each dot product and each
// weighted sum in position order). Kernel 2 merges a token's span
// states in span order, a block per (token, kv head). Nothing depends on the other tokens of the batch, so a token's
// output is the same bits alone or in any batch (batch invariance); grid.z is sized from
// the block table's width and blocks past a token's last span return at once. When the
// table is too narrow for any context to have two spans (max_parts == 1: every decode and
// verification pass below 512 positions), kernel 1 also does kernel 2's work for its one
// span with the same functions (merge_scale, merge_elem), and kernel 2 is not launched.
// Whichever kernel writes a KV head's group of outputs can also quantize them for the output
// projection (AttnParams::quant, quantize_act's bits), which then needs no launch of its own.
#include <atomic>

#include "kernels/cuda/act_rows.cuh"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/ops.hpp"

namespace tandem::kernels::TANDEM_CUDA_NS {
namespace {

constexpr int kThreads = 128;
constexpr int kSplit = ops::kAttnSplit;

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
                        a.quant.d + t * (cols / blk) + c0 / blk + b);
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
// each token's group of queries (later its V sums) and span scores, the staged rows
// ([chunk][head_dim + 1] floats: the odd stride puts a warp's reads of one element of 32 rows
// on 32 banks), their flags, and each token's span (first position, count).
size_t span_shared_bytes(const ops::AttnParams& a, int chunk, int tile) {
  const size_t group = static_cast<size_t>(a.n_heads / a.n_kv_heads), hd = static_cast<size_t>(a.head_dim);
  return sizeof(float) * (static_cast<size_t>(tile) * group * (hd + kSplit) + static_cast<size_t>(chunk) * (hd + 1)) +
         sizeof(int) * (static_cast<size_t>(chunk) + 2 * static_cast<size_t>(tile));
}
constexpr int kMaxChunk = 32, kMinChunk = 4, kMaxTile = 8;
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
// `base` (a.k or a.v) for KV head kvh into rows[r * (hd + 1) ..] as floats, `vec` bytes a
// load. ok[r]: the row's block is in the cache (its floats are zeros otherwise; err, when
// given, gets the bit).
__device__ __forceinline__ void stage_rows(const ops::AttnParams& a, const Ctx& c, const uint8_t* base, int kvh,
                                           int32_t first, int m, int vec, float* rows, int* ok, int* err) {
  const int hd = a.head_dim, esz = a.kv_f16 ? 2 : 4, per_load = vec / esz, loads = hd / per_load;
  const int64_t n_blocks = a.n_slots / a.block_size;
  for (int idx = threadIdx.x; idx < m * loads; idx += kThreads) {
    const int r = idx / loads, w = idx % loads;
    const int32_t j = c.key(first + r), blk = c.bt[j / a.block_size];
    const bool valid = blk >= 0 && blk < n_blocks;
    if (w == 0) {
      ok[r] = valid ? 1 : 0;
      if (!valid && err) atomicOr(err, static_cast<int>(dev::kErrAttnBlock));
    }
    float* dst = rows + r * (hd + 1) + w * per_load;
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
    if (a.kv_f16)
      for (int e = 0; e < per_load; ++e) dst[e] = dev::f16_to_f32((words[e / 2] >> (16 * (e % 2))) & 0xFFFFu);
    else
      for (int e = 0; e < per_load; ++e) dst[e] = __uint_as_float(words[e]);
  }
}

// One span of a query tile: the tokens t0 .. t0 + nt - 1 of one sequence (or one token of
// any kind). The tile's K and V rows are staged once for all its tokens; each token's
// scores, softmax sums and V sums are computed as for the token alone (the same operations
// in the same order), so its bits do not depend on the tile it fell in.
__global__ void __launch_bounds__(kThreads) attn_span_kernel(ops::AttnParams a, int max_parts, int tile, int chunk,
                                                              int vec, float* states, int* err) {
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
  float* qs = smem;                        // [nt][group][hd]: the queries, then the V sums
  float* sc = qs + tile * gh;              // [nt][group][kSplit]
  float* rows = sc + tile * group * kSplit;  // [chunk][hd + 1]
  int* ok = reinterpret_cast<int*>(rows + chunk * (hd + 1));  // [chunk]
  int* span = ok + chunk;                  // [nt][2]: the token's first position in this span, count (0: none)
  const int me = static_cast<int>(threadIdx.x);
  Ctx cu;  // (every token after t0 joined with a readable context)
  if (me < nt && token_ctx(a, t0 + me, cu, err, false)) {
    const int32_t lo = cu.j0 + part * kSplit;
    span[2 * me] = lo;
    span[2 * me + 1] = part < cu.parts ? dev::imin(cu.p, lo + kSplit - 1) - lo + 1 : 0;
  }
  __syncthreads();
  // The positions the tile's tokens read in this span: [first, first + n).
  int32_t first = 0, last = -1;
  for (int u = 0; u < nt; ++u) {
    if (span[2 * u + 1] == 0) continue;
    const int32_t lo = span[2 * u], hi = lo + span[2 * u + 1] - 1;
    if (last < first) first = lo, last = hi;
    else first = dev::imin(first, lo), last = dev::imax(last, hi);
  }
  if (last < first) return;  // no token of the tile reaches this span
  const int n = last - first + 1;
  for (int idx = threadIdx.x; idx < nt * gh; idx += kThreads)
    qs[idx] = a.q[(t0 + idx / gh) * a.ldq + static_cast<int64_t>(kvh) * gh + idx % gh];
  for (int c0 = 0; c0 < n; c0 += chunk) {
    const int m = dev::imin(chunk, n - c0);
    stage_rows(a, c, a.k, kvh, first + c0, m, vec, rows, ok, err);
    __syncthreads();
    for (int idx = threadIdx.x; idx < m * group * nt; idx += kThreads) {
      const int r = idx % m, g = idx / m % group, u = idx / m / group;  // a warp: consecutive rows
      const int jj = first + c0 + r - span[2 * u];
      if (jj < 0 || jj >= span[2 * u + 1]) continue;
      float x = -INFINITY;
      if (ok[r]) {
        const float* qg = qs + u * gh + g * hd;
        const float* kr = rows + r * (hd + 1);
        x = 0.0f;
        for (int i = 0; i < hd; ++i) x += qg[i] * kr[i];
        x *= a.scale;
        if (a.softcap > 0.0f) x = a.softcap * tanhf(x / a.softcap);
      }
      sc[(u * group + g) * kSplit + jj] = x;
    }
    __syncthreads();  // the rows are consumed before the next chunk overwrites them
  }
  const size_t sf = state_floats(a);
  const auto state_of = [&](int u) { return states + (((t0 + u) * a.n_kv_heads + kvh) * max_parts + part) * sf; };
  const int warp = threadIdx.x / dev::kWarp, lane = threadIdx.x % dev::kWarp;
  for (int w = warp; w < nt * group; w += kThreads / dev::kWarp) {
    const int u = w / group, g = w % group, cnt = span[2 * u + 1];
    if (cnt == 0) continue;
    float* s = sc + w * kSplit;
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
  __syncthreads();
  float* acc = qs;  // the queries are no longer read; each (token, head, dim) sum stays with its thread
  for (int idx = threadIdx.x; idx < nt * gh; idx += kThreads) acc[idx] = 0.0f;
  for (int c0 = 0; c0 < n; c0 += chunk) {
    const int m = dev::imin(chunk, n - c0);
    stage_rows(a, c, a.v, kvh, first + c0, m, vec, rows, ok, nullptr);
    __syncthreads();
    for (int idx = threadIdx.x; idx < nt * gh; idx += kThreads) {
      const int u = idx / gh, g = idx % gh / hd, i = idx % hd;
      const int lo = span[2 * u], cnt = span[2 * u + 1];
      const float* e = sc + (u * group + g) * kSplit;
      float s = acc[idx];
      for (int r = 0; r < m; ++r) {
        const int jj = first + c0 + r - lo;
        if (jj >= 0 && jj < cnt && ok[r]) s += e[jj] * rows[r * (hd + 1) + i];
      }
      acc[idx] = s;
    }
    __syncthreads();
  }
  for (int idx = threadIdx.x; idx < nt * gh; idx += kThreads)
    if (span[2 * (idx / gh) + 1] > 0) state_of(idx / gh)[2 * group + idx % gh] = acc[idx];
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
void grant_shared(size_t bytes) {
  static std::atomic<size_t> granted{kSharedLimit};
  size_t have = granted.load();
  while (bytes > have) {
    if (granted.compare_exchange_weak(have, bytes)) {
      // A refusal (a device with less) shows as the launch's error, which the backend checks.
      if (cudaFuncSetAttribute(attn_span_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
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
  if (shared > kSharedLimit) grant_shared(shared);
  TANDEM_LAUNCH(attn_span_kernel, g1, kThreads, shared, st)(a, mp, tile, chunk, stage_bytes(a), scratch, err);
  if (mp == 1) return 1;  // kernel 1 wrote the outputs
  const dim3 g2(static_cast<unsigned>(a.n_tokens), static_cast<unsigned>(a.n_kv_heads));
  TANDEM_LAUNCH(attn_merge_kernel, g2, kThreads, 0, st)(a, mp, scratch, err);
  return 2;
}

}  // namespace tandem::kernels::TANDEM_CUDA_NS
