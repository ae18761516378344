// The backend seam: every numeric operation of a forward pass goes through this interface,
// so that the CPU and CUDA implementations are interchangeable. Code above this seam never
// touches element memory: it holds Buffers (opaque device allocations) and Tensor views,
// moves bytes across with upload/download, and issues ops that run in order on the
// backend's single queue (CPU: synchronously; CUDA: one stream, synchronize() to wait).
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "kernels/dtype.hpp"

namespace tandem::kernels {

enum class DeviceKind { CPU, CUDA };

// Bumped by a change that moves the backends' pass times (a new kernel, a new weight
// layout): measured cost models carry it in their key (engine_calibration.cpp), so that
// one measured before the change is measured again rather than steering the policies with
// stale costs. 2: packed Q4_0..Q8_0 rows on the CPU, K-quant token loops unrolled.
// 3: Q4_K and Q6_K interleaved 16 rows to a tile on AVX-512 CPUs.
// 4: tile kernels with embedded broadcasts and paired Q4_K mins (8-token passes ~10% faster).
constexpr int kTimingRevision = 4;

// An allocation in a backend's memory. Owned by whoever asked for it.
class Buffer {
 public:
  virtual ~Buffer() = default;
  virtual size_t size() const = 0;
  virtual DeviceKind device() const = 0;
};

// How a matrix weight's bytes sit: as the model file stores them, or in one of the
// backend's own layouts (Backend::pack_weight), which only matmul reads: each row's
// fields re-ordered within the row (Packed), or groups of rows interleaved into tiles
// within the group's bytes (Tiled).
enum class RowLayout : uint8_t { File, Packed, Tiled };

// A non-owning view of a 1..4-D array in a Buffer. ne[0] is the innermost (contiguous)
// dimension; rows are packed (stride = row_bytes(type, ne[0])) unless nb1 says otherwise.
struct Tensor {
  Buffer* buf = nullptr;
  size_t offset = 0;  // bytes from the start of buf
  DType type = DType::F32;
  int64_t ne[4] = {1, 1, 1, 1};
  size_t nb1 = 0;  // bytes between rows; 0 = packed
  RowLayout layout = RowLayout::File;

  int64_t cols() const { return ne[0]; }
  int64_t rows() const { return ne[1] * ne[2] * ne[3]; }
  int64_t numel() const { return ne[0] * rows(); }
  size_t row_stride() const { return nb1 ? nb1 : row_bytes(type, ne[0]); }
  size_t bytes() const { return row_stride() * static_cast<size_t>(rows()); }
  // Rows [r0, r0+n) of a 2-D view.
  Tensor slice_rows(int64_t r0, int64_t n) const {
    Tensor t = *this;
    t.offset += static_cast<size_t>(r0) * row_stride();
    t.ne[1] = n;
    t.ne[2] = t.ne[3] = 1;
    return t;
  }
};

Tensor make_tensor(Buffer* buf, DType type, int64_t ne0, int64_t ne1 = 1, size_t offset = 0);

enum class RopeStyle {
  Normal,  // GPT-J / llama: rotate adjacent pairs (x[2i], x[2i+1])
  NeoX,    // NeoX / qwen2 / gemma: rotate halves (x[i], x[i + d/2])
};

enum class Activation { SiLU, GeluTanh };

// A slot_mapping entry for a token whose K and V are not stored: the padding lanes of a pass
// run at a bucketed size (engine/model/decode_buckets.hpp). Every other slot outside the
// cache is an error.
constexpr int32_t kNoKvSlot = INT32_MIN;

// Everything attention needs to find a sequence's keys and values in the paged cache.
// All tensors are I32 on the backend; host code fills them with upload().
struct PagedAttnMeta {
  Tensor positions;    // [n_tokens] absolute position of each query token
  Tensor seq_index;    // [n_tokens] which sequence (row of block_table) the token belongs to
  Tensor block_table;  // [n_seqs, max_blocks] block ids, row per sequence
  Tensor slot_mapping; // [n_tokens] flat cache slot (block * block_size + offset) to write, or kNoKvSlot
  int32_t block_size = 0;
  // Tree attention (kernels/tree_keys.hpp): [n_tokens, kTreeFields] I32, each token's tree
  // base and ancestor mask. buf null: every token reads positions 0..positions[t] (causal).
  Tensor tree = {};
};

// One layer's K and V caches: [num_blocks * block_size, n_kv_heads * head_dim], F32 or F16.
struct KVLayer {
  Tensor k;
  Tensor v;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual DeviceKind kind() const = 0;
  virtual std::string name() const = 0;         // e.g. "cpu (avx2, 2 threads)"
  virtual std::string description() const = 0;  // features chosen at start, for --verbose

