// The q/k/v projections' epilogue (ops::QkvEpilogue): what Backend::attention_inputs does to
// the projections (bias, rotation, KV store), done by the matmul kernels on each result as
// they store it, with the element operations of ops/binary.cu, rope.cuh and ops/kv_store.cu:
// the bits of the separate launches.
//
// Rotation reads two results of a token: rows a and b of a pair. The kernels compute a
// rotated member's rows in pair order, slot 2i holding row a and slot 2i + 1 row b of pair i
// (epilogue_row), so that the two sit in neighbouring slots of one warp (matmul_mma: lanes
// l and l ^ 4) or one block (matmul_small: warps w and w ^ 1).
//
// Per-head norms (Gemma 3) need a whole head, which the rows of several blocks make: the
// member's results are stored with their bias only, and the warp that completes a head
// (head_norm_arrive) finishes it as ops/attn_inputs.cu does (norm, rotation, cache).
#pragma once
#include "kernels/cuda/act_rows.cuh"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/ops.hpp"
#include "kernels/cuda/rope.cuh"

namespace tandem::kernels::TANDEM_CUDA_NS::dev {

// The weight row that slot s of member m computes. NeoX pairs rows i and i + rope_dims / 2
// of a head; normal-style pairs (2i, 2i + 1) and rows past rope_dims are their own slots.
__device__ __forceinline__ int64_t epilogue_row(const ops::QkvEpilogue* e, int m, int64_t s) {
  if (!e || !e->rotate[m] || !e->neox || e->head_norm[m]) return s;
  const int64_t head = s / e->head_dim;
  const int w = static_cast<int>(s % e->head_dim);
  if (w >= e->rope_dims) return s;
  return head * e->head_dim + (w % 2 ? e->rope_dims / 2 + w / 2 : w / 2);
}

// Stores result v of slot s for token t into y (row-major, ldy), given the result in the
// partner slot s ^ 1 (both before their biases): attention_inputs' value of that element,
// and for k and v its cache row too.
__device__ __forceinline__ void epilogue_store(const ops::QkvEpilogue& e, int m, int64_t s, int64_t t, float v,
                                               float partner, float* y, int64_t ldy) {
  const int64_t row = epilogue_row(&e, m, s);
  if (e.bias[m]) v = v + e.bias[m][row];
  if (e.head_norm[m]) {  // finished by head_norm_arrive once the head is whole
    y[t * ldy + row] = v;
    return;
  }
  const int w = static_cast<int>(s % e.head_dim);
  if (e.rotate[m] && w < e.rope_dims) {
    if (e.bias[m]) partner = partner + e.bias[m][epilogue_row(&e, m, s ^ 1)];
    float c, sn;
    rope_cs(w / 2, static_cast<double>(e.positions[t]), e.rope_dims, e.theta, c, sn);
    v = w % 2 == 0 ? rope_first(v, partner, c, sn) : rope_second(partner, v, c, sn);
  }
  y[t * ldy + row] = v;
  if (!e.cache[m]) return;
  const int32_t slot = e.slots[t];
  if (slot == kNoKvSlot) return;
  if (slot < 0 || slot >= e.n_slots) {
    atomicOr(e.err, static_cast<int>(kErrKvSlot));
    return;
  }
  uint8_t* dst = e.cache[m] + static_cast<size_t>(slot) * e.cache_stride;
  if (e.f16) reinterpret_cast<uint16_t*>(dst)[row] = f32_to_f16(v);
  else reinterpret_cast<float*>(dst)[row] = v;
}

// Head `head` of member m for token t, by one warp: RMS-normed by e.head_norm[m] with the sums
// of rms_norm_row's kNormThreads threads taken in its order (so the bits of the separate
// norm), rotated with rope.cuh's operations, and for a cached member stored at t's slot. The
// head's values come from other blocks, possibly other SMs: read past L1 (__ldcg).
__device__ inline TANDEM_DEVICE_NOINLINE void finish_head(const ops::QkvEpilogue& e, int m, int64_t head, int64_t t,
                                                          float* y, int64_t ldy) {
  const int lane = threadIdx.x % kWarp, hd = e.head_dim;
  float* hv = y + t * ldy + head * hd;
  const float* w = e.head_norm[m];
  double total = 0.0;
  for (int vw = 0; vw < kNormThreads / kWarp; ++vw) {  // rms_norm_row's warps in order
    double ss = 0.0;
    for (int i = vw * kWarp + lane; i < hd; i += kNormThreads) {
      const float x = __ldcg(hv + i);
      ss += static_cast<double>(x) * x;
    }
    total += warp_sum(ss);
  }
  const float inv = rms_inv(total, hd, e.norm_eps);
  for (int i = lane; i < hd; i += kWarp) hv[i] = rms_scaled(__ldcg(hv + i), inv, w[i], 0.0f);
  __syncwarp();
  if (e.rotate[m]) {
    const int half = e.rope_dims / 2;
    const double pos = static_cast<double>(e.positions[t]);
    for (int i = lane; i < half; i += kWarp) {  // rope_pair's steps
      float c, sn;
      rope_cs(i, pos, e.rope_dims, e.theta, c, sn);
      const int a = e.neox ? i : 2 * i, b = e.neox ? i + half : 2 * i + 1;
      const float x0 = __ldcg(hv + a), x1 = __ldcg(hv + b);
      hv[a] = rope_first(x0, x1, c, sn);
      hv[b] = rope_second(x0, x1, c, sn);
    }
    __syncwarp();
  }
  if (!e.cache[m]) return;
  const int32_t slot = e.slots[t];
  if (slot == kNoKvSlot) return;
  if (slot < 0 || slot >= e.n_slots) {
    if (lane == 0) atomicOr(e.err, static_cast<int>(kErrKvSlot));
    return;
  }
  uint8_t* dst = e.cache[m] + static_cast<size_t>(slot) * e.cache_stride;
  for (int i = lane; i < hd; i += kWarp) {
    const int64_t row = head * hd + i;
    const float v = __ldcg(hv + i);
    if (e.f16) reinterpret_cast<uint16_t*>(dst)[row] = f32_to_f16(v);
    else reinterpret_cast<float*>(dst)[row] = v;
  }
}

// Called by every lane of a warp that has stored its results for slots [s0, s0 + ns) of
// member m (within one head) and tokens [t0, t1) of grid chunk `chunk`: with a per-head norm,
// counts them, and the warp whose rows complete the head finishes it for those tokens. The
// fence before the count makes this warp's stores visible to whichever warp completes the
// head; the one after it, the other warps' stores to this one (the pattern of a grid's
// last-arriving block: no block waits for another).
__device__ __forceinline__ void head_norm_arrive(const ops::QkvEpilogue& e, int m, int64_t s0, int ns, unsigned chunk,
                                                 int64_t t0, int64_t t1, float* y, int64_t ldy) {
  if (!e.head_norm[m]) return;
  const int lane = threadIdx.x % kWarp;
  const int64_t head = s0 / e.head_dim;
  int* count = e.head_counts + chunk * e.count_stride + e.head_base[m] + head;
  __threadfence();
  __syncwarp();
  int last = 0;
  if (lane == 0) last = atomicAdd(count, ns) + ns == e.head_dim;
  last = __shfl_sync(0xffffffffu, last, 0);
  if (!last) return;
  __threadfence();
  __syncwarp();
  for (int64_t t = t0; t < t1; ++t) finish_head(e, m, head, t, y, ldy);
  if (lane == 0) atomicExch(count, 0);  // every warp of this head and chunk has counted
}

}  // namespace tandem::kernels::TANDEM_CUDA_NS::dev
