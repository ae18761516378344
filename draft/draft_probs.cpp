#include "draft/draft_probs.hpp"

#include "engine/sampling/device_masks.hpp"
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
  RowMasks masks;
  for (const Lane& l : lanes) masks.add(l.logits_row, l.mask);
  masks.apply(be_, dd_, view, masks_);

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
    params[static_cast<size_t>(l.logits_row)] = row_sampling(*l.sampling, l.history, static_cast<int32_t>(cols_), pens);
    keys[static_cast<size_t>(l.logits_row)] = kernels::NoiseKey::of(l.seed, l.position);
    any_coupled = any_coupled || (l.coupled && !l.sampling->greedy());
    any_drawn = any_drawn || (!l.coupled && !l.sampling->greedy());
  }
  // Side buffer (I32 words): params | keys | penalties | top | conf | ids | coupled ids.
  const auto n_par = static_cast<size_t>(rows) * kernels::kRowSamplingWords;
  const auto n_key = static_cast<size_t>(rows) * kernels::kNoiseKeyWords;
  const size_t n_pen = std::max<size_t>(pens.size(), kernels::kPenaltyEntryWords);
  const size_t words = n_par + n_key + n_pen + 4 * static_cast<size_t>(rows);
  kernels::WordViews w(be_, side_, words);
  const kernels::Tensor tp = w.take(DType::I32, kernels::kRowSamplingWords, rows);
  const kernels::Tensor tk = w.take(DType::I32, kernels::kNoiseKeyWords, rows);
  const kernels::Tensor tpen =
      w.take(DType::I32, kernels::kPenaltyEntryWords, static_cast<int64_t>(n_pen / kernels::kPenaltyEntryWords));
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

