// Optional capability of a backend: greedy and sampled decoding and the speculative
// verifier on the device, so that only token ids and accepted counts cross to the host each
// step instead of the logits. The CUDA backend has it; device_decode() is
// nullptr for others (the engine then downloads the logits and uses engine/sampler.hpp as
// today).
#pragma once
#include <cstdint>
#include <memory>

#include "kernels/backend.hpp"

namespace tandem::kernels {

class DeviceDecode {
 public:
  virtual ~DeviceDecode() = default;
  // ids[r] = argmax of logits row r with the engine's argmax semantics (ties: lowest id,
  // NaN as -inf, -0 == +0); -1 for a row with no finite or +inf value. logits F32
  // [n, vocab], ids I32 [n].
  virtual void argmax_rows(const Tensor& ids, const Tensor& logits) = 0;
  // Verification of a batch against the target's token of each row (argmax_rows for
  // greedy requests), all tensors I32 on the backend:
  //   argmax [rows] (those tokens), first_row [n_seqs] (the row verifying a sequence's
  //   first draft), drafts [n_seqs, max_drafts], n_drafts [n_seqs] (0..max_drafts).
  // Writes n_accepted [n_seqs] (leading drafts equal to the argmax) and out_tokens
  // [n_seqs, max_drafts + 1]: the accepted drafts, the argmax after them, then -1. A
  // sequence whose rows lie outside `argmax` is reported at the next synchronize/download.
  // parents [n_seqs, max_drafts] (buf null: every sequence a chain): the drafts are token
  // trees (parents[i] < i, -1: the root) whose node i is verified by row first_row + 1 + i:
  // from the root, the walk accepts the first child whose token is its row's argmax.
  virtual void verify_greedy(const Tensor& argmax, const Tensor& first_row, const Tensor& drafts,
                             const Tensor& n_drafts, const Tensor& n_accepted, const Tensor& out_tokens,
                             const Tensor& parents = {}) = 0;

