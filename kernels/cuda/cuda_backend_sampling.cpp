// CudaBackend's sampled decoding (kernels/device_decode.hpp: make_probs, sample_probs,
// verify_sampled; top_rows for token trees; mask_rows; logprob_rows): shape checks, then the
// launches (kernels/cuda/ops/sampling.cu, top_rows.cu, mask_rows.cu, logprob_rows.cu).
#include <cmath>
#include <stdexcept>
#include <string>

#include "kernels/cuda/cuda_backend.hpp"
#include "kernels/cuda/cuda_backend_detail.hpp"
#include "kernels/cuda/ops.hpp"
#include "kernels/tree_keys.hpp"

namespace tandem::kernels::TANDEM_CUDA_NS {
using namespace backend_detail;

namespace {

bool packed_i32(const Tensor& t, int64_t words) { return t.type == DType::I32 && t.cols() == words && t.nb1 == 0; }

}  // namespace

void CudaBackend::make_probs(const Tensor& probs, const Tensor& top, const Tensor& conf, const Tensor& logits,
                             const Tensor& params, const Tensor& penalties, const Tensor& row_map) {
  const char* op = "make_probs";
  require(probs.type == DType::F32 && logits.type == DType::F32 && conf.type == DType::F32 && top.type == DType::I32,
        op, "probs, logits and conf F32, top I32");
  const bool mapped = row_map.buf != nullptr;
  require(!mapped || (row_map.type == DType::I32 && row_map.nb1 == 0), op, "rows: packed I32");
  const int64_t rows = mapped ? row_map.numel() : logits.rows();
  require(probs.rows() == rows && top.numel() == rows && conf.numel() == rows, op, "one probs row, top and conf per row");
  require(logits.cols() >= probs.cols() && probs.cols() > 0, op, "logits rows at least as wide as probs rows");
  require(probs.cols() <= kMaxDeviceSampleVocab, op, "vocabularies above 2^19 tokens are not supported");
  require(packed_i32(params, kRowSamplingWords) && params.rows() == rows, op, "params: I32 [16, rows]");
  const bool with_pen = penalties.buf != nullptr;
  require(!with_pen || packed_i32(penalties, kPenaltyEntryWords), op, "penalties: I32 [3, n]");
  ops::make_probs(rt_->stream(), reinterpret_cast<const float*>(ptr(logits, op)), ld_of(logits),
                  reinterpret_cast<float*>(ptr(probs, op)), ld_of(probs), rows, probs.cols(),
                  reinterpret_cast<const RowSampling*>(ptr(params, op)),
                  with_pen ? reinterpret_cast<const int32_t*>(ptr(penalties, op)) : nullptr,
                  reinterpret_cast<int32_t*>(ptr(top, op)), reinterpret_cast<float*>(ptr(conf, op)),
                  mapped ? reinterpret_cast<const int32_t*>(ptr(row_map, op)) : nullptr, logits.rows(), err_);
  launched(op);
}

void CudaBackend::sample_probs(const Tensor& ids, const Tensor& probs, const Tensor& top, const Tensor& keys,
                               int32_t tag, bool coupled) {
  const char* op = "sample_probs";
  require(probs.type == DType::F32 && ids.type == DType::I32 && top.type == DType::I32, op, "probs F32, ids and top I32");
  require(ids.numel() == probs.rows() && top.numel() == probs.rows(), op, "one id and top per row");
  require(probs.cols() <= kMaxDeviceSampleVocab, op, "vocabularies above 2^19 tokens are not supported");
  require(packed_i32(keys, kNoiseKeyWords) && keys.rows() == probs.rows(), op, "keys: I32 [4, rows]");
  ops::sample_probs(rt_->stream(), reinterpret_cast<const float*>(ptr(probs, op)), ld_of(probs), probs.rows(),
                    probs.cols(), reinterpret_cast<const int32_t*>(ptr(top, op)),
                    reinterpret_cast<const NoiseKey*>(ptr(keys, op)), tag, coupled,
                    reinterpret_cast<int32_t*>(ptr(ids, op)));
  launched(op);
}

void CudaBackend::verify_sampled(const Tensor& p, const Tensor& q, const Tensor& seqs, const Tensor& drafts,
                                 const Tensor& q_rows, const Tensor& n_accepted, const Tensor& out_tokens,
                                 const Tensor& parents) {
  const char* op = "verify_sampled";
  require(p.type == DType::F32, op, "p F32");
  require(p.cols() <= kMaxDeviceSampleVocab, op, "vocabularies above 2^19 tokens are not supported");
  const bool with_q = q.buf != nullptr;
  require(!with_q || q.type == DType::F32, op, "q F32");
  const int64_t n = seqs.rows();
  require(packed_i32(seqs, kSeqVerifyWords), op, "seqs: I32 [8, n]");
  require(drafts.type == DType::I32 && n_accepted.type == DType::I32 && out_tokens.type == DType::I32, op,
        "drafts, n_accepted and out_tokens I32");
  require(drafts.rows() == n && n_accepted.numel() == n && out_tokens.rows() == n, op, "one row per sequence");
  require(out_tokens.cols() == drafts.cols() + 1, op, "out_tokens must be max_drafts + 1 wide");
  require(drafts.nb1 == 0 && out_tokens.nb1 == 0, op, "packed drafts and out_tokens");
  require(q_rows.type == DType::I32 && q_rows.nb1 == 0 && q_rows.cols() == drafts.cols() && q_rows.rows() == n, op,
        "q_rows: I32 shaped like drafts");
  const bool trees = parents.buf != nullptr;
  require(!trees || (parents.type == DType::I32 && parents.nb1 == 0 && parents.cols() == drafts.cols() &&
                     parents.rows() == n),
          op, "parents: I32 shaped like drafts");
  auto i32 = [&](const Tensor& t) { return reinterpret_cast<int32_t*>(ptr(t, op)); };
  ops::verify_sampled(rt_->stream(), reinterpret_cast<float*>(ptr(p, op)), ld_of(p), p.rows(),
                      p.cols(), with_q ? reinterpret_cast<const float*>(ptr(q, op)) : nullptr,
                      with_q ? ld_of(q) : 0, with_q ? q.rows() : 0, with_q ? q.cols() : 0,
                      reinterpret_cast<const SeqVerify*>(ptr(seqs, op)), i32(drafts), i32(q_rows), static_cast<int>(drafts.cols()),
                      static_cast<int>(n), i32(n_accepted), i32(out_tokens), err_, trees ? i32(parents) : nullptr);
  launched(op);
}

void CudaBackend::draw_rows(const Tensor& ids, const Tensor& vals, const Tensor& q, const Tensor& rows,
                            const Tensor& counts, const Tensor& keys, const Tensor& tags, int32_t w) {
  const char* op = "draw_rows";
  require(q.type == DType::F32 && vals.type == DType::F32 && ids.type == DType::I32 && rows.type == DType::I32 &&
              counts.type == DType::I32 && tags.type == DType::I32,
          op, "q and vals F32, ids, rows, counts and tags I32");
  require(w >= 1 && w <= kMaxTreeNodes, op, "w in 1..64 (a node's children at most)");
  require(q.cols() <= kMaxDeviceSampleVocab, op, "vocabularies above 2^19 tokens are not supported");
  const int64_t m = rows.numel();
  require(ids.nb1 == 0 && vals.nb1 == 0 && rows.nb1 == 0 && counts.nb1 == 0 && tags.nb1 == 0, op, "packed tensors");
  require(ids.numel() == m * w && vals.numel() == m * w && counts.numel() == m && tags.numel() == m, op,
          "ids, vals [w, m], counts and tags [m]");
  require(packed_i32(keys, kNoiseKeyWords) && keys.rows() == m, op, "keys: I32 [4, m]");
  ops::draw_rows(rt_->stream(), reinterpret_cast<const float*>(ptr(q, op)), ld_of(q), q.rows(), q.cols(),
                 reinterpret_cast<const int32_t*>(ptr(rows, op)), m, reinterpret_cast<const int32_t*>(ptr(counts, op)),
                 reinterpret_cast<const NoiseKey*>(ptr(keys, op)), reinterpret_cast<const int32_t*>(ptr(tags, op)), w,
                 reinterpret_cast<int32_t*>(ptr(ids, op)), reinterpret_cast<float*>(ptr(vals, op)), err_);
  launched(op);
}

void CudaBackend::scatter_cols(const Tensor& dst, const Tensor& src, const Tensor& ids, float fill) {
  const char* op = "scatter_cols";
  require(dst.type == DType::F32 && src.type == DType::F32 && ids.type == DType::I32, op, "dst, src F32, ids I32");
  require(dst.rows() == src.rows(), op, "one dst row per src row");
  require(ids.numel() == src.cols(), op, "one id per src column");
  ops::scatter_cols(rt_->stream(), reinterpret_cast<float*>(ptr(dst, op)), ld_of(dst), dst.cols(),
                    reinterpret_cast<const float*>(ptr(src, op)), ld_of(src), src.rows(),
                    reinterpret_cast<const int32_t*>(ptr(ids, op)), ids.numel(), fill, err_);
  launched(op);
}

void CudaBackend::mask_rows(const Tensor& logits, const Tensor& rows, const Tensor& mask_of, const Tensor& masks) {
  const char* op = "mask_rows";
  require(logits.type == DType::F32 && rows.type == DType::I32 && mask_of.type == DType::I32 && masks.type == DType::I32,
          op, "logits F32, rows, mask_of and masks I32");
  const int64_t m = rows.numel();
  require(rows.nb1 == 0 && mask_of.nb1 == 0 && masks.nb1 == 0, op, "packed rows, mask_of and masks");
  require(mask_of.numel() == m, op, "one mask index per listed row");
  require(m <= 65535, op, "at most 65535 rows a call");
  ops::mask_rows(rt_->stream(), reinterpret_cast<float*>(ptr(logits, op)), ld_of(logits), logits.rows(),
                 logits.cols(), reinterpret_cast<const int32_t*>(ptr(rows, op)),
                 reinterpret_cast<const int32_t*>(ptr(mask_of, op)), m,
                 reinterpret_cast<const uint32_t*>(ptr(masks, op)), masks.cols(), masks.rows(), err_);
  launched(op);
}

void CudaBackend::logprob_rows(const Tensor& chosen_lp, const Tensor& ids, const Tensor& lps, const Tensor& w,
                               const Tensor& p, const Tensor& rows, const Tensor& chosen, int32_t n_top,
                               const Tensor& scratch) {
  const char* op = "logprob_rows";
  require(w.type == DType::F32 && chosen_lp.type == DType::F32 && lps.type == DType::F32 && ids.type == DType::I32 &&
              rows.type == DType::I32 && chosen.type == DType::I32 && scratch.type == DType::I32,
          op, "w, chosen_lp and lps F32, ids, rows, chosen and scratch I32");
  require(n_top >= 0 && n_top <= kMaxLogprobTop, op, "n_top in 0..20");
  require(w.cols() <= kMaxDeviceSampleVocab, op, "vocabularies above 2^19 tokens are not supported");
  const bool with_p = p.buf != nullptr;
  require(!with_p || (p.type == DType::F32 && p.cols() == w.cols()), op, "p F32 as wide as w");
  const int64_t m = chosen.numel();
  require(chosen_lp.nb1 == 0 && ids.nb1 == 0 && lps.nb1 == 0 && chosen.nb1 == 0 && scratch.nb1 == 0, op,
          "packed outputs, chosen and scratch");
  require(packed_i32(rows, 2) && rows.rows() == m, op, "rows: I32 [2, m]");
  require(chosen_lp.numel() == m && ids.numel() == m * n_top && lps.numel() == m * n_top, op,
          "chosen_lp [m], ids and lps [n_top, m]");
  require(m <= 65535, op, "at most 65535 rows a call");
  require(scratch.numel() >= logprob_scratch_words(m, w.cols(), n_top), op, "scratch: logprob_scratch_words");
  auto* sp = reinterpret_cast<int32_t*>(ptr(scratch, op));
  require(reinterpret_cast<uintptr_t>(sp) % 8 == 0, op, "scratch 8-byte aligned");
  ops::logprob_rows(rt_->stream(), reinterpret_cast<const float*>(ptr(w, op)), ld_of(w), w.rows(),
                    with_p ? reinterpret_cast<const float*>(ptr(p, op)) : nullptr, with_p ? ld_of(p) : 0,
                    with_p ? p.rows() : 0, w.cols(), reinterpret_cast<const int32_t*>(ptr(rows, op)),
                    reinterpret_cast<const int32_t*>(ptr(chosen, op)), m, n_top, sp,
                    reinterpret_cast<float*>(ptr(chosen_lp, op)), reinterpret_cast<int32_t*>(ptr(ids, op)),
                    reinterpret_cast<float*>(ptr(lps, op)), err_);
  launched(op);
}

void CudaBackend::top_rows(const Tensor& ids, const Tensor& vals, const Tensor& lse, const Tensor& src,
                           const Tensor& rows, const Tensor& keys, int32_t w) {
  const char* op = "top_rows";
  require(src.type == DType::F32 && vals.type == DType::F32 && lse.type == DType::F32 && ids.type == DType::I32 &&
              rows.type == DType::I32,
          op, "src, vals and lse F32, ids and rows I32");
  require(w >= 1 && w <= kMaxTreeNodes, op, "w in 1..64 (a tree's width at most)");
  require(src.cols() <= kMaxDeviceSampleVocab, op, "vocabularies above 2^19 tokens are not supported");
  const int64_t m = rows.numel();
  require(ids.nb1 == 0 && vals.nb1 == 0 && lse.nb1 == 0 && rows.nb1 == 0, op, "packed ids, vals, lse and rows");
  require(ids.numel() == m * w && vals.numel() == m * w && lse.numel() == 2 * m, op, "ids, vals [w, m], lse [2, m]");
  const bool with_keys = keys.buf != nullptr;
  require(!with_keys || (packed_i32(keys, kNoiseKeyWords) && keys.rows() == m), op, "keys: I32 [4, m]");
  ops::top_rows(rt_->stream(), reinterpret_cast<const float*>(ptr(src, op)), ld_of(src), src.rows(), src.cols(),
                reinterpret_cast<const int32_t*>(ptr(rows, op)), m,
                with_keys ? reinterpret_cast<const NoiseKey*>(ptr(keys, op)) : nullptr, w,
                reinterpret_cast<int32_t*>(ptr(ids, op)), reinterpret_cast<float*>(ptr(vals, op)),
                reinterpret_cast<float*>(ptr(lse, op)), err_);
  launched(op);
}

}  // namespace tandem::kernels::TANDEM_CUDA_NS
