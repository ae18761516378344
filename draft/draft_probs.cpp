#include "draft/draft_probs.hpp"

#include "engine/sampling/device_rows.hpp"
#include "kernels/tree_keys.hpp"

#include <algorithm>
#include <cmath>
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

kernels::Tensor DraftProbs::full_rows(const kernels::Tensor& logits, const kernels::Tensor* subset_ids, int64_t vocab) {
  if (!subset_ids) return logits;
  if (vocab < logits.cols()) throw std::logic_error("DraftProbs: the vocabulary is narrower than the logits");
  const int64_t rows = logits.rows();
  const size_t bytes = static_cast<size_t>(rows * vocab) * sizeof(float);
  if (!full_ || full_->size() < bytes) {
    full_.reset();
    full_ = be_.alloc(bytes);
  }
  const kernels::Tensor view = kernels::make_tensor(full_.get(), DType::F32, vocab, rows);
  dd_.scatter_cols(view, logits, *subset_ids, -std::numeric_limits<float>::infinity());
  return view;
}

std::vector<DraftProbs::Drawn> DraftProbs::sample(const kernels::Tensor& logits, std::span<const Lane> lanes,
                                                  const kernels::Tensor* subset_ids, int64_t vocab) {
  std::vector<Drawn> out(lanes.size());
  if (lanes.empty()) return out;
  const int64_t rows = logits.rows();
  if (next_ + rows > cap_rows_) throw std::logic_error("DraftProbs: more rows than begin_step reserved");
  kernels::Tensor view = full_rows(logits, subset_ids, vocab);
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

std::vector<std::vector<TreeChild>> DraftProbs::tree_children(const kernels::Tensor& logits,
                                                              std::span<const TreeRow> rows, int64_t cols,
                                                              const kernels::Tensor* subset_ids, int64_t vocab) {
  std::vector<std::vector<TreeChild>> out(rows.size());
  if (rows.empty()) return out;
  kernels::Tensor view = full_rows(logits, subset_ids, vocab);
  if (view.cols() < cols || cols <= 0) throw std::logic_error("DraftProbs: logits narrower than the tree's vocabulary");
  view.nb1 = view.row_stride();
  view.ne[0] = cols;
  const int64_t n_rows = view.rows();
  // Greedy rows read the logits; coupled ones q's rows (make_probs, into tree_probs_).
  std::vector<size_t> greedy, coupled;
  int32_t w = 1;
  for (size_t i = 0; i < rows.size(); ++i) {
    const TreeRow& r = rows[i];
    if (r.logits_row < 0 || r.logits_row >= n_rows) throw std::logic_error("DraftProbs: a tree row is outside the logits");
    if (r.room < 1 || r.room > kernels::kMaxTreeNodes) throw std::logic_error("DraftProbs: a tree node's room is out of range");
    (r.coupled ? coupled : greedy).push_back(i);
    w = std::max(w, r.room);
  }
  std::vector<kernels::RowSampling> params;
  std::vector<int32_t> pens;
  if (!coupled.empty()) {
    params.resize(static_cast<size_t>(n_rows));
    for (auto& p : params) p.skip = 1;
    for (size_t i : coupled) {
      const TreeRow& r = rows[i];
      kernels::RowSampling rs = row_sampling(*r.sampling);
      rs.pen_begin = static_cast<int32_t>(pens.size() / 2);
      append_penalty_entries(*r.sampling, r.history, static_cast<int32_t>(cols), pens);
      rs.pen_end = static_cast<int32_t>(pens.size() / 2);
      params[static_cast<size_t>(r.logits_row)] = rs;
    }
  }
  // Side buffer (I32 words): per group of m rows: rows | ids [w, m] | vals [w, m] | lse [2, m]
  // (| keys [4, m]); then make_probs' params | penalties | top | conf.
  const auto m_all = static_cast<size_t>(rows.size());
  const size_t n_pen = std::max<size_t>(pens.size(), 2);
  kernels::WordViews words(be_, tree_side_,
                           m_all * (3 + 2 * static_cast<size_t>(w) + kernels::kNoiseKeyWords) + params.size() *
                               (kernels::kRowSamplingWords + 2) + n_pen);
  struct Group {
    const std::vector<size_t>* at;
    kernels::Tensor rows, ids, vals, lse, keys;
  };
  std::vector<Group> groups;
  for (const std::vector<size_t>* g : {&greedy, &coupled}) {
    if (g->empty()) continue;
    const auto m = static_cast<int64_t>(g->size());
    Group gr{g, words.take(DType::I32, m), words.take(DType::I32, w, m), words.take(DType::F32, w, m),
             words.take(DType::F32, 2, m), {}};
    std::vector<int32_t> h_rows;
    for (size_t i : *g) h_rows.push_back(rows[i].logits_row);
    be_.upload(gr.rows, h_rows.data(), h_rows.size() * 4);
    if (g == &coupled) {
      std::vector<kernels::NoiseKey> keys;
      for (size_t i : *g) keys.push_back(kernels::NoiseKey::of(rows[i].coupled->seed(), rows[i].position));
      gr.keys = words.take(DType::I32, kernels::kNoiseKeyWords, m);
      be_.upload(gr.keys, keys.data(), keys.size() * sizeof(kernels::NoiseKey));
    }
    groups.push_back(gr);
  }
  if (!coupled.empty()) {
    const size_t bytes = static_cast<size_t>(n_rows * cols) * sizeof(float);
    if (!tree_probs_ || tree_probs_->size() < bytes) {
      tree_probs_.reset();
      tree_probs_ = be_.alloc(bytes);
    }
    const kernels::Tensor probs = kernels::make_tensor(tree_probs_.get(), DType::F32, cols, n_rows);
    const kernels::Tensor tp = words.take(DType::I32, kernels::kRowSamplingWords, n_rows);
    const kernels::Tensor tpen = words.take(DType::I32, 2, static_cast<int64_t>(n_pen / 2));
    const kernels::Tensor top = words.take(DType::I32, n_rows), conf = words.take(DType::F32, n_rows);
    be_.upload(tp, params.data(), params.size() * sizeof(kernels::RowSampling));
    if (!pens.empty()) be_.upload(tpen, pens.data(), pens.size() * 4);
    dd_.make_probs(probs, top, conf, view, tp, pens.empty() ? kernels::Tensor{} : tpen);
    const Group& g = groups.back();
    dd_.top_rows(g.ids, g.vals, g.lse, probs, g.rows, g.keys, w);
  }
  if (!greedy.empty()) {
    const Group& g = groups.front();
    dd_.top_rows(g.ids, g.vals, g.lse, view, g.rows, kernels::Tensor{}, w);
  }
  struct Host {
    std::vector<int32_t> ids;
    std::vector<float> vals, lse;
  };
  std::vector<Host> host(groups.size());
  for (size_t k = 0; k < groups.size(); ++k) {
    const size_t m = groups[k].at->size();
    host[k] = {std::vector<int32_t>(m * static_cast<size_t>(w)), std::vector<float>(m * static_cast<size_t>(w)),
               std::vector<float>(2 * m)};
    be_.download(host[k].ids.data(), groups[k].ids, host[k].ids.size() * 4);
    be_.download(host[k].vals.data(), groups[k].vals, host[k].vals.size() * 4);
    be_.download(host[k].lse.data(), groups[k].lse, host[k].lse.size() * 4);
  }
  be_.synchronize();
  for (size_t k = 0; k < groups.size(); ++k) {
    const Host& h = host[k];
    for (size_t j = 0; j < groups[k].at->size(); ++j) {
      const size_t i = (*groups[k].at)[j];
      const TreeRow& r = rows[i];
      const int32_t* id = &h.ids[j * static_cast<size_t>(w)];
      const float* val = &h.vals[j * static_cast<size_t>(w)];
      // Greedy: log softmax at temperature 1, (x - max) - log Σ exp, as the host's expand;
      // coupled: log q.
      const double log_z = static_cast<double>(h.lse[2 * j]) + static_cast<double>(h.lse[2 * j + 1]);
      for (int32_t c = 0; c < r.room && id[c] >= 0; ++c)
        out[i].push_back({id[c], r.coupled ? std::log(static_cast<double>(val[c]))
                                           : static_cast<double>(val[c] - val[0]) - log_z});
    }
  }
  return out;
}

}  // namespace tandem