  // ---- sampled decoding on the device (kernels/cuda/ops/sampling.cu) ---------------------
  // The engine's make_distribution (engine/sampling/sampler.hpp) row by row: NaN → -inf,
  // penalties, temperature, top-k, softmax, top-p, min-p, renormalise; the same float
  // operations in the same order (the engine's exp polynomial), so the kept tokens are the
  // CPU's and their probabilities equal it up to the last bit of the normaliser (summed in
  // another order). probs F32 [rows, V] (V = the vocabulary sampled over; logits F32
  // [rows, >= V], its first V columns read): the final distribution, 0 outside the kept
  // tokens; greedy rows (temperature <= 0) a point mass on the penalised argmax. top I32
  // [rows]: the most likely kept token (the argmax; -1 when no token is possible), conf
  // F32 [rows]: its probability (greedy rows: the largest softmax probability of the raw
  // logits at temperature 1, the draft's confidence for draft_p_min); rows with skip set
  // are left alone but for top = -2. The parameters must be valid (validate_sampling,
  // engine/sampling/sampler.hpp): the kernel does not check them again. params: I32
  // [kRowSamplingWords, rows] of RowSampling; penalties: I32 [kPenaltyEntryWords, n] entries
  // (below), or a tensor with no buffer when no row has any.
  // rows I32 [m] (a tensor with no buffer: row r of probs is logits row r): probs row i (and
  // top, conf and params row i) is made from logits row rows[i], so that a few rows of a
  // large pass need only their own m rows of probs; a row outside the logits is reported at
  // the next synchronize/download (its top -1).
  virtual void make_probs(const Tensor& probs, const Tensor& top, const Tensor& conf, const Tensor& logits,
                          const Tensor& params, const Tensor& penalties, const Tensor& rows = {}) = 0;
  // One token per row from probs rows: inverse CDF in id order with the uniform
  // u = PositionNoise(seed).uniform(position, tag) (rejection mode's stream, keyed like the
  // coupled noise so that no draw depends on what earlier steps drew), or, with coupled,
  // the engine's gumbel_argmax (argmin -log u(position, v) / p_v): the token the CPU's
  // coupled sampler picks from the same probabilities. keys: I32 [kNoiseKeyWords, rows]
  // (NoiseKey). top: make_probs' top of these rows; a row whose top is negative (nothing
  // possible, or skipped) is not drawn from and gets -1. ids I32 [rows].
  virtual void sample_probs(const Tensor& ids, const Tensor& probs, const Tensor& top, const Tensor& keys,
                            int32_t tag, bool coupled) = 0;
  // Speculative verification of a batch against target probs rows (make_probs), one
  // SeqVerify per sequence (I32 [kSeqVerifyWords, n]): rejection sampling (accept x_i when
  // u·q_i(x) < p_i(x), else a draw from norm(max(0, p_i − q_i)), all accepted: a draw from
  // p_k), with q_i the draft's probs rows (q: F32 [rows_q, V_q]; or point masses on the
  // drafts) and counter-based uniforms (tags kTagAccept, kTagSample at the position of each
  // verified token); or coupled (accept while the draft equals the target's gumbel_argmax).
  // drafts I32 [max_drafts, n], q_rows I32 [max_drafts, n] (each draft's row of q, for
  // sequences with_q); writes n_accepted I32 [n] and out_tokens I32 [max_drafts + 1, n]
  // (the accepted drafts, then the next token, then -1). A sequence whose rows or counts
  // are out of range gets n_accepted -1 and is reported at the next synchronize/download.
  //
  // parents I32 [max_drafts, n] (a tensor with no buffer: chains): every sequence's drafts are
  // a token tree (parents[i] < i, -1: the root; node i verified by row first_row + 1 + i, its
  // q row q_rows[i] the one its siblings were drawn from, without replacement), walked from
  // the root with recursive rejection sampling over each node's children (not coupled):
  // with W the row's weights in 2^-44 fixed point (S their sum) and Q_j q's weights left
  // after the siblings before child j, child j's token x is accepted when
  // u_j · fx(q(x)) / Q_j < fx(W(x)) / S (u_0 keyed kTagAccept, u_j kTagSiblingAccept - j;
  // point masses: q_j(x) = 1); on rejection W becomes max(0, W/S − q_j) rounded to float
  // (W itself when that has no mass; a point mass: x's weight dropped); after the last
  // child, or at a leaf, the token is drawn from W (kTagSample). p's rows are overwritten.
  virtual void verify_sampled(const Tensor& p, const Tensor& q, const Tensor& seqs, const Tensor& drafts,
                              const Tensor& q_rows, const Tensor& n_accepted, const Tensor& out_tokens,
                              const Tensor& parents = {}) = 0;
  // The w best tokens of listed rows, best first: the children of token-tree nodes drafted
  // on the device (draft/tree_rows.hpp). rows I32 [m]: which rows of src (F32 [rows_src, V]).
  //   * keys with no buffer: src holds logits; by value, ties to the lower id, over values
  //     > -inf (NaN counts as -inf); a row whose largest value is +inf gets none. lse F32
  //     [2, m]: log Σ exp(x − max) over those values (exp_nonpos's terms summed in double),
  //     as hi + lo floats; vals the chosen logits.
  //   * keys I32 [kNoiseKeyWords, m] (NoiseKey): src holds probs (make_probs); by the key
  //     −log u(position, v) / p_v over p_v > 0, gumbel_top's order (engine/sampling/gumbel.hpp);
  //     vals the chosen probabilities, lse 0.
  // ids I32 [w, m] (-1 past what is possible), vals F32 [w, m]. A row index outside src is
  // reported at the next synchronize/download.
  virtual void top_rows(const Tensor& ids, const Tensor& vals, const Tensor& lse, const Tensor& src,
                        const Tensor& rows, const Tensor& keys, int32_t w) = 0;
  // Rejection-mode token trees: for each listed row rows[i] of q (F32 [rows_q, V], make_probs),
  // counts[i] tokens drawn without replacement, each by inverse CDF in id order over the 2^-44
  // fixed-point weights of the tokens not drawn yet, the j-th with the uniform of keys[i]
  // (NoiseKey) at tag tags[i] - j; fewer when no weight is left. ids I32 [w, m] (-1 past
  // the draws), vals F32 [w, m] (q of each drawn token); rows, counts, tags I32 [m].
  virtual void draw_rows(const Tensor& ids, const Tensor& vals, const Tensor& q, const Tensor& rows,
                         const Tensor& counts, const Tensor& keys, const Tensor& tags, int32_t w) = 0;
  // Constrained decoding (engine/grammar/): logits[rows[i]][v] = -inf, in place, for every v
  // that mask mask_of[i] does not allow, so that the ops above choose among allowed tokens
  // only (make_distribution's mask, which also comes before every transform). masks I32
  // [words, n_masks]: each a TokenMask's 64-bit words as little-endian 32-bit halves (bit
  // v % 32 of word v / 32; columns past a mask's words are not allowed); rows, mask_of I32
  // [m]. A row or mask index out of range is reported at the next synchronize/download.
  virtual void mask_rows(const Tensor& logits, const Tensor& rows, const Tensor& mask_of, const Tensor& masks) = 0;
  // Logprobs of chosen tokens (engine/sampling/logprobs.hpp token_logprobs, on the device), so
  // that a request asking for them is decoded on the device too. For each listed row i:
  //   rows I32 [2, m]: its row of w (F32 [rows_w, V]: the penalised logits, make_probs with
  //   RowSampling::penalised_only) and its row of p (F32 [rows_p, V]: make_probs' final
  //   distribution), or -1 for a greedy row; chosen I32 [m]: the token committed there.
  //   chosen_lp F32 [m]: its logprob; ids I32 [n_top, m] and lps F32 [n_top, m]: the n_top
  //   (0..kMaxLogprobTop) most likely tokens, larger first, ties to the lower id, and theirs.
  //   Greedy rows: log-softmax of w at temperature 1 (the host's exp_nonpos terms, summed in
  //   double in another fixed order; +inf logits share the mass). Sampled rows: log p, the
  //   distribution's tokens first, then the others by w at -inf. Fewer than n_top tokens in
  //   the vocabulary: ids -1 past them.
  // p may have no buffer when no row is sampled. scratch I32 [logprob_scratch_words(m, V,
  // n_top)] (8-byte aligned). A row or chosen token out of range is reported at the next
  // synchronize/download.
  virtual void logprob_rows(const Tensor& chosen_lp, const Tensor& ids, const Tensor& lps, const Tensor& w,
                            const Tensor& p, const Tensor& rows, const Tensor& chosen, int32_t n_top,
                            const Tensor& scratch) = 0;
  // dst F32 [rows, V] = fill everywhere but dst[r][ids[j]] = src[r][j] (src F32 [rows, n],
  // ids I32 [n], unique, < V): a reduced draft vocabulary's logits over the whole one.
  virtual void scatter_cols(const Tensor& dst, const Tensor& src, const Tensor& ids, float fill) = 0;
};

// One row's transform for make_probs: the request's SamplingParams (include/tandem/sampling.hpp)
// and where its penalty entries are. 16 words; uploaded as I32.
struct RowSampling {
  float temperature = 0.0f;  // <= 0: greedy
  int32_t top_k = 0;
  float top_p = 1.0f;
  float min_p = 0.0f;
  float repetition_penalty = 1.0f;
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  int32_t pen_begin = 0, pen_end = 0;  // its entries of the penalty list: [pen_begin, pen_end)
  // Tests only (verify/verifier.hpp inject_verifier_bias): this much probability moves from
  // the most likely token to the second after normalising. 0: none.
  float bias_mass = 0.0f;
  int32_t skip = 0;  // 1: not this call's row (probs untouched, top = -2)
  // 1: the row stops after the penalties and biases: probs holds the penalised logits (NaN
  // as -inf; what logprob_rows reads), top = -2.
  int32_t penalised_only = 0;
  int32_t reserved[4] = {};
};
constexpr int kRowSamplingWords = 16;
static_assert(sizeof(RowSampling) == kRowSamplingWords * 4);
// A penalty entry: one per distinct token of a row whose logit changes before the transforms.
// Words: the token; its occurrences in the history (for presence and frequency), bit 31 set
// when it is also in the repetition window; its logit bias (F32 bits, added after the
// penalties; 0: none).
constexpr int kPenaltyEntryWords = 3;
constexpr uint32_t kPenaltyInWindow = 1u << 31;

// The counter-based noise of a row or sequence: PositionNoise(seed) at `position`.
struct NoiseKey {
  uint32_t seed_lo = 0, seed_hi = 0;
  uint32_t pos_lo = 0, pos_hi = 0;
  static NoiseKey of(uint64_t seed, int64_t position) {
    const auto p = static_cast<uint64_t>(position);
    return {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32), static_cast<uint32_t>(p),
            static_cast<uint32_t>(p >> 32)};
  }
};
constexpr int kNoiseKeyWords = 4;
static_assert(sizeof(NoiseKey) == kNoiseKeyWords * 4);
// The token slot of PositionNoise::uniform that each draw of rejection mode uses (tokens
// are >= 0, so these never meet the coupled noise): the acceptance test of the token at a
// position, the draw of that token from p or the residual, and the draft's draw from q.
// A draft's tag also counts how far past the step's first drafted position it lies
// (kTagDraft - i for draft i): every step starts one committed token later, so a position
// drafted again after a rejection gets fresh noise, whatever the discarded draft revealed
// to the policy.
constexpr int32_t kTagAccept = -1;
constexpr int32_t kTagSample = -2;
constexpr int32_t kTagDraft = -3;
// Rejection-mode token trees (verify_sampled with parents, draw_rows): the acceptance test of
// a node's j-th child, j >= 1 (the first child's is kTagAccept, as a chain draft's); and the
// draft's draw of the node it creates in slot s (0..kMaxTreeNodes - 1, unique in the step's
// tree) at depth d: kTagTreeDraw - (d * 64 + s). One node is visited per depth, so the
// verifier's tags need no node; the draws' depth keeps a position drafted again in a later
// step (at a smaller depth) on fresh noise.
constexpr int32_t kTagSiblingAccept = -(1 << 20);
constexpr int32_t kTagTreeDraw = -(1 << 21);
inline int32_t tree_draw_tag(int32_t depth, int32_t slot) { return kTagTreeDraw - (depth * 64 + slot); }
// Vocabularies the device sampling takes (its fixed-point sums stay below 2^63); larger
// ones are sampled on the host.
constexpr int64_t kMaxDeviceSampleVocab = int64_t{1} << 19;

