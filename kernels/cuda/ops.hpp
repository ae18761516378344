// Host-side entry points of the kernels (one kernel file per op under ops/). Plain C++:
// device pointers are raw pointers into the backend's arena, the stream an opaque handle
// (cudaStream_t under nvcc; unused by the emulator, which runs launches synchronously).
// Shapes have been validated by CudaBackend; indices read from device memory (token ids,
// slots, positions, block tables) are checked by the kernels, which set bits of `err`.
#pragma once
#include <cstddef>
#include <cstdint>

#include "kernels/backend.hpp"
#include "kernels/device_decode.hpp"
#include "kernels/dtype.hpp"
#include "kernels/paged_attn_args.hpp"

#ifndef TANDEM_CUDA_NS
#error "TANDEM_CUDA_NS must be defined (cuda_dev or cuda_emu) by the build"
#endif

namespace tandem::kernels::TANDEM_CUDA_NS::ops {

using Stream = void*;

// Rows of an F32 matrix: element (r, c) at p[r * ld + c].
struct F32Rows {
  float* p;
  int64_t ld;
};

bool weight_type_supported(DType t);

void get_rows(Stream s, DType t, const uint8_t* table, size_t table_stride, int64_t table_rows, int64_t cols,
              const int32_t* ids, int64_t n, F32Rows dst, int* err);
void rms_norm(Stream s, F32Rows dst, const float* x, int64_t ldx, const float* w, int64_t rows, int64_t cols,
              float eps, float w_offset);
enum class Binary { Add, Mul };
// x = rms_norm(x, w) in place, then dst += x, row by row: one launch, the two ops' bits.
void rms_norm_add(Stream s, F32Rows x, const float* w, int64_t rows, int64_t cols, float eps, F32Rows dst);
// dst = a op b; b_ld == 0 broadcasts b's one row.
void binary(Stream s, Binary op, F32Rows dst, const float* a, int64_t lda, const float* b, int64_t ldb,
            int64_t rows, int64_t cols);
void scale(Stream s, F32Rows dst, int64_t rows, int64_t cols, float v);
void gated_act(Stream s, Activation act, F32Rows dst, const float* gate, int64_t ldg, const float* up, int64_t ldu,
               int64_t rows, int64_t cols);
void rope(Stream s, F32Rows x, const int32_t* positions, int64_t n_tokens, int n_heads, int head_dim, int rope_dims,
          float theta, RopeStyle style);
void kv_store(Stream s, uint8_t* k_cache, uint8_t* v_cache, size_t cache_stride, bool f16, int64_t n_slots,
              const float* k, int64_t ldk, const float* v, int64_t ldv, int64_t n_tokens, int64_t width,
              const int32_t* slots, int* err);
// for i in order: row to[i] of both caches = row from[i] (Backend::kv_move); an out-of-range
// slot sets kErrKvSlot and is skipped.
void kv_move(Stream s, uint8_t* k_cache, uint8_t* v_cache, size_t cache_stride, int64_t n_slots, const int32_t* from,
             const int32_t* to, int64_t n, int* err);

// The attention inputs of a layer in one launch (Backend::attention_inputs): biases (null:
// none) added to q, k, v; each head of q and k RMS-normed (q_norm, k_norm: null none); q and
// k rotated; k, v stored at slots.
struct AttnInputsArgs {
  float *q, *k, *v;
  int64_t ldq, ldk, ldv;
  const float *bq, *bk, *bv;
  const float *q_norm, *k_norm;
  float norm_eps;
  const int32_t* positions;
  int n_heads, n_kv_heads, head_dim, rope_dims;
  float theta;
  bool neox;
  uint8_t *k_cache, *v_cache;
  size_t cache_stride;
  bool f16;
  int64_t n_slots;
  const int32_t* slots;
};
void attn_inputs(Stream s, const AttnInputsArgs& a, int64_t n_tokens, int* err);

// ---- matmul ---------------------------------------------------------------------------------
// Activations of quantized weights are quantized to int8 blocks first, exactly as the CPU
// backend does (symmetric, d = amax/127, codes rounded to nearest even): q [N][C] int8 and
// d [N][C/block] float, block 32 (Q4_0..Q8_0) or 256 (K-quants); and s [N][C/16] int16, the
// sum of each 16 codes (exact), which the weights' offset and min terms multiply, so that
// the matmuls do not add up the activations again for every weight row.
// Where quantize_act's output for one block size goes (q null: not wanted).
struct ActQuant {
  int block = 0;
  int8_t* q = nullptr;
  float* d = nullptr;
  int16_t* s = nullptr;
};
void quantize_act(Stream s, const float* x, int64_t ldx, int64_t n, int64_t c, const ActQuant& aq);
// gated_act, then its rows quantized as quantize_act does (aq.block): one launch.
void gated_act_quant(Stream s, Activation act, F32Rows dst, const float* gate, int64_t ldg, const float* up,
                     int64_t ldu, int64_t rows, int64_t cols, const ActQuant& aq);
// A post-norm's residual added to x first (Backend::PendingResidual): rows of src normed in
// place by w, then added into x, as rms_norm_add does (src null: none).
struct PendingAdd {
  float* src = nullptr;
  int64_t ld = 0;
  const float* w = nullptr;
  float eps = 0.0f;
};
// rms_norm, then the normed rows quantized as quantize_act does for each wanted block size:
// one launch, the bits of the two ops (after rms_norm_add's, with a pending residual).
void rms_norm_quant(Stream s, F32Rows dst, float* x, int64_t ldx, const float* w, int64_t rows, int64_t cols,
                    float eps, float w_offset, const ActQuant& q32, const ActQuant& qk, const PendingAdd& pending = {});
// One weight matrix of a matmul launch: `rows` rows of w, w_stride bytes apart, into y.
struct MatmulWeight {
  const uint8_t* w;
  size_t w_stride;
  int64_t rows;
  F32Rows y;
  bool planes = false;  // rows in the planes layout (kernels/cuda/weight_planes.hpp)
  DType type = DType::F32;
};
// Several matrices of one weight type, layout and row length multiplied with the same
// activations (q/k/v, gate/up of a layer) in one launch: each row's arithmetic is what a launch of its
// matrix alone does, so the results are those of separate launches, bit for bit.
constexpr int kMaxMatmulGroup = 4;
// Whether quantized weights of type a and type b (each in its layout) may share one launch of
// the quantized matmuls: the same type and layout, or the pairs that the real models' q/k/v
// mix (Q4_K_M: Q4_K with Q6_K, Q5_0 with Q8_0; either layout of each), which read the same
// activation blocks. Each member's rows are computed with its own type's code.
bool matmul_pair(DType a, bool a_planes, DType b, bool b_planes);
// What the q/k/v projections' launch does to each result before it stores it: the rest of
// Backend::attention_inputs, so that no launch of its own is needed. Per member of the group:
// a bias (null: none) added, q and k rotated (rotate), k and v also stored into their cache
// at the token's slot (cache null: not stored). Rotation needs both elements of a pair in one
// warp: the kernels compute the rows of a rotated member in pair order (dev::epilogue_row),
// 16 rows of a head at a time, hence head_dim % 16 == 0.
// A member with a per-head norm (head_norm, Gemma 3's q and k) stores its results with their
// bias only; each warp then counts the rows it stored into head_counts[chunk * count_stride +
// head_base + head] (chunk: the launch's grid.y), and the warp whose rows complete a head
// (no block waits for another) norms it, rotates it and stores it into the cache for the
// chunk's tokens, then sets the counter back to zero for the next launch.
struct QkvEpilogue {
  const float* bias[kMaxMatmulGroup] = {};
  bool rotate[kMaxMatmulGroup] = {};
  uint8_t* cache[kMaxMatmulGroup] = {};
  const float* head_norm[kMaxMatmulGroup] = {};
  int head_base[kMaxMatmulGroup] = {};
  float norm_eps = 0.0f;
  int* head_counts = nullptr;
  int64_t count_stride = 0;
  const int32_t* positions = nullptr;
  int head_dim = 0, rope_dims = 0;
  float theta = 0.0f;
  bool neox = false;
  size_t cache_stride = 0;
  bool f16 = false;
  int64_t n_slots = 0;
  const int32_t* slots = nullptr;
  int* err = nullptr;  // kErrKvSlot for a slot outside the cache (that row is not stored)
};
// The small-M kernel for quantized weights: y[t][r] for t < n over every row of each w,
// from the activations (q, d, s) of quantize_act; each weight row is read once per 16 tokens.
// The result of a (t, r) pair does not depend on n (batch invariance): the CPU's scalar
// reference's (kernels/cpu/matmul_scalar.cpp), bit for bit.
constexpr int kSmallMTokens = 16;
// accumulate: y += the product (a residual connection: the bits of add(y, y, product)).
// epi (null: none): the attention inputs' steps on each result (not with accumulate).
void matmul_small(Stream s, const MatmulWeight* ws, int n_w, int64_t cols, const ActQuant& x, int64_t n,
                  bool accumulate = false, const QkvEpilogue* epi = nullptr);
// The warps matmul_small gives a row of `blocks_per_row` blocks, a lane group of a warp taking
// one block a round (`groups` a warp): 4 for rows of at least 4 warps' rounds, 2 for 2,
// else 1 (and 1 with an epilogue). Its parts are summed in block order: the same bits.
int small_row_warps(int64_t blocks_per_row, int groups, bool epilogue);
// The tensor-core kernel for quantized weights (not float ones), any n: the same bits as
// matmul_small for every (t, r), which are the CPU's scalar reference's.
void matmul_mma(Stream s, const MatmulWeight* ws, int n_w, int64_t cols, const ActQuant& x, int64_t n,
                bool accumulate = false, const QkvEpilogue* epi = nullptr);
// Float weights (F32, F16, BF16) against float activations x (rows of ldx) on TF32 tensor
// cores with split operands (about float's precision), for every n: one kernel and one order
// of operations at every batch size, so a (t, r) result does not depend on n. Within float
// rounding of the CPU's dot products (another summation order), not their bits.
void matmul_mma_float(Stream s, DType t, const MatmulWeight* ws, int n_w, int64_t cols, const float* x, int64_t ldx,
                      int64_t n, bool accumulate = false, const QkvEpilogue* epi = nullptr);
// Rows [r0, r0 + nr) of w dequantized to F32 into tile (row-major, cols wide).
void dequant_rows(Stream s, DType t, const uint8_t* w, size_t w_stride, int64_t r0, int64_t nr, int64_t cols,
                  float* tile);

// ---- attention ------------------------------------------------------------------------------
// Contexts are cut into spans of this many positions (flash-decoding); fixed, so a token's
// arithmetic depends on its own context only (the CPU backend uses the same split).
constexpr int kAttnSplit = 512;
// One call's arguments (kernels/paged_attn_args.hpp: built the same way by every backend), and
// how many of its tokens a launch covers.
struct AttnParams : PagedAttnArgs {
  int64_t n_tokens = 0;
  // The output also quantized for the matmul that reads it (quantize_act's codes and scales,
  // rows of n_heads * head_dim; block 0: not), by the block that writes a KV head's group:
  // its group's width must be whole blocks.
  ActQuant quant;
};
// Floats of partial state paged_attention needs in `scratch`.
size_t attention_scratch_floats(const AttnParams& p);
// Dynamic shared memory of one span block; must be <= 48 KiB.
size_t attention_shared_bytes(const AttnParams& p);
// Returns the number of kernels launched (1 when no context can span two splits).
int paged_attention(Stream s, const AttnParams& p, float* scratch, int* err);

// ---- greedy decoding on the device ----------------------------------------------------------
// out[r] = argmax of logits row r (ties: lowest id; NaN as -inf; -1 when nothing is finite).
void argmax_rows(Stream s, const float* logits, int64_t ld, int64_t n_rows, int64_t vocab, int32_t* out);
// Greedy verification of n_seqs sequences: sequence s's k = n_drafts[s] drafts
// drafts[s * max_drafts ..] were verified in logits rows first_row[s] .. first_row[s] + k
// (k + 1 rows), whose argmaxes are `argmax`. n_accepted[s] = the number of leading drafts
// equal to the argmax; out_tokens[s * (max_drafts + 1) ..] = the accepted drafts, then the
// argmax after them, then -1.
// A sequence whose count or rows are out of range gets n_accepted -1 and sets kErrVerify.
// parents [n_seqs, max_drafts] (null: chains): token trees, walked from the root.
void verify_greedy(Stream s, const int32_t* argmax, int64_t n_rows, const int32_t* first_row, const int32_t* drafts,
                   const int32_t* n_drafts, int max_drafts, int n_seqs, int32_t* n_accepted, int32_t* out_tokens,
                   int* err, const int32_t* parents = nullptr);

// ---- sampled decoding on the device (ops/sampling.cu; kernels/device_decode.hpp) -----------
// probs rows [n_rows, vocab] (ld ldp) = the final distribution of logits rows under
// params[r] (rows with skip set are left alone, top -2); top[r], conf[r]: the most likely
// kept token and its probability. penalties: (token, count | kPenaltyInWindow) pairs.
// row_of (may be null): probs row i is made from logits row row_of[i] (< logits_rows; one
// outside sets kErrVerify and gets top -1).
void make_probs(Stream s, const float* logits, int64_t ldl, float* probs, int64_t ldp, int64_t n_rows, int64_t vocab,
                const RowSampling* params, const int32_t* penalties, int32_t* top, float* conf,
                const int32_t* row_of = nullptr, int64_t logits_rows = 0, int* err = nullptr);
// dst rows [n_rows, vocab] = fill, then dst[r][ids[j]] = src[r][j] for j < n (ids outside
// the vocabulary set kErrTokenId and are skipped).
void scatter_cols(Stream s, float* dst, int64_t ldd, int64_t vocab, const float* src, int64_t lds, int64_t n_rows,
                  const int32_t* ids, int64_t n, float fill, int* err);
// Constrained decoding: logits[rows[i]][v] = -inf for each v (< vocab) that mask mask_of[i]
// (masks [n_masks, words] of 32-bit words, bit v % 32 of word v / 32; past its words: none)
// does not allow, in place. A row or mask index out of range sets kErrMaskIndex.
void mask_rows(Stream s, float* logits, int64_t ld, int64_t n_rows, int64_t vocab, const int32_t* rows,
               const int32_t* mask_of, int64_t m, const uint32_t* masks, int64_t words, int64_t n_masks, int* err);
// out[r] = one draw from probs row r keyed by keys[r] (inverse CDF with u(tag), or coupled);
// -1 where top[r] < 0.
void sample_probs(Stream s, const float* probs, int64_t ldp, int64_t n_rows, int64_t vocab, const int32_t* top,
                  const NoiseKey* keys, int32_t tag, bool coupled, int32_t* out);
// Rejection / coupled verification of n_seqs sequences (SeqVerify) against p rows, with q
// rows [q_rows, q_cols] (may be null when no sequence has them); q_rows_of [n_seqs,
// max_drafts]: each draft's q row. parents [n_seqs, max_drafts] (null: chains): token trees
// in rejection mode, whose visited rows of p are overwritten by their residuals.
void verify_sampled(Stream s, float* p, int64_t ldp, int64_t p_rows, int64_t vocab, const float* q, int64_t ldq,
                    int64_t q_rows, int64_t q_cols, const SeqVerify* seqs, const int32_t* drafts,
                    const int32_t* q_rows_of, int max_drafts, int n_seqs, int32_t* n_accepted, int32_t* out_tokens,
                    int* err, const int32_t* parents = nullptr);
// For each listed row rows[i] of q [q_rows, vocab]: counts[i] (at most w) draws without
// replacement, the j-th with the uniform of keys[i] at tag tags[i] - j; ids / vals [n_rows, w]
// (-1 / 0 past them). A row or count out of range sets kErrVerify.
void draw_rows(Stream s, const float* q, int64_t ldq, int64_t q_rows, int64_t vocab, const int32_t* rows,
               int64_t n_rows, const int32_t* counts, const NoiseKey* keys, const int32_t* tags, int w,
               int32_t* ids, float* vals, int* err);

// ---- logprobs on the device (ops/logprob_rows.cu; kernels/device_decode.hpp) --------------
// For each listed row i: w row rows[2i] of w [w_rows, vocab] (penalised logits) and p row
// rows[2i + 1] of p [p_rows, vocab] (a final distribution; -1: a greedy row, p may be null
// when no row has one): chosen_lp[i] = chosen[i]'s logprob, ids / lps [m, n_top] the n_top
// most likely tokens and theirs. scratch: logprob_scratch_words(m, vocab, n_top) words,
// 8-byte aligned. A row or chosen token out of range sets kErrVerify (its outputs NaN / -1).
void logprob_rows(Stream s, const float* w, int64_t ldw, int64_t w_rows, const float* p, int64_t ldp, int64_t p_rows,
                  int64_t vocab, const int32_t* rows, const int32_t* chosen, int64_t m, int n_top, int32_t* scratch,
                  float* chosen_lp, int32_t* ids, float* lps, int* err);

// ---- token trees drafted on the device (ops/top_rows.cu; kernels/device_decode.hpp) -------
// For each listed row rows[i] of src [src_rows, vocab] (ld lds): the w best tokens, best
// first, into ids[i * w ..] and their values into vals[i * w ..] (-1 and 0 past what is
// possible): by value (keys null; lse[2i], lse[2i + 1]: log Σ exp(x − max) as hi + lo floats)
// or by the Gumbel key of keys[i] over probabilities. A row index outside src sets
// kErrVerify.
void top_rows(Stream s, const float* src, int64_t lds, int64_t src_rows, int64_t vocab, const int32_t* rows,
              int64_t n_rows, const NoiseKey* keys, int w, int32_t* ids, float* vals, float* lse, int* err);

}  // namespace tandem::kernels::TANDEM_CUDA_NS::ops