std::vector<DraftProbs::TreeChildren> DraftProbs::tree_children(const kernels::Tensor& logits,
                                                                std::span<const TreeRow> rows, int64_t cols,
                                                                const kernels::Tensor* subset_ids, int64_t vocab) {
  std::vector<TreeChildren> out(rows.size());
  if (rows.empty()) return out;
  kernels::Tensor view = full_rows(logits, subset_ids, vocab);
  if (view.cols() < cols || cols <= 0) throw std::logic_error("DraftProbs: logits narrower than the tree's vocabulary");
  view.nb1 = view.row_stride();
  view.ne[0] = cols;
  const int64_t n_rows = view.rows();
  // Greedy rows read the logits; coupled and drawn ones q's rows (make_probs): coupled ones
  // in a scratch, drawn ones in the store (the verifier reads them).
  std::vector<size_t> by_mode[3];
  int32_t w = 1;
  for (size_t i = 0; i < rows.size(); ++i) {
    const TreeRow& r = rows[i];
    if (r.logits_row < 0 || r.logits_row >= n_rows) throw std::logic_error("DraftProbs: a tree row is outside the logits");
    if (r.room < 1 || r.room > kernels::kMaxTreeNodes) throw std::logic_error("DraftProbs: a tree node's room is out of range");
    by_mode[static_cast<int>(r.mode)].push_back(i);
    w = std::max(w, r.room);
  }
  RowMasks masks;
  for (const TreeRow& r : rows) masks.add(r.logits_row, r.mask);
  masks.apply(be_, dd_, view, masks_);
  const std::vector<size_t>&greedy = by_mode[0], &coupled = by_mode[1], &drawn = by_mode[2];
  if (!drawn.empty() && (cols != cols_ || next_ + static_cast<int64_t>(drawn.size()) > cap_rows_))
    throw std::logic_error("DraftProbs: more rows than begin_step reserved");

  // Side buffer (I32 words): per row: its row, ids [w], vals [w], lse [2], key [4], count, tag;
  // per logits row, twice (coupled, drawn): make_probs' params, top and conf; the penalties.
  std::vector<int32_t> pens;
  auto params_of = [&](const std::vector<size_t>& at) {
    std::vector<kernels::RowSampling> params(static_cast<size_t>(n_rows));
    for (auto& p : params) p.skip = 1;
    for (size_t i : at) {
      const TreeRow& r = rows[i];
      params[static_cast<size_t>(r.logits_row)] = row_sampling(*r.sampling, r.history, static_cast<int32_t>(cols), pens);
    }
    return params;
  };
  const std::vector<kernels::RowSampling> pc = coupled.empty() ? std::vector<kernels::RowSampling>{} : params_of(coupled);
  // Drawn rows: q of each run of consecutive logits rows (a lane's nodes of one pass) goes to
  // the next rows of the store, so that only they take rows there.
  struct Run {
    int32_t first, count;
    std::vector<kernels::RowSampling> params;
  };
  std::vector<Run> runs;
  std::vector<int32_t> store_row(rows.size(), -1);
  {
    std::vector<size_t> order(drawn);
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return rows[a].logits_row < rows[b].logits_row; });
    int64_t at = next_;
    for (size_t i : order) {
      const TreeRow& r = rows[i];
      if (runs.empty() || r.logits_row != runs.back().first + runs.back().count) runs.push_back({r.logits_row, 0, {}});
      runs.back().params.push_back(row_sampling(*r.sampling, r.history, static_cast<int32_t>(cols), pens));
      ++runs.back().count;
      store_row[i] = static_cast<int32_t>(at++);
    }
  }
  const size_t n_pen = std::max<size_t>(pens.size(), kernels::kPenaltyEntryWords);
  kernels::WordViews words(be_, tree_side_,
                           rows.size() * (1 + 2 * static_cast<size_t>(w) + 2 + kernels::kNoiseKeyWords + 2) +
                               2 * static_cast<size_t>(n_rows) * (kernels::kRowSamplingWords + 2) + n_pen);
  const kernels::Tensor tpen =
      words.take(DType::I32, kernels::kPenaltyEntryWords, static_cast<int64_t>(n_pen / kernels::kPenaltyEntryWords));
  if (!pens.empty()) be_.upload(tpen, pens.data(), pens.size() * 4);
  auto probs_into = [&](const kernels::Tensor& probs, const kernels::Tensor& from,
                        const std::vector<kernels::RowSampling>& params) {
    const auto m = static_cast<int64_t>(params.size());
    const kernels::Tensor tp = words.take(DType::I32, kernels::kRowSamplingWords, m);
    const kernels::Tensor top = words.take(DType::I32, m), conf = words.take(DType::F32, m);
    be_.upload(tp, params.data(), params.size() * sizeof(kernels::RowSampling));
    dd_.make_probs(probs, top, conf, from, tp, pens.empty() ? kernels::Tensor{} : tpen);
  };
  struct Group {
    const std::vector<size_t>* at = nullptr;
    kernels::Tensor rows, ids, vals, lse, keys;
    std::vector<int32_t> h_ids;
    std::vector<float> h_vals, h_lse;
  };
  auto group = [&](const std::vector<size_t>& at, bool keyed, auto&& row_of) {  // row_of(i): its row of src
    const auto m = static_cast<int64_t>(at.size());
    Group g{&at, words.take(DType::I32, m), words.take(DType::I32, w, m), words.take(DType::F32, w, m),
            words.take(DType::F32, 2, m), {}, {}, {}, {}};
    std::vector<int32_t> h_rows;
    std::vector<kernels::NoiseKey> keys;
    for (size_t i : at) {
      h_rows.push_back(row_of(i));
      keys.push_back(kernels::NoiseKey::of(rows[i].seed, rows[i].position));
    }
    be_.upload(g.rows, h_rows.data(), h_rows.size() * 4);
    if (keyed) {
      g.keys = words.take(DType::I32, kernels::kNoiseKeyWords, m);
      be_.upload(g.keys, keys.data(), keys.size() * sizeof(kernels::NoiseKey));
    }
    return g;
  };
  auto fetch = [&](Group& g, bool lse) {
    const size_t m = g.at->size();
    g.h_ids.resize(m * static_cast<size_t>(w));
    g.h_vals.resize(m * static_cast<size_t>(w));
    be_.download(g.h_ids.data(), g.ids, g.h_ids.size() * 4);
    be_.download(g.h_vals.data(), g.vals, g.h_vals.size() * 4);
    if (lse) {
      g.h_lse.resize(2 * m);
      be_.download(g.h_lse.data(), g.lse, g.h_lse.size() * 4);
    }
  };
  auto own_row = [&](size_t i) { return rows[i].logits_row; };
  std::vector<Group> done;  // greedy, coupled, drawn (those present)
  if (!greedy.empty()) {
    Group g = group(greedy, false, own_row);
    dd_.top_rows(g.ids, g.vals, g.lse, view, g.rows, kernels::Tensor{}, w);
    fetch(g, true);
    done.push_back(std::move(g));
  }
  if (!coupled.empty()) {
    const size_t bytes = static_cast<size_t>(n_rows * cols) * sizeof(float);
    if (!tree_probs_ || tree_probs_->size() < bytes) {
      tree_probs_.reset();
      tree_probs_ = be_.alloc(bytes);
    }
    const kernels::Tensor probs = kernels::make_tensor(tree_probs_.get(), DType::F32, cols, n_rows);
    probs_into(probs, view, pc);
    Group g = group(coupled, true, own_row);
    dd_.top_rows(g.ids, g.vals, g.lse, probs, g.rows, g.keys, w);
    fetch(g, false);
    done.push_back(std::move(g));
  }
  if (!drawn.empty()) {
    const kernels::Tensor store = q();
    for (const Run& run : runs) {
      probs_into(store.slice_rows(next_, run.count), view.slice_rows(run.first, run.count), run.params);
      next_ += run.count;
    }
    Group g = group(drawn, true, [&](size_t i) { return store_row[i]; });
    // How many each draws: its room, or what the cost model says of q's largest probabilities.
    std::vector<int32_t> counts, tags;
    for (size_t i : drawn) counts.push_back(rows[i].room), tags.push_back(rows[i].tag);
    if (std::any_of(drawn.begin(), drawn.end(), [&](size_t i) { return static_cast<bool>(rows[i].how_many); })) {
      dd_.top_rows(g.ids, g.vals, g.lse, store, g.rows, kernels::Tensor{}, w);
      fetch(g, false);
      be_.synchronize();
      for (size_t j = 0; j < drawn.size(); ++j) {
        const TreeRow& r = rows[drawn[j]];
        if (!r.how_many) continue;
        size_t n = 0;
        while (n < static_cast<size_t>(r.room) && g.h_ids[j * static_cast<size_t>(w) + n] >= 0) ++n;
        counts[j] = r.how_many(std::span<const float>(&g.h_vals[j * static_cast<size_t>(w)], n));
      }
    }
    const kernels::Tensor tc = words.take(DType::I32, static_cast<int64_t>(counts.size()));
    const kernels::Tensor tt = words.take(DType::I32, static_cast<int64_t>(tags.size()));
    be_.upload(tc, counts.data(), counts.size() * 4);
    be_.upload(tt, tags.data(), tags.size() * 4);
    dd_.draw_rows(g.ids, g.vals, store, g.rows, tc, g.keys, tt, w);
    fetch(g, false);
    for (size_t i : drawn) out[i].q_row = store_row[i];
    done.push_back(std::move(g));
  }
  be_.synchronize();
  for (const Group& g : done) {
    for (size_t j = 0; j < g.at->size(); ++j) {
      const size_t i = (*g.at)[j];
      const TreeRow& r = rows[i];
      const int32_t* id = &g.h_ids[j * static_cast<size_t>(w)];
      const float* val = &g.h_vals[j * static_cast<size_t>(w)];
      // Greedy: log softmax at temperature 1, (x - max) - log Σ exp, as the host's expand;
      // coupled and drawn: log q.
      const double log_z =
          g.h_lse.empty() ? 0.0 : static_cast<double>(g.h_lse[2 * j]) + static_cast<double>(g.h_lse[2 * j + 1]);
      for (int32_t c = 0; c < r.room && id[c] >= 0; ++c)
        out[i].kids.push_back({id[c], r.mode == TreeMode::Greedy ? static_cast<double>(val[c] - val[0]) - log_z
                                                                  : std::log(static_cast<double>(val[c]))});
    }
  }
  return out;
}

}  // namespace tandem
