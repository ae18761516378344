// paged_attention: causal GQA attention of each query token over its sequence's cached
// keys/values, read through the block table; sliding window, softcap and tree nodes' keys
// as on the CPU.
//
// Flash-decoding with a fixed split: a token's context [j0, p] is cut into spans of
// kAttnSplit positions. Kernel 1 runs one block per (token, kv head, span): the scores of
// the group's query heads for every position of the span (into shared memory), their max
// and exp-sum (warp reductions in a fixed lane order), and the exp-weighted sum of the V
// rows (one thread per (head, dim), positions in order). Kernel 2 merges a token's span
// states in span order, a block per (token, kv head). Nothing depends on the other tokens of the batch, so a token's
// output is the same bits alone or in any batch (batch invariance); grid.z is sized from
// the block table's width and blocks past a token's last span return at once. When the
// table is too narrow for any context to have two spans (max_parts == 1: every decode and
// verification pass below 512 positions), kernel 1 also does kernel 2's work for its one
// span with the same functions (merge_scale, merge_elem), and kernel 2 is not launched.
// Whichever kernel writes a KV head's group of outputs can also quantize them for the output
// projection (AttnParams::quant, quantize_act's bits), which then needs no launch of its own.
#include "kernels/cuda/act_rows.cuh"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/ops.hpp"

