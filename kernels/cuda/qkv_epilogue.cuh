// The q/k/v projections' epilogue (ops::QkvEpilogue): what Backend::attention_inputs does to
// the projections (bias, rotation, KV store), done by the matmul kernels on each result as
// they store it, with the element operations of ops/binary.cu, rope.cuh and ops/kv_store.cu:
// the bits of the separate launches.
//
// Rotation reads two results of a token: rows a and b of a pair. The kernels compute a
// rotated member's rows in pair order, slot 2i holding row a and slot 2i + 1 row b of pair i
// (epilogue_row), so that the two sit in neighbouring slots of one warp (matmul_mma: lanes
// l and l ^ 4) or one block (matmul_small: warps w and w ^ 1).
#pragma once
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/ops.hpp"
#include "kernels/cuda/rope.cuh"

namespace tandem::kernels::TANDEM_CUDA_NS::dev {

// The weight row that slot s of member m computes. NeoX pairs rows i and i + rope_dims / 2
// of a head; normal-style pairs (2i, 2i + 1) and rows past rope_dims are their own slots.
__device__ __forceinline__ int64_t epilogue_row(const ops::QkvEpilogue* e, int m, int64_t s) {
  if (!e || !e->rotate[m] || !e->neox) return s;
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

}  // namespace tandem::kernels::TANDEM_CUDA_NS::dev