// A sequence of verify_sampled: its rows first_row .. first_row + n_drafts of p, whether its
// drafts have q rows (else they are point masses), the mode, and the noise key of its first
// verified token (draft 0's position).
struct SeqVerify {
  int32_t first_row = 0;
  int32_t n_drafts = 0;
  int32_t with_q = 0;   // 1: draft i's q is row q_rows[i] of q
  int32_t coupled = 0;  // 1: coupled (Gumbel-max) verification
  NoiseKey key;
};
constexpr int kSeqVerifyWords = 8;
static_assert(sizeof(SeqVerify) == kSeqVerifyWords * 4);

// logprob_rows cuts each row into segments of this many tokens, one block each; its scratch
// holds each segment's candidates, share of the normaliser (a double) and maximum.
constexpr int64_t kLogprobSegment = 4096;
// The most alternatives logprob_rows lists (the API's kMaxTopLogprobs, include/tandem/generation.hpp).
constexpr int32_t kMaxLogprobTop = 20;
inline int64_t logprob_scratch_words(int64_t m, int64_t vocab, int32_t n_top) {
  const int64_t segments = (vocab + kLogprobSegment - 1) / kLogprobSegment;
  const int64_t cand = m * segments * n_top;
  return cand + (cand & 1) + 3 * m * segments;
}

inline DeviceDecode* device_decode(Backend& be) { return dynamic_cast<DeviceDecode*>(&be); }

// The small per-call tensors of these ops (parameters, keys, ids, counts) as consecutive
// views of one 4-byte-word buffer that grows (to twice what is asked) and then stays.
class WordViews {
 public:
  WordViews(Backend& be, std::unique_ptr<Buffer>& buf, size_t words) : buf_(buf) {
    if (!buf_ || buf_->size() < words * 4) buf_ = be.alloc(words * 4 * 2);
  }
  Tensor take(DType t, int64_t ne0, int64_t ne1 = 1) {
    const Tensor x = make_tensor(buf_.get(), t, ne0, ne1, at_ * 4);
    at_ += static_cast<size_t>(ne0 * ne1);
    return x;
  }

 private:
  std::unique_ptr<Buffer>& buf_;
  size_t at_ = 0;
};

}  // namespace tandem::kernels