namespace tandem::kernels::TANDEM_CUDA_NS {
namespace {

constexpr int kThreads = 128;
constexpr int kSplit = ops::kAttnSplit;

__device__ __forceinline__ float kv_at(const uint8_t* row, bool f16, int i) {
  return f16 ? dev::f16_to_f32(reinterpret_cast<const uint16_t*>(row)[i]) : reinterpret_cast<const float*>(row)[i];
}

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

__global__ void __launch_bounds__(kThreads) attn_span_kernel(ops::AttnParams a, int max_parts, float* states, int* err) {
  TANDEM_DYNAMIC_SHARED(float, smem);
  const int64_t t = blockIdx.x;
  const int kvh = blockIdx.y, part = blockIdx.z;
  const int group = a.n_heads / a.n_kv_heads, hd = a.head_dim;
  Ctx c;
  if (!token_ctx(a, t, c, err, kvh == 0 && part == 0 && threadIdx.x == 0)) {
    if (max_parts == 1) {  // kernel 2's zeros for a token it cannot read
      for (int i = threadIdx.x; i < group * hd; i += kThreads)
        a.out[t * a.ldo + static_cast<int64_t>(kvh) * group * hd + i] = 0.0f;
      __syncthreads();
      quantize_group(a, t, kvh);
    }
    return;
  }
  if (part >= c.parts) return;
  const int32_t lo = c.j0 + part * kSplit, hi = dev::imin(c.p, lo + kSplit - 1), n = hi - lo + 1;
  const int64_t n_blocks = a.n_slots / a.block_size;
  float* qs = smem;               // [group][hd]
  float* sc = smem + group * hd;  // [group][kSplit]
  const float* qh = a.q + t * a.ldq + static_cast<int64_t>(kvh) * group * hd;
  for (int i = threadIdx.x; i < group * hd; i += kThreads) qs[i] = qh[i];
  __syncthreads();
  const size_t esz = a.kv_f16 ? 2 : 4;
  for (int jj = threadIdx.x; jj < n; jj += kThreads) {
    const int32_t j = c.key(lo + jj), blk = c.bt[j / a.block_size];
    if (blk < 0 || blk >= n_blocks) {
      atomicOr(err, static_cast<int>(dev::kErrAttnBlock));
      for (int g = 0; g < group; ++g) sc[g * kSplit + jj] = -INFINITY;
      continue;
    }
    const uint8_t* krow = a.k + (static_cast<size_t>(blk) * a.block_size + j % a.block_size) * a.kv_row_bytes +
                          static_cast<size_t>(kvh) * hd * esz;
    for (int g = 0; g < group; ++g) {
      const float* qg = qs + g * hd;
      float x = 0.0f;
      for (int i = 0; i < hd; ++i) x += qg[i] * kv_at(krow, a.kv_f16, i);
      x *= a.scale;
      if (a.softcap > 0.0f) x = a.softcap * tanhf(x / a.softcap);
      sc[g * kSplit + jj] = x;
    }
  }
  __syncthreads();
  float* st = states + ((t * a.n_kv_heads + kvh) * max_parts + part) * state_floats(a);
  const int warp = threadIdx.x / dev::kWarp, lane = threadIdx.x % dev::kWarp;
  for (int g = warp; g < group; g += kThreads / dev::kWarp) {
    float* s = sc + g * kSplit;
    float mx = -INFINITY;
    for (int jj = lane; jj < n; jj += dev::kWarp) mx = dev::fmax2(mx, s[jj]);
    mx = dev::warp_max(mx);
    float sum = 0.0f;
    for (int jj = lane; jj < n; jj += dev::kWarp) {
      const float e = mx == -INFINITY ? 0.0f : expf(s[jj] - mx);
      s[jj] = e;
      sum += e;
    }
    sum = dev::warp_sum(sum);
    if (lane == 0) st[g] = mx, st[group + g] = sum;
  }
  __syncthreads();
  for (int idx = threadIdx.x; idx < group * hd; idx += kThreads) {
    const int g = idx / hd, i = idx % hd;
    const float* e = sc + g * kSplit;
    float acc = 0.0f;
    for (int jj = 0; jj < n; ++jj) {
      const int32_t j = c.key(lo + jj), blk = c.bt[j / a.block_size];
      if (blk < 0 || blk >= n_blocks) continue;
      const uint8_t* vrow = a.v + (static_cast<size_t>(blk) * a.block_size + j % a.block_size) * a.kv_row_bytes +
                            static_cast<size_t>(kvh) * hd * esz;
      acc += e[jj] * kv_at(vrow, a.kv_f16, i);
    }
    st[2 * group + idx] = acc;
  }
  if (max_parts == 1) {
    __syncthreads();  // the block's state (global memory) is complete and visible to all its threads
    const size_t sf = state_floats(a);
    for (int idx = threadIdx.x; idx < group * hd; idx += kThreads) {
      const int g = idx / hd, i = idx % hd;
      float mx, inv;
      merge_scale(st, 1, sf, group, g, mx, inv);
      a.out[t * a.ldo + static_cast<int64_t>(kvh * group + g) * hd + i] = merge_elem(st, 1, sf, group, g, hd, i, mx) * inv;
    }
    __syncthreads();
    quantize_group(a, t, kvh);
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

int max_parts_of(const ops::AttnParams& a) {
  const int64_t max_pos = a.bt_cols * a.block_size;  // positions 0..max_pos-1
  return static_cast<int>(max_pos <= 0 ? 1 : (max_pos - 1) / kSplit + 1);
}

}  // namespace

size_t ops::attention_scratch_floats(const AttnParams& a) {
  const int group = a.n_heads / a.n_kv_heads;
  return static_cast<size_t>(a.n_tokens) * a.n_kv_heads * max_parts_of(a) * group * (2 + a.head_dim);
}

size_t ops::attention_shared_bytes(const AttnParams& a) {
  const int group = a.n_heads / a.n_kv_heads;
  return sizeof(float) * static_cast<size_t>(group) * (a.head_dim + kSplit);
}

int ops::paged_attention(Stream s, const AttnParams& a, float* scratch, int* err) {
  if (a.n_tokens == 0) return 0;
  const int mp = max_parts_of(a);
  auto st = static_cast<cudaStream_t>(s);
  const dim3 g1(static_cast<unsigned>(a.n_tokens), static_cast<unsigned>(a.n_kv_heads), static_cast<unsigned>(mp));
  TANDEM_LAUNCH(attn_span_kernel, g1, kThreads, attention_shared_bytes(a), st)(a, mp, scratch, err);
  if (mp == 1) return 1;  // kernel 1 wrote the outputs
  const dim3 g2(static_cast<unsigned>(a.n_tokens), static_cast<unsigned>(a.n_kv_heads));
  TANDEM_LAUNCH(attn_merge_kernel, g2, kThreads, 0, st)(a, mp, scratch, err);
  return 2;
}

}  // namespace tandem::kernels::TANDEM_CUDA_NS