  // ---- memory ------------------------------------------------------------------------
  virtual std::unique_ptr<Buffer> alloc(size_t bytes) = 0;
  // Zero-filled memory, e.g. the KV pool (engine/kv/kv_pool.hpp), of which only part may
  // ever be used. The CPU backend maps fresh anonymous pages (zero, resident only once
  // touched); the CUDA backend takes it from its arena (clearing what is not fresh).
  // `what` names it in an out-of-memory error.
  virtual std::unique_ptr<Buffer> alloc_zeroed(size_t bytes, const char* what = "a zeroed buffer") = 0;
  // A read-only buffer over host memory that outlives it (mmapped weights). The CPU
  // backend reads it in place; a device backend copies it into device memory.
  virtual std::unique_ptr<Buffer> wrap_host(const void* data, size_t bytes) = 0;
  virtual void upload(const Tensor& dst, const void* src, size_t bytes) = 0;
  virtual void download(void* dst, const Tensor& src, size_t bytes) = 0;
  virtual void fill_zero(const Tensor& dst) = 0;
  virtual void synchronize() = 0;

  // What one model's passes need at most, so that a backend can size its own working
  // memory once at load rather than in the per-step path (the CUDA backend: its arena's
  // scratch slots, whose addresses graphs hold). A later, larger op still works: the
  // scratch grows then. Called once per model; a backend keeps the largest of each need.
  struct ScratchNeeds {
    int64_t tokens = 0;            // tokens (rows of x) per op
    int64_t max_cols = 0;          // the widest matmul input
    int64_t max_weight_elems = 0;  // the largest weight matrix, rows x cols
    int n_heads = 0, n_kv_heads = 0, head_dim = 0;
    int64_t positions = 0;         // block-table columns x block size of the longest sequence
  };
  virtual void reserve_scratch(const ScratchNeeds& /*need*/) {}

  // Matrix weights in the backend's own layout, for the types its matmul multiplies faster
  // that way (the CPU backend: packed rows of the 32-element block types,
  // kernels/cpu/pack_q32.hpp; on AVX-512, 16-row tiles of those and of Q4_K and Q6_K,
  // kernels/cpu/pack_tiles.hpp; the CUDA backend: aligned planes of Q4_0, Q5_0, Q8_0 and Q6_K,
  // kernels/cuda/weight_planes.hpp). packs_weights: whether it has one for type t;
  // packed_layout: which; packed_row_stride: its bytes per row (the file's, or more where the
  // layout pads rows). pack_weight: a new buffer holding `rows` rows of `cols` elements of
  // type t from host memory `src` (the file's layout), re-ordered into rows of
  // packed_row_stride bytes; nullptr when type t stays as stored. Tensors over it carry
  // packed_layout(t) and that row stride, and serve only as matmul weights.
  virtual bool packs_weights(DType /*t*/) const { return false; }
  virtual RowLayout packed_layout(DType /*t*/) const { return RowLayout::Packed; }
  virtual size_t packed_row_stride(DType t, int64_t cols) const { return row_bytes(t, cols); }
  virtual std::unique_ptr<Buffer> pack_weight(DType /*t*/, const void* /*src*/, int64_t /*rows*/,
                                              int64_t /*cols*/) {
    return nullptr;
  }

