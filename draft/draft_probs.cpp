#include "draft/draft_probs.hpp"

#include "engine/sampling/device_rows.hpp"

#include <algorithm>
#include <limits>
#include <stdexcept>

namespace tandem {

std::unique_ptr<DraftProbs> DraftProbs::for_backend(kernels::Backend& be) {
  kernels::DeviceDecode* dd = kernels::device_decode(be);
  if (!dd) return nullptr;
  return std::unique_ptr<DraftProbs>(new DraftProbs(be, *dd));
}

void DraftProbs::begin_step(int64_t rows, int64_t cols) {
  rows = std::max<int64_t>(rows, 1);
  if (!store_ || cols != cols_ || rows > cap_rows_) {
    const int64_t cap = std::max(rows, cols == cols_ ? 2 * cap_rows_ : int64_t{0});
    store_.reset();  // the old one goes first: both may not fit the arena
    store_ = be_.alloc(static_cast<size_t>(cap * cols) * sizeof(float));
    cap_rows_ = cap;
    cols_ = cols;
  }
  next_ = 0;
}

kernels::Tensor DraftProbs::q() const { return kernels::make_tensor(store_.get(), DType::F32, cols_, cap_rows_); }

std::vector<DraftProbs::Drawn> DraftProbs::sample(const kernels::Tensor& logits, std::span<const Lane> lanes,
                                                  const kernels::Tensor* subset_ids, int64_t vocab) {
  std::vector<Drawn> out(lanes.size());
  if (lanes.empty()) return out;
  const int64_t rows = logits.rows();
  if (next_ + rows > cap_rows_) throw std::logic_error("DraftProbs: more rows than begin_step reserved");
  kernels::Tensor view = logits;
  if (subset_ids) {
    if (vocab < cols_) throw std::logic_error("DraftProbs: the vocabulary is narrower than q rows");
    const size_t bytes = static_cast<size_t>(rows * vocab) * sizeof(float);
    if (!full_ || full_->size() < bytes) {
      full_.reset();
      full_ = be_.alloc(bytes);
    }
    view = kernels::make_tensor(full_.get(), DType::F32, vocab, rows);
    dd_.scatter_cols(view, logits, *subset_ids, -std::numeric_limits<float>::infinity());
  }
  if (view.cols() < cols_) throw std::logic_error("DraftProbs: logits narrower than q rows");
  view.nb1 = view.row_stride();
  view.ne[0] = cols_;

  // Per logits row: its transform (skip: not a lane's row), its noise key. Every lane of a
  // pass drafts the same draft index (they run in lockstep): one tag for the call.
  std::vector<kernels::RowSampling> params(static_cast<size_t>(rows));
  for (auto& r : params) r.skip = 1;
  std::vector<kernels::NoiseKey> keys(static_cast<size_t>(rows));
  std::vector<int32_t> pens;
  bool any_coupled = false, any_drawn = false;
  const int32_t draft_index = lanes.front().draft_index;
  for (const Lane& l : lanes) {
    if (l.draft_index != draft_index) throw std::logic_error("DraftProbs: lanes of one pass at different draft indices");
    if (l.logits_row < 0 || l.logits_row >= rows) throw std::logic_error("DraftProbs: a lane's row is outside the logits");
    kernels::RowSampling r = row_sampling(*l.sampling);
    r.pen_begin = static_cast<int32_t>(pens.size() / 2);
    append_penalty_entries(*l.sampling, l.history, static_cast<int32_t>(cols_), pens);
    r.pen_end = static_cast<int32_t>(pens.size() / 2);
    params[static_cast<size_t>(l.logits_row)] = r;
    keys[static_cast<size_t>(l.logits_row)] = kernels::NoiseKey::of(l.seed, l.position);
    any_coupled = any_coupled || (l.coupled && !l.sampling->greedy());
    any_drawn = any_drawn || (!l.coupled && !l.sampling->greedy());
  }
  // Side buffer (I32 words): params | keys | penalties | top | conf | ids | coupled ids.
  const auto n_par = static_cast<size_t>(rows) * kernels::kRowSamplingWords;
  const auto n_key = static_cast<size_t>(rows) * kernels::kNoiseKeyWords;
  const size_t n_pen = std::max<size_t>(pens.size(), 2);
  const size_t words = n_par + n_key + n_pen + 4 * static_cast<size_t>(rows);
  kernels::WordViews w(be_, side_, words);
  const kernels::Tensor tp = w.take(DType::I32, kernels::kRowSamplingWords, rows);
  const kernels::Tensor tk = w.take(DType::I32, kernels::kNoiseKeyWords, rows);
  const kernels::Tensor tpen = w.take(DType::I32, 2, static_cast<int64_t>(n_pen / 2));
  const kernels::Tensor top = w.take(DType::I32, rows), conf = w.take(DType::F32, rows);
  const kernels::Tensor ids = w.take(DType::I32, rows), cids = w.take(DType::I32, rows);
  be_.upload(tp, params.data(), n_par * 4);
  be_.upload(tk, keys.data(), n_key * 4);
  if (!pens.empty()) be_.upload(tpen, pens.data(), pens.size() * 4);
  const int32_t first = static_cast<int32_t>(next_);
  const kernels::Tensor probs = kernels::make_tensor(store_.get(), DType::F32, cols_, rows, static_cast<size_t>(next_ * cols_) * 4);
  next_ += rows;
  dd_.make_probs(probs, top, conf, view, tp, pens.empty() ? kernels::Tensor{} : tpen);
  if (any_drawn) dd_.sample_probs(ids, probs, top, tk, kernels::kTagDraft - draft_index, false);
  if (any_coupled) dd_.sample_probs(cids, probs, top, tk, kernels::kTagDraft, true);
  std::vector<int32_t> h_top(static_cast<size_t>(rows)), h_ids(static_cast<size_t>(rows)), h_cids(static_cast<size_t>(rows));
  std::vector<float> h_conf(static_cast<size_t>(rows));
  be_.download(h_top.data(), top, h_top.size() * 4);
  be_.download(h_conf.data(), conf, h_conf.size() * 4);
  if (any_drawn) be_.download(h_ids.data(), ids, h_ids.size() * 4);
  if (any_coupled) be_.download(h_cids.data(), cids, h_cids.size() * 4);
  be_.synchronize();
  for (size_t i = 0; i < lanes.size(); ++i) {
    const Lane& l = lanes[i];
    const auto r = static_cast<size_t>(l.logits_row);
    Drawn& d = out[i];
    d.q_row = first + l.logits_row;
    d.conf = h_conf[r];
    if (h_top[r] < 0 || l.sampling->greedy()) d.token = h_top[r];
    else d.token = l.coupled ? h_cids[r] : h_ids[r];
  }
  return out;
}

}  // namespace tandem
