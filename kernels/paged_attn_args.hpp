// One paged-attention call as raw pointers and sizes: what every backend's kernels read,
// built from the op's tensors in one place (make_paged_attn_args), each backend giving the
// addresses of its own memory. C++17 (nvcc builds the CUDA kernels so): passed to device
// kernels by value.
#pragma once
#include <cstddef>
#include <cstdint>

#include "kernels/backend.hpp"
#include "kernels/tree_keys.hpp"

namespace tandem::kernels {

struct PagedAttnArgs {
  const float* q = nullptr;  // [n_tokens, ldq], heads contiguous
  int64_t ldq = 0;
  float* out = nullptr;
  int64_t ldo = 0;
  const uint8_t* k = nullptr;  // cache rows: slot-major, n_kv_heads * head_dim each
  const uint8_t* v = nullptr;
  size_t kv_row_bytes = 0;
  bool kv_f16 = false;
  int64_t n_slots = 0;
  const int32_t* pos = nullptr;
  const int32_t* seq = nullptr;
  const int32_t* block_table = nullptr;
  const int32_t* tree = nullptr;  // [n_tokens][kTreeFields] (kernels/tree_keys.hpp); null: causal
  int64_t bt_cols = 0;
  int64_t n_seqs = 0;
  int32_t block_size = 0;
  int n_heads = 0, n_kv_heads = 0, head_dim = 0;
  float scale = 1.0f;
  int window = 0;
  float softcap = 0.0f;
};

// The arguments of paged_attention(out, q, cache, meta, ...) (Backend): `addr(tensor)` is a
// tensor's first byte in the backend's memory.
template <class Addr>
PagedAttnArgs make_paged_attn_args(const Tensor& out, const Tensor& q, const KVLayer& cache, const PagedAttnMeta& meta,
                                   int n_heads, int n_kv_heads, int head_dim, float scale, int sliding_window,
                                   float softcap, Addr&& addr) {
  PagedAttnArgs a;
  a.q = reinterpret_cast<const float*>(addr(q));
  a.ldq = static_cast<int64_t>(q.row_stride() / sizeof(float));
  a.out = reinterpret_cast<float*>(addr(out));
  a.ldo = static_cast<int64_t>(out.row_stride() / sizeof(float));
  a.k = reinterpret_cast<const uint8_t*>(addr(cache.k));
  a.v = reinterpret_cast<const uint8_t*>(addr(cache.v));
  a.kv_row_bytes = cache.k.row_stride();
  a.kv_f16 = cache.k.type == DType::F16;
  a.n_slots = cache.k.rows();
  a.pos = reinterpret_cast<const int32_t*>(addr(meta.positions));
  a.seq = reinterpret_cast<const int32_t*>(addr(meta.seq_index));
  a.block_table = reinterpret_cast<const int32_t*>(addr(meta.block_table));
  if (meta.tree.buf) a.tree = reinterpret_cast<const int32_t*>(addr(meta.tree));
  a.bt_cols = meta.block_table.cols();
  a.n_seqs = meta.block_table.rows();
  a.block_size = meta.block_size;
  a.n_heads = n_heads;
  a.n_kv_heads = n_kv_heads;
  a.head_dim = head_dim;
  a.scale = scale;
  a.window = sliding_window;
  a.softcap = softcap;
  return a;
}

}  // namespace tandem::kernels