  // ---- ops (dst never aliases a source unless stated) -----------------------------------
  // dst[i, :] = dequant(table[ids[i], :]) as F32.
  virtual void get_rows(const Tensor& dst, const Tensor& table, const Tensor& ids) = 0;
  // dst = x / rms(x) * (w + w_offset), per row. dst may alias x.
  virtual void rms_norm(const Tensor& dst, const Tensor& x, const Tensor& w, float eps,
                        float w_offset = 0.0f) = 0;
  // dst[n, r] = sum_c x[n, c] * w[r, c]   (x F32 [N, C], w any weight type [R, C], dst F32 [N, R]).
  // Implementations must read each weight row once for all N tokens.
  virtual void matmul(const Tensor& dst, const Tensor& w, const Tensor& x) = 0;
  // Several matmuls of the same x (q/k/v, gate/up of a layer): dst_i = matmul(w_i, x), same
  // results as one by one (the default). A backend may share the work on x between them.
  struct MatmulTarget {
    Tensor dst;
    Tensor w;
  };
  virtual void matmul_shared(const Tensor& x, const MatmulTarget* targets, int n) {
    for (int i = 0; i < n; ++i) matmul(targets[i].dst, targets[i].w, x);
  }
  // dst = a + b, where b has either a's shape or one row broadcast over a's rows. dst may alias a.
  virtual void add(const Tensor& dst, const Tensor& a, const Tensor& b) = 0;
  // dst = a * b (same broadcasting as add). dst may alias a.
  virtual void mul(const Tensor& dst, const Tensor& a, const Tensor& b) = 0;
  virtual void scale(const Tensor& dst, float s) = 0;  // in place
  // dst = act(gate) * up. dst may alias gate.
  virtual void gated_act(const Tensor& dst, const Tensor& gate, const Tensor& up, Activation act) = 0;
  // In place rotary embedding of x viewed as [n_tokens, n_heads, head_dim]; the first
  // rope_dims of each head rotate, at the angle pos * theta^(-2i/rope_dims).
  virtual void rope(const Tensor& x, const Tensor& positions, int n_heads, int head_dim,
                    int rope_dims, float theta, RopeStyle style) = 0;
  // Write k, v ([n_tokens, n_kv_heads*head_dim], F32) into the cache at meta.slot_mapping.
  virtual void kv_store(const KVLayer& cache, const Tensor& k, const Tensor& v,
                        const PagedAttnMeta& meta) = 0;
  // Moves cache rows within one layer's K and V: for i = 0, 1, ... in order, row to[i] takes
  // row from[i] (from, to: I32 [n] flat slots). Rows keep their bytes; later moves may read
  // a row an earlier one wrote (a tree's accepted path moved down over its siblings).
  virtual void kv_move(const KVLayer& cache, const Tensor& from, const Tensor& to) = 0;

