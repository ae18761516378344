#include "verify/device_verifier.hpp"

#include <algorithm>
#include <cstring>
#include <limits>
#include <stdexcept>

#include "engine/sampling/device_masks.hpp"
#include "engine/sampling/device_rows.hpp"

namespace tandem {

std::unique_ptr<DeviceVerifier> DeviceVerifier::for_backend(kernels::Backend& be) {
  kernels::DeviceDecode* dd = kernels::device_decode(be);
  if (!dd) return nullptr;
  return std::unique_ptr<DeviceVerifier>(new DeviceVerifier(be, *dd));
}

namespace {

VerifyResult verdict_of(int32_t n_accepted, const int32_t* out, int32_t k) {
  VerifyResult v;
  v.n_accepted = n_accepted;
  v.next_token = n_accepted >= 0 && n_accepted <= k ? out[n_accepted] : -1;
  v.all_accepted = v.n_accepted == k;
  return v;
}

// A tree's verdict from the walk's accepted tokens (out): its path of nodes (the first child
// carrying each token, as the kernel chose), and whether it ended at a leaf.
VerifyResult tree_verdict(const DeviceVerifier::Sequence& s, int32_t n_accepted, const int32_t* out) {
  const auto k = static_cast<int32_t>(s.drafts.size());
  VerifyResult v;
  v.n_accepted = n_accepted;
  if (n_accepted < 0 || n_accepted > k) return v;  // next_token -1: refused by the caller
  int32_t node = -1;
  for (int32_t i = 0; i < n_accepted; ++i) {
    int32_t child = -1;
    for (int32_t c = node + 1; c < k && child < 0; ++c)
      if (s.parents[static_cast<size_t>(c)] == node && s.drafts[static_cast<size_t>(c)] == out[i]) child = c;
    if (child < 0) {
      v.n_accepted = -1;  // a token no child carries: refused by the caller
      v.path.clear();
      return v;
    }
    v.path.push_back(child);
    node = child;
  }
  v.next_token = out[n_accepted];
  v.all_accepted = std::none_of(s.parents.begin(), s.parents.end(), [&](int32_t p) { return p == node; });
  return v;
}

// A node's depth (1: a child of the root) and the tokens on its path.
int32_t path_of(const DeviceVerifier::Sequence& s, int32_t node, std::vector<int32_t>* tokens) {
  int32_t depth = 0;
  if (tokens) tokens->clear();
  for (int32_t n = node; n >= 0; n = s.parents[static_cast<size_t>(n)]) {
    ++depth;
    if (tokens) tokens->insert(tokens->begin(), s.drafts[static_cast<size_t>(n)]);
  }
  return depth;
}

}  // namespace

std::vector<VerifyResult> DeviceVerifier::verify(const kernels::Tensor& logits, std::span<const Sequence> seqs,
                                                 const kernels::Tensor* q) {
  std::vector<VerifyResult> out(seqs.size());
  const int64_t rows = logits.rows();
  // Chains by their verdict's kind; trees apart, so that a chain's bits never depend on a
  // tree in its batch.
  enum { kArgmax, kSampled, kTrees, kRejectionTrees, kGroups };
  std::vector<Sequence> group[kGroups];
  std::vector<size_t> group_at[kGroups];
  RowMasks masks;
  for (size_t i = 0; i < seqs.size(); ++i) {
    const Sequence& s = seqs[i];
    if (s.first_row < 0 || s.first_row + static_cast<int64_t>(s.drafts.size()) >= rows)
      throw std::logic_error("device verification: a sequence's rows lie outside the logits");
    if (!s.q_rows.empty() && (s.q_rows.size() != s.drafts.size() || !q))
      throw std::logic_error("device verification: q rows do not match the drafts");
    const bool tree = !s.parents.empty();
    const bool rejection = s.sampling && !s.coupled && !s.sampling->greedy();
    if (tree) {
      if (s.parents.size() != s.drafts.size() || (!rejection && !s.q_rows.empty()))
        throw std::logic_error("device verification: a token tree comes with its parents (and q rows in rejection mode only)");
      for (size_t n = 0; n < s.parents.size(); ++n)
        if (s.parents[n] < -1 || s.parents[n] >= static_cast<int32_t>(n))
          throw std::logic_error("device verification: a tree node's parent does not come before it");
    }
    if (!s.masks.empty()) {
      if (s.masks.size() != s.drafts.size() + 1)
        throw std::logic_error("device verification: a constrained sequence needs one mask per row");
      for (size_t r = 0; r < s.masks.size(); ++r) masks.add(s.first_row + static_cast<int32_t>(r), s.masks[r]);
    }
    const int g = !s.sampling ? kArgmax : !tree ? kSampled : rejection ? kRejectionTrees : kTrees;
    group[g].push_back(s);
    group_at[g].push_back(i);
  }
  const std::vector<double> confidence = confidences(logits, seqs);  // (of the raw rows, as the host reads it)
  masks.apply(be_, dd_, logits, masks_);
  for (int g = 0; g < kGroups; ++g) {
    if (group[g].empty()) continue;
    std::vector<VerifyResult> v(group[g].size());
    if (g == kArgmax) verify_argmax(logits, group[g], v);
    else if (g == kTrees) verify_transformed_trees(logits, group[g], v);
    else verify_sampled(logits, group[g], q, v);  // chains, or rejection-mode trees
    for (size_t i = 0; i < v.size(); ++i) out[group_at[g][i]] = std::move(v[i]);
  }
  for (size_t i = 0; i < seqs.size(); ++i) out[i].confidence = confidence[i];
  add_logprobs(logits, seqs, out);
  return out;
}

std::vector<double> DeviceVerifier::confidences(const kernels::Tensor& logits, std::span<const Sequence> seqs) {
  std::vector<double> out(seqs.size(), -1.0);
  // make_probs over the raw row at the request's temperature with no cuts and no penalties:
  // its top probability is 1 / Σ exp((x − max) / t) (a greedy row's, at t = 1). One row of
  // probs each, mapped to its row of the logits.
  std::vector<kernels::RowSampling> params;
  std::vector<int32_t> map;
  std::vector<size_t> asked;
  for (size_t i = 0; i < seqs.size(); ++i) {
    const Sequence& s = seqs[i];
    if (!s.confidence) continue;
    if (!s.request) throw std::logic_error("device verification: the confidence needs the request's sampling");
    kernels::RowSampling rs;
    rs.temperature = s.request->greedy() ? 0.0f : s.request->temperature;
    params.push_back(rs);
    map.push_back(s.first_row);
    asked.push_back(i);
  }
  if (asked.empty()) return out;
  const auto m = static_cast<int64_t>(asked.size());
  kernels::WordViews w(be_, conf_side_, static_cast<size_t>(m) * (kernels::kRowSamplingWords + 3));
  const kernels::Tensor tp = w.take(DType::I32, kernels::kRowSamplingWords, m);
  const kernels::Tensor top = w.take(DType::I32, m, 1), conf = w.take(DType::F32, m, 1), tmap = w.take(DType::I32, m, 1);
  be_.upload(tp, params.data(), params.size() * sizeof(kernels::RowSampling));
  be_.upload(tmap, map.data(), map.size() * 4);
  dd_.make_probs(probs_rows(rows_, m, logits.cols()), top, conf, logits, tp, kernels::Tensor{}, tmap);
  std::vector<float> h_conf(static_cast<size_t>(m));
  std::vector<int32_t> h_top(static_cast<size_t>(m));
  be_.download(h_conf.data(), conf, h_conf.size() * 4);
  be_.download(h_top.data(), top, h_top.size() * 4);
  be_.synchronize();
  for (size_t k = 0; k < asked.size(); ++k)
    out[asked[k]] = h_top[k] >= 0 ? static_cast<double>(h_conf[k]) : 0.0;  // (no token possible: 0)
  return out;
}

void DeviceVerifier::add_logprobs(const kernels::Tensor& logits, std::span<const Sequence> seqs,
                                  std::span<VerifyResult> out) {
  static_assert(kernels::kMaxLogprobTop == kMaxTopLogprobs);
  const int64_t vocab = logits.cols();
  // Each committed token: its sequence, the row that verified it (a chain's j, a tree's the
  // row of its path's node before it) and the token.
  struct Listed {
    size_t seq;
    int32_t row, token;
  };
  std::vector<Listed> listed;
  // Each listed row made again from the logits, into rows of their own: its penalised logits
  // (w, one row each) and, for a sampled request, its final distribution (p), with the
  // penalties of the tokens before it.
  std::vector<kernels::RowSampling> w_params, p_params;
  std::vector<int32_t> w_map, p_map, lp_rows;  // lp_rows: (w row, p row or -1) per listed token
  std::vector<int32_t> pens, hist, tokens;
  int32_t n_top = 0;
  for (size_t i = 0; i < seqs.size(); ++i) {
    const Sequence& s = seqs[i];
    const VerifyResult& v = out[i];
    const auto k = static_cast<int32_t>(s.drafts.size());
    if (s.logprobs < 0 || v.n_accepted < 0 || v.n_accepted > k || v.next_token < 0) continue;  // refused by the caller
    if (!s.request) throw std::logic_error("device verification: logprobs need the request's sampling");
    const bool tree = !s.parents.empty();
    if (tree && v.path.size() != static_cast<size_t>(v.n_accepted)) continue;
    n_top = std::max(n_top, s.logprobs);
    const bool greedy = s.request->greedy();
    tokens.clear();
    for (int32_t j = 0; j < v.n_accepted; ++j)
      tokens.push_back(s.drafts[static_cast<size_t>(tree ? v.path[static_cast<size_t>(j)] : j)]);
    tokens.push_back(v.next_token);
    for (int32_t j = 0; j <= v.n_accepted; ++j) {
      const int32_t row = s.first_row + (!tree ? j : j == 0 ? 0 : 1 + v.path[static_cast<size_t>(j) - 1]);
      listed.push_back({i, row, tokens[static_cast<size_t>(j)]});
      kernels::RowSampling rs = row_sampling(*s.request);
      if (s.request->adjusts_logits()) {
        hist.assign(s.history.begin(), s.history.end());
        hist.insert(hist.end(), tokens.begin(), tokens.begin() + j);
        rs = row_sampling(*s.request, hist, static_cast<int32_t>(vocab), pens);
      }
      lp_rows.push_back(static_cast<int32_t>(w_map.size()));
      lp_rows.push_back(greedy ? -1 : static_cast<int32_t>(p_map.size()));
      if (!greedy) {
        p_params.push_back(rs);
        p_map.push_back(row);
      }
      rs.penalised_only = 1;
      w_params.push_back(rs);
      w_map.push_back(row);
    }
  }
  if (listed.empty()) return;
  const auto m = static_cast<int64_t>(listed.size()), m_p = static_cast<int64_t>(p_map.size());
  const size_t pen_words = std::max<size_t>(pens.size(), kernels::kPenaltyEntryWords);
  // (At least one word each, so that no tensor is empty.)
  const int64_t p_words = std::max<int64_t>(1, m_p), top_words = std::max<int64_t>(1, static_cast<int64_t>(n_top) * m);
  kernels::WordViews w(be_, lp_side_,
                       static_cast<size_t>(m * (kernels::kRowSamplingWords + 3) + 4 * m +
                                           p_words * (kernels::kRowSamplingWords + 3) + 2 * top_words) +
                           pen_words);
  const kernels::Tensor twp = w.take(DType::I32, kernels::kRowSamplingWords, m);
  const kernels::Tensor wtop = w.take(DType::I32, m, 1), wconf = w.take(DType::F32, m, 1), twmap = w.take(DType::I32, m, 1);
  const kernels::Tensor tpp = w.take(DType::I32, kernels::kRowSamplingWords, p_words);
  const kernels::Tensor ptop = w.take(DType::I32, p_words, 1), pconf = w.take(DType::F32, p_words, 1),
                        tpmap = w.take(DType::I32, p_words, 1);
  const kernels::Tensor tpen =
      w.take(DType::I32, kernels::kPenaltyEntryWords, static_cast<int64_t>(pen_words / kernels::kPenaltyEntryWords));
  const kernels::Tensor trows = w.take(DType::I32, 2, m), tchosen = w.take(DType::I32, m, 1);
  const kernels::Tensor chosen_lp = w.take(DType::F32, m, 1);
  const kernels::Tensor ids = w.take(DType::I32, top_words, 1), lps = w.take(DType::F32, top_words, 1);
  const size_t scratch_words = static_cast<size_t>(kernels::logprob_scratch_words(m, vocab, n_top));
  if (!lp_scratch_ || lp_scratch_->size() < scratch_words * 4) {
    lp_scratch_.reset();
    lp_scratch_ = be_.alloc(scratch_words * 4 * 2);
  }
  const kernels::Tensor scratch = kernels::make_tensor(lp_scratch_.get(), DType::I32, static_cast<int64_t>(scratch_words), 1);
  std::vector<int32_t> h_chosen;
  for (const Listed& l : listed) h_chosen.push_back(l.token);
  be_.upload(twp, w_params.data(), w_params.size() * sizeof(kernels::RowSampling));
  be_.upload(twmap, w_map.data(), w_map.size() * 4);
  if (m_p > 0) {
    be_.upload(tpp, p_params.data(), p_params.size() * sizeof(kernels::RowSampling));
    be_.upload(tpmap, p_map.data(), p_map.size() * 4);
  }
  if (!pens.empty()) be_.upload(tpen, pens.data(), pens.size() * 4);
  be_.upload(trows, lp_rows.data(), lp_rows.size() * 4);
  be_.upload(tchosen, h_chosen.data(), h_chosen.size() * 4);
  const kernels::Tensor penalties = pens.empty() ? kernels::Tensor{} : tpen;
  const kernels::Tensor wl = probs_rows(rows_, m, vocab);
  dd_.make_probs(wl, wtop, wconf, logits, twp, penalties, twmap);
  // p: the verifiers are done with their rows (rejection-mode trees overwrote some), so the
  // final distributions are made again, the same bits.
  kernels::Tensor p;
  if (m_p > 0) {
    p = probs_rows(probs_, m_p, vocab);
    dd_.make_probs(p, ptop, pconf, logits, tpp, penalties, tpmap);
  }
  const kernels::Tensor ids_v = kernels::make_tensor(ids.buf, DType::I32, static_cast<int64_t>(n_top) * m, 1, ids.offset);
  const kernels::Tensor lps_v = kernels::make_tensor(lps.buf, DType::F32, static_cast<int64_t>(n_top) * m, 1, lps.offset);
  dd_.logprob_rows(chosen_lp, ids_v, lps_v, wl, p, trows, tchosen, n_top, scratch);
  std::vector<float> h_lp(static_cast<size_t>(m)), h_lps(static_cast<size_t>(n_top * m));
  std::vector<int32_t> h_ids(static_cast<size_t>(n_top * m));
  be_.download(h_lp.data(), chosen_lp, h_lp.size() * 4);
  if (n_top > 0) {
    be_.download(h_ids.data(), ids_v, h_ids.size() * 4);
    be_.download(h_lps.data(), lps_v, h_lps.size() * 4);
  }
  be_.synchronize();
  for (size_t r = 0; r < listed.size(); ++r) {
    const Sequence& s = seqs[listed[r].seq];
    TokenLogprobs t;
    t.chosen = {listed[r].token, h_lp[r]};
    for (int32_t j = 0; j < s.logprobs; ++j) {
      const size_t at = r * static_cast<size_t>(n_top) + static_cast<size_t>(j);
      if (h_ids[at] < 0) break;  // the vocabulary has no more
      t.top.push_back({h_ids[at], h_lps[at]});
    }
    out[listed[r].seq].logprobs.push_back(std::move(t));
  }
}

void DeviceVerifier::verify_argmax(const kernels::Tensor& logits, std::span<const Sequence> seqs,
                                   std::span<VerifyResult> verdicts) {
  kernels::WordViews w(be_, buf_, static_cast<size_t>(logits.rows()));
  const kernels::Tensor am = w.take(DType::I32, logits.rows(), 1);
  dd_.argmax_rows(am, logits);
  walk(am, seqs, verdicts);
}

void DeviceVerifier::walk(const kernels::Tensor& ids, std::span<const Sequence> seqs, std::span<VerifyResult> verdicts) {
  const auto n = static_cast<int64_t>(seqs.size());
  int64_t max_d = 1;  // at least one column: no tensor is empty
  bool trees = false;
  for (const Sequence& s : seqs) {
    max_d = std::max<int64_t>(max_d, static_cast<int64_t>(s.drafts.size()));
    trees = trees || !s.parents.empty();
  }
  // first_row [n] | drafts [n, max_d] | n_drafts [n] | n_accepted [n] | out [n, max_d + 1] | parents [n, max_d]
  kernels::WordViews w(be_, side_, static_cast<size_t>(n + n * max_d + n + n + n * (max_d + 1) + (trees ? n * max_d : 0)));
  const kernels::Tensor first = w.take(DType::I32, n, 1), drafts = w.take(DType::I32, max_d, n),
                        n_drafts = w.take(DType::I32, n, 1), n_acc = w.take(DType::I32, n, 1),
                        out = w.take(DType::I32, max_d + 1, n);
  const kernels::Tensor parents = trees ? w.take(DType::I32, max_d, n) : kernels::Tensor{};
  std::vector<int32_t> h_first(static_cast<size_t>(n)), h_drafts(static_cast<size_t>(n * max_d), -1),
      h_nd(static_cast<size_t>(n)), h_par(trees ? static_cast<size_t>(n * max_d) : 0, -1);
  for (int64_t i = 0; i < n; ++i) {
    const Sequence& s = seqs[static_cast<size_t>(i)];
    h_first[static_cast<size_t>(i)] = s.first_row;
    h_nd[static_cast<size_t>(i)] = static_cast<int32_t>(s.drafts.size());
    std::copy(s.drafts.begin(), s.drafts.end(), h_drafts.begin() + i * max_d);
    if (!trees) continue;
    for (size_t j = 0; j < s.drafts.size(); ++j)  // a chain: each node the previous one's child
      h_par[static_cast<size_t>(i * max_d) + j] = s.parents.empty() ? static_cast<int32_t>(j) - 1 : s.parents[j];
  }
  be_.upload(first, h_first.data(), h_first.size() * 4);
  be_.upload(drafts, h_drafts.data(), h_drafts.size() * 4);
  be_.upload(n_drafts, h_nd.data(), h_nd.size() * 4);
  if (trees) be_.upload(parents, h_par.data(), h_par.size() * 4);
  dd_.verify_greedy(ids, first, drafts, n_drafts, n_acc, out, parents);
  std::vector<int32_t> h_acc(static_cast<size_t>(n)), h_out(static_cast<size_t>(n * (max_d + 1)));
  be_.download(h_acc.data(), n_acc, h_acc.size() * 4);
  be_.download(h_out.data(), out, h_out.size() * 4);
  be_.synchronize();
  for (int64_t i = 0; i < n; ++i) {
    const Sequence& s = seqs[static_cast<size_t>(i)];
    const int32_t* o = &h_out[static_cast<size_t>(i * (max_d + 1))];
    verdicts[static_cast<size_t>(i)] = s.parents.empty() ? verdict_of(h_acc[static_cast<size_t>(i)], o, h_nd[static_cast<size_t>(i)])
                                                         : tree_verdict(s, h_acc[static_cast<size_t>(i)], o);
  }
}

kernels::Tensor DeviceVerifier::probs_rows(std::unique_ptr<kernels::Buffer>& buf, int64_t rows, int64_t vocab) {
  const size_t bytes = static_cast<size_t>(rows * vocab) * sizeof(float);
  if (!buf || buf->size() < bytes) {
    buf.reset();
    buf = be_.alloc(bytes);
  }
  return kernels::make_tensor(buf.get(), DType::F32, vocab, rows);
}

void DeviceVerifier::verify_transformed_trees(const kernels::Tensor& logits, std::span<const Sequence> seqs,
                                              std::span<VerifyResult> verdicts) {
  const int64_t rows = logits.rows(), vocab = logits.cols();
  // Each row's transform with the penalties of its node's path (rows of other sequences:
  // skipped), and its noise key at the node's depth; the fault injection as verify_sampled.
  const InjectedBias bias = injected_verifier_bias();
  std::vector<kernels::RowSampling> params(static_cast<size_t>(rows));
  for (auto& r : params) r.skip = 1;
  std::vector<kernels::NoiseKey> keys(static_cast<size_t>(rows));
  std::vector<int32_t> pens, hist, path;
  for (const Sequence& s : seqs) {
    const auto k = static_cast<int32_t>(s.drafts.size());
    for (int32_t r = 0; r <= k; ++r) {
      const int32_t depth = path_of(s, r - 1, &path);
      kernels::RowSampling rs = row_sampling(*s.sampling);
      if (s.sampling->adjusts_logits()) {
        hist.assign(s.history.begin(), s.history.end());
        hist.insert(hist.end(), path.begin(), path.end());
        rs = row_sampling(*s.sampling, hist, static_cast<int32_t>(vocab), pens);
      }
      if (bias.position >= 0 && bias.position == s.position + depth) rs.bias_mass = bias.mass;
      params[static_cast<size_t>(s.first_row + r)] = rs;
      keys[static_cast<size_t>(s.first_row + r)] = kernels::NoiseKey::of(s.sampling->seed.value_or(0), s.position + depth);
    }
  }
  const size_t pen_words = std::max<size_t>(pens.size(), kernels::kPenaltyEntryWords);
  kernels::WordViews w(be_, buf_,
                       static_cast<size_t>(rows) * (kernels::kRowSamplingWords + kernels::kNoiseKeyWords + 3) + pen_words);
  const kernels::Tensor tp = w.take(DType::I32, kernels::kRowSamplingWords, rows);
  const kernels::Tensor top = w.take(DType::I32, rows, 1), conf = w.take(DType::F32, rows, 1),
                        ids = w.take(DType::I32, rows, 1);
  const kernels::Tensor tkeys = w.take(DType::I32, kernels::kNoiseKeyWords, rows);
  const kernels::Tensor tpen =
      w.take(DType::I32, kernels::kPenaltyEntryWords, static_cast<int64_t>(pen_words / kernels::kPenaltyEntryWords));
  const kernels::Tensor probs = probs_rows(probs_, rows, vocab);
  be_.upload(tp, params.data(), params.size() * sizeof(kernels::RowSampling));
  if (!pens.empty()) be_.upload(tpen, pens.data(), pens.size() * 4);
  be_.upload(tkeys, keys.data(), keys.size() * sizeof(kernels::NoiseKey));
  dd_.make_probs(probs, top, conf, logits, tp, pens.empty() ? kernels::Tensor{} : tpen);
  // (A greedy row's distribution is a point mass: its Gumbel-max token is its argmax.)
  dd_.sample_probs(ids, probs, top, tkeys, kernels::kTagSample, /*coupled=*/true);
  walk(ids, seqs, verdicts);
}

void DeviceVerifier::verify_sampled(const kernels::Tensor& logits, std::span<const Sequence> seqs,
                                    const kernels::Tensor* q, std::span<VerifyResult> verdicts) {
  const int64_t rows = logits.rows(), vocab = logits.cols();
  const auto n = static_cast<int64_t>(seqs.size());
  int64_t max_d = 1;
  for (const Sequence& s : seqs) max_d = std::max<int64_t>(max_d, static_cast<int64_t>(s.drafts.size()));
  // All chains, or all trees (rejection mode: recursive rejection over each node's children).
  const bool trees = !seqs.front().parents.empty();
  // Each row's transform (rows of other sequences: skipped), with the
  // penalties of its history: the committed tokens and the drafts before it (a tree node's:
  // its path). The verifier's fault injection (tests) moves mass at its position, as
  // verify/verifier.cpp does.
  const InjectedBias bias = injected_verifier_bias();
  std::vector<int32_t> path, h_par(trees ? static_cast<size_t>(n * max_d) : 0, -1);
  std::vector<kernels::RowSampling> params(static_cast<size_t>(rows));
  for (auto& r : params) r.skip = 1;
  std::vector<int32_t> pens, hist;
  std::vector<kernels::SeqVerify> sv(static_cast<size_t>(n));
  std::vector<int32_t> h_drafts(static_cast<size_t>(n * max_d), -1), h_qrows(static_cast<size_t>(n * max_d), -1);
  for (int64_t i = 0; i < n; ++i) {
    const Sequence& s = seqs[static_cast<size_t>(i)];
    const auto k = static_cast<int32_t>(s.drafts.size());
    for (int32_t r = 0; r <= k; ++r) {
      kernels::RowSampling rs = row_sampling(*s.sampling);
      const int32_t depth = trees ? path_of(s, r - 1, &path) : r;
      if (s.sampling->adjusts_logits()) {
        hist.assign(s.history.begin(), s.history.end());
        if (trees) hist.insert(hist.end(), path.begin(), path.end());
        else hist.insert(hist.end(), s.drafts.begin(), s.drafts.begin() + r);
        rs = row_sampling(*s.sampling, hist, static_cast<int32_t>(vocab), pens);
      }
      if (bias.position >= 0 && bias.position == s.position + depth) rs.bias_mass = bias.mass;
      params[static_cast<size_t>(s.first_row + r)] = rs;
    }
    if (trees) {
      if (s.parents.empty()) throw std::logic_error("device verification: a chain among trees");
      std::copy(s.parents.begin(), s.parents.end(), h_par.begin() + i * max_d);
    }
    kernels::SeqVerify& v = sv[static_cast<size_t>(i)];
    v.first_row = s.first_row;
    v.n_drafts = k;
    v.with_q = s.q_rows.empty() ? 0 : 1;
    v.coupled = s.coupled ? 1 : 0;
    v.key = kernels::NoiseKey::of(s.sampling->seed.value_or(0), s.position);
    std::copy(s.drafts.begin(), s.drafts.end(), h_drafts.begin() + i * max_d);
    std::copy(s.q_rows.begin(), s.q_rows.end(), h_qrows.begin() + i * max_d);
  }
  const size_t pen_words = std::max<size_t>(pens.size(), kernels::kPenaltyEntryWords);
  kernels::WordViews w(be_, side_,
          static_cast<size_t>(rows) * (kernels::kRowSamplingWords + 2) + pen_words +
              static_cast<size_t>(n) * (kernels::kSeqVerifyWords + 3 * max_d + 1 + max_d + 1));
  const kernels::Tensor tp = w.take(DType::I32, kernels::kRowSamplingWords, rows);
  const kernels::Tensor top = w.take(DType::I32, rows, 1), conf = w.take(DType::F32, rows, 1);
  const kernels::Tensor tpen =
      w.take(DType::I32, kernels::kPenaltyEntryWords, static_cast<int64_t>(pen_words / kernels::kPenaltyEntryWords));
  const kernels::Tensor tsv = w.take(DType::I32, kernels::kSeqVerifyWords, n);
  const kernels::Tensor tdr = w.take(DType::I32, max_d, n), tqr = w.take(DType::I32, max_d, n);
  const kernels::Tensor n_acc = w.take(DType::I32, n, 1), out = w.take(DType::I32, max_d + 1, n);
  const kernels::Tensor tpar = trees ? w.take(DType::I32, max_d, n) : kernels::Tensor{};
  const kernels::Tensor probs = probs_rows(probs_, rows, vocab);
  be_.upload(tp, params.data(), params.size() * sizeof(kernels::RowSampling));
  if (!pens.empty()) be_.upload(tpen, pens.data(), pens.size() * 4);
  be_.upload(tsv, sv.data(), sv.size() * sizeof(kernels::SeqVerify));
  be_.upload(tdr, h_drafts.data(), h_drafts.size() * 4);
  be_.upload(tqr, h_qrows.data(), h_qrows.size() * 4);
  if (trees) be_.upload(tpar, h_par.data(), h_par.size() * 4);
  dd_.make_probs(probs, top, conf, logits, tp, pens.empty() ? kernels::Tensor{} : tpen);
  dd_.verify_sampled(probs, q ? *q : kernels::Tensor{}, tsv, tdr, tqr, n_acc, out, tpar);
  std::vector<int32_t> h_acc(static_cast<size_t>(n)), h_out(static_cast<size_t>(n * (max_d + 1)));
  be_.download(h_acc.data(), n_acc, h_acc.size() * 4);
  be_.download(h_out.data(), out, h_out.size() * 4);
  be_.synchronize();
  for (int64_t i = 0; i < n; ++i) {
    const Sequence& s = seqs[static_cast<size_t>(i)];
    const int32_t* o = &h_out[static_cast<size_t>(i * (max_d + 1))];
    verdicts[static_cast<size_t>(i)] = trees ? tree_verdict(s, h_acc[static_cast<size_t>(i)], o)
                                             : verdict_of(h_acc[static_cast<size_t>(i)], o, static_cast<int32_t>(s.drafts.size()));
  }
}

}  // namespace tandem