  // ---- fused steps (defaults: the ops above, in order; a backend may do one in fewer
  //      passes, with exactly the same bits) ---------------------------------------------
  // A layer's attention inputs after its q/k/v projections, in place: the biases added to
  // q, k and v (those given), each head of q and k RMS-normed by q_norm / k_norm (those
  // given: Gemma 3), q and k rotated, k and v written into the cache at meta.slot_mapping.
  // The default: add, add, add, rms_norm, rms_norm, rope, rope, kv_store.
  struct AttnInputs {
    Tensor q, k, v;        // [n_tokens, n_heads * head_dim], [n_tokens, n_kv_heads * head_dim] (both)
    Tensor bq, bk, bv;     // biases; buf null: none
    Tensor q_norm, k_norm; // per-head norm weights [head_dim]; buf null: none
    float norm_eps = 0.0f;
    Tensor positions;      // [n_tokens] I32
    int n_heads = 0, n_kv_heads = 0, head_dim = 0, rope_dims = 0;
    float theta = 0.0f;
    RopeStyle style = RopeStyle::Normal;
  };
  virtual void attention_inputs(const AttnInputs& a, const KVLayer& cache, const PagedAttnMeta& meta);
  // A post-norm's residual connection left for the op that next reads the residual stream
  // (Gemma 3's post-attention and post-FFN norms, whose rows the next pre-norm reads anyway):
  // x += rms_norm(src, w, eps), src normed in place, i.e. norm_residual(x, src, w, eps) first.
  struct PendingResidual {
    Tensor src, w;
    float eps = 0.0f;
  };
  // norm_residual(x, pending...) when pending, rms_norm(h, x, norm_w, eps, w_offset), then
  // matmul_shared(h, targets, n): a block's input norm and the projections that read it.
  // Default: the ops in that order.
  virtual void norm_matmul_shared(const Tensor& h, const Tensor& x, const Tensor& norm_w, float eps, float w_offset,
                                  const MatmulTarget* targets, int n, const PendingResidual* pending = nullptr);
  // gated_act(gate, gate, up, act), then matmul_residual(dst, w, gate, tmp): a feed-forward
  // block's activation and down projection. Default: the two ops.
  virtual void act_matmul_residual(const Tensor& dst, const Tensor& gate, const Tensor& up, Activation act,
                                   const Tensor& w, const Tensor& tmp);
  // gated_act(gate, gate, up, act), then matmul(dst, w, gate): the same without the residual
  // (a post-normed block's). Default: the two ops.
  virtual void act_matmul(const Tensor& dst, const Tensor& gate, const Tensor& up, Activation act, const Tensor& w);
  // dst += matmul(w, x): a residual connection. tmp (dst's shape, F32) is the default's
  // workspace: matmul(tmp, w, x), then add(dst, dst, tmp).
  virtual void matmul_residual(const Tensor& dst, const Tensor& w, const Tensor& x, const Tensor& tmp);
  // A layer's attention block up to the attention itself: rms_norm(h, x, norm_w, eps,
  // w_offset), the projections a.q = matmul(wq, h), a.k = matmul(wk, h), a.v = matmul(wv, h),
  // then attention_inputs(a, cache, meta); a pending residual is added to x first.
  // Default: norm_matmul_shared, attention_inputs.
  virtual void norm_attention_inputs(const Tensor& h, const Tensor& x, const Tensor& norm_w, float eps, float w_offset,
                                     const Tensor& wq, const Tensor& wk, const Tensor& wv, const AttnInputs& a,
                                     const KVLayer& cache, const PagedAttnMeta& meta,
                                     const PendingResidual* pending = nullptr);
  // x = rms_norm(x, w, eps) in place, then dst += x: a post-norm's residual (Gemma 3).
  // Default: rms_norm, add.
  virtual void norm_residual(const Tensor& dst, const Tensor& x, const Tensor& w, float eps);
  // paged_attention's shape and options.
  struct AttnShape {
    int n_heads = 0, n_kv_heads = 0, head_dim = 0;
    float scale = 1.0f;
    int sliding_window = 0;
    float softcap = 0.0f;
  };
  // paged_attention(out, q, cache, meta, shape...), then matmul_residual(dst, wo, out, tmp):
  // the attention and its output projection added to the residual stream. Default: the two.
  virtual void attention_residual(const Tensor& dst, const Tensor& wo, const Tensor& tmp, const Tensor& out,
                                  const Tensor& q, const KVLayer& cache, const PagedAttnMeta& meta,
                                  const AttnShape& shape);
  // paged_attention(out, q, cache, meta, shape...), then matmul(dst, wo, out): the same
  // without the residual (a post-normed block's). Default: the two ops.
  virtual void attention_matmul(const Tensor& dst, const Tensor& wo, const Tensor& out, const Tensor& q,
                                const KVLayer& cache, const PagedAttnMeta& meta, const AttnShape& shape);

  // Causal attention of q [n_tokens, n_heads*head_dim] over the cached keys/values of each
  // token's sequence, positions 0..positions[t] inclusive (keys of this batch already
  // stored); with meta.tree, a tree node's logical keys (kernels/tree_keys.hpp). GQA: head h reads kv head h / (n_heads / n_kv_heads). out: [n_tokens, n_heads*head_dim].
  // sliding_window > 0 limits each query to the last sliding_window positions.
  virtual void paged_attention(const Tensor& out, const Tensor& q, const KVLayer& cache,
                               const PagedAttnMeta& meta, int n_heads, int n_kv_heads,
                               int head_dim, float scale, int sliding_window = 0,
                               float softcap = 0.0f) = 0;
};

// The CPU backend; n_threads <= 0 picks the number of physical cores available;
// pin_threads binds each worker thread to one core (see ThreadPool).
std::unique_ptr<Backend> make_cpu_backend(int n_threads = 0, bool pin_threads = false);

}  // namespace tandem::kernels
