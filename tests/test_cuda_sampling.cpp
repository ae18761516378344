// Sampled decoding on the CUDA backend (kernels/device_decode.hpp: make_probs, sample_probs,
// verify_sampled) under the SIMT emulator, against the engine's host sampler
// (engine/sampling/sampler.hpp) and verifier (verify/verifier.hpp):
//   * make_probs keeps exactly the tokens make_distribution keeps, with its probabilities
//     (up to the normaliser's summation order), for every transform and their mixes, with
//     ties at the top-k and top-p thresholds, NaN, +-inf and penalties;
//   * draws follow the rows (chi-square), coupled draws are the CPU's gumbel_argmax;
//   * the batch verifier's output follows the target's distribution at each position
//     (chi-square), for sampled and point-mass drafts; coupled verification accepts exactly
//     the drafts equal to the target's coupled token;
//   * top_rows gives the children the host's TreeBuilder chooses (token trees);
//   * logprob_rows gives the host's token_logprobs (tokens exactly, values to the
//     normaliser's summation order).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <optional>
#include <random>

#include "tests/support/cuda_under_test.hpp"
#include "draft/draft_probs.hpp"
#include "engine/grammar/token_grammar.hpp"
#include "engine/sampling/device_masks.hpp"
#include "engine/sampling/gumbel.hpp"
#include "engine/sampling/logprobs.hpp"
#include "engine/sampling/sampler.hpp"
#include "kernels/backend_factory.hpp"
#include "kernels/device_decode.hpp"
#include "kernels/exp_nonpos.hpp"
#include "support/stats.hpp"

namespace tandem::kernels {
namespace {

using TokenMaskWords = std::vector<uint64_t>;

std::unique_ptr<Backend> cuda_under_test() { return test::cuda_under_test(size_t{64} << 20); }

struct Dev {
  std::unique_ptr<Backend> be = cuda_under_test();
  DeviceDecode& dd = *device_decode(*be);
  std::vector<std::unique_ptr<Buffer>> bufs;
  template <typename T>
  Tensor put(DType t, const std::vector<T>& v, int64_t cols) {
    static_assert(sizeof(T) == 4);
    bufs.push_back(be->alloc(std::max<size_t>(v.size(), 1) * 4));
    Tensor x = make_tensor(bufs.back().get(), t, cols, static_cast<int64_t>(v.size()) / cols);
    if (!v.empty()) be->upload(x, v.data(), v.size() * 4);
    return x;
  }
  Tensor zeros(DType t, int64_t cols, int64_t rows) { return put(t, std::vector<int32_t>(size_t(cols * rows), 0), cols); }
  template <typename T>
  std::vector<T> get(const Tensor& t) {
    std::vector<T> v(static_cast<size_t>(t.numel()));
    be->download(v.data(), t, v.size() * 4);
    return v;
  }
  template <typename S>
  Tensor put_structs(const std::vector<S>& v) {
    std::vector<int32_t> words(v.size() * sizeof(S) / 4);
    std::memcpy(words.data(), v.data(), words.size() * 4);
    return put(DType::I32, words, static_cast<int64_t>(sizeof(S) / 4));
  }
};

// The engine's own translations (draft/draft_probs.hpp), checked here against
// make_distribution's reading of the same parameters and history.
RowSampling row_of(const SamplingParams& p) { return row_sampling(p); }
std::vector<int32_t> penalty_entries(const SamplingParams& p, const std::vector<int32_t>& history, int32_t vocab) {
  std::vector<int32_t> out;
  append_penalty_entries(p, history, vocab, out);
  return out;
}

// The statistical tests' trials: TANDEM_CUDA_SAMPLING_TRIALS below their own count (the race
// checker's run, scripts/test.sh: blocks on two OS threads under TSan, where the emulator is
// slow) runs that many and checks only what needs no statistics (tokens possible, drawn once,
// counts in range); the χ² needs the full count.
int trials(int full) {
  const char* e = std::getenv("TANDEM_CUDA_SAMPLING_TRIALS");
  return e ? std::clamp(std::atoi(e), 1, full) : full;
}
bool full_statistics(int n, int full) { return n >= full; }

SamplingParams params(float t, int32_t k, float top_p, float min_p) {
  SamplingParams p;
  p.temperature = t;
  p.top_k = k;
  p.top_p = top_p;
  p.min_p = min_p;
  return p;
}

TEST(CudaSampling, MakeProbsKeepsTheEnginesTokensWithItsProbabilities) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<SamplingParams> ps = {
      params(1.0f, 0, 1.0f, 0.0f),      params(0.7f, 40, 1.0f, 0.0f),   params(1.0f, 0, 0.9f, 0.0f),
      params(1.0f, 0, 1.0f, 0.05f),     params(0.8f, 40, 0.95f, 0.05f), params(1.3f, 7, 0.5f, 0.0f),
      params(1.0f, 0, 0.0f, 0.0f),      params(1.0f, 0, 1.0f, 1.5f),    params(0.5f, 5000, 0.99f, 0.01f),
      params(0.0f, 40, 0.9f, 0.05f),    params(2.0f, 1, 1.0f, 0.0f),    params(1e-6f, 0, 0.9f, 0.0f)};
  SamplingParams pen = params(1.0f, 20, 0.9f, 0.0f);
  pen.repetition_penalty = 1.3f, pen.presence_penalty = 0.4f, pen.frequency_penalty = 0.2f, pen.repetition_window = 8;
  ps.push_back(pen);
  SamplingParams greedy_pen = pen;
  greedy_pen.temperature = 0.0f;
  ps.push_back(greedy_pen);
  // A logit bias (on history tokens and others, one past the vocabulary), alone and with the
  // penalties; greedy with the most likely tokens of some rows banned.
  SamplingParams biased = params(0.9f, 30, 0.95f, 0.02f);
  biased.logit_bias = {{0, 3.5f}, {5, -100.0f}, {17, 1.25f}, {40, -2.0f}, {999, 6.0f}, {1536, 2.0f}, {4000, 9.0f}};
  ps.push_back(biased);
  SamplingParams biased_pen = pen;
  biased_pen.logit_bias = biased.logit_bias;
  ps.push_back(biased_pen);
  SamplingParams greedy_biased = params(0.0f, 0, 1.0f, 0.0f);
  for (int32_t t = 0; t < 1000; t += 3) greedy_biased.logit_bias[t] = t % 2 ? -100.0f : 0.5f;
  ps.push_back(greedy_biased);

  for (int vocab : {1000, 1537}) {
    std::mt19937 g(static_cast<unsigned>(vocab));
    std::vector<std::vector<float>> rows;
    for (int r = 0; r < 5; ++r) {
      std::vector<float> v(static_cast<size_t>(vocab));
      for (auto& x : v) x = std::normal_distribution<float>(0, 2.5f)(g);
      if (r == 1)
        for (auto& x : v) x = std::round(x);  // many ties at every threshold
      if (r == 2) v[3] = nan, v[700] = nan, v[9] = -inf;
      if (r == 3) v[11] = inf, v[500] = inf;  // the softmax limit: uniform over +inf
      rows.push_back(v);
    }
    std::vector<int32_t> history;
    for (int i = 0; i < 30; ++i) history.push_back(std::uniform_int_distribution<int32_t>(0, vocab + 5)(g));
    for (size_t pi = 0; pi < ps.size(); ++pi) {
      const SamplingParams& p = ps[pi];
      std::vector<float> flat;
      std::vector<RowSampling> rs;
      std::vector<int32_t> pens;
      for (const auto& r : rows) {
        flat.insert(flat.end(), r.begin(), r.end());
        RowSampling row = row_of(p);
        if (p.adjusts_logits()) {
          const auto e = penalty_entries(p, history, vocab);
          row.pen_begin = static_cast<int32_t>(pens.size() / kPenaltyEntryWords);
          pens.insert(pens.end(), e.begin(), e.end());
          row.pen_end = static_cast<int32_t>(pens.size() / kPenaltyEntryWords);
        }
        rs.push_back(row);
      }
      Dev d;
      const auto n = static_cast<int64_t>(rows.size());
      Tensor logits = d.put(DType::F32, flat, vocab);
      Tensor probs = d.zeros(DType::F32, vocab, n), top = d.zeros(DType::I32, 1, n), conf = d.zeros(DType::F32, 1, n);
      Tensor prm = d.put_structs(rs);
      Tensor pent = pens.empty() ? Tensor{} : d.put(DType::I32, pens, kPenaltyEntryWords);
      d.dd.make_probs(probs, top, conf, logits, prm, pent);
      const auto got = d.get<float>(probs);
      const auto tops = d.get<int32_t>(top);
      const auto confs = d.get<float>(conf);
      for (size_t r = 0; r < rows.size(); ++r) {
        SCOPED_TRACE("vocab " + std::to_string(vocab) + " params #" + std::to_string(pi) + " row " + std::to_string(r));
        const Distribution want = make_distribution(rows[r], p, p.adjusts_logits() ? history : std::vector<int32_t>{});
        std::map<int32_t, float> w;
        for (size_t j = 0; j < want.size(); ++j) w[want.ids[j]] = want.probs[j];
        int kept = 0;
        for (int v = 0; v < vocab; ++v) {
          const float gp = got[r * static_cast<size_t>(vocab) + static_cast<size_t>(v)];
          auto it = w.find(v);
          if (it == w.end()) {
            EXPECT_EQ(gp, 0.0f) << "token " << v << " kept on the device only";
            continue;
          }
          ++kept;
          EXPECT_NEAR(gp, it->second, 2e-6 * it->second + 1e-30) << "token " << v;
        }
        EXPECT_EQ(kept, static_cast<int>(want.size()));
        EXPECT_EQ(tops[r], want.ids[0]);
        if (!p.greedy()) {
          EXPECT_NEAR(confs[r], want.probs[0], 2e-6 * want.probs[0]);
        }
      }
    }
  }
}

TEST(CudaSampling, RowsWithNothingPossibleHaveNoTopAndSkippedRowsAreLeftAlone) {
  const int vocab = 300;
  std::vector<float> flat(static_cast<size_t>(vocab) * 2, -std::numeric_limits<float>::infinity());
  flat[5] = std::numeric_limits<float>::quiet_NaN();
  flat[vocab + 2] = 1.0f;
  Dev d;
  Tensor logits = d.put(DType::F32, flat, vocab);
  Tensor probs = d.put(DType::F32, std::vector<float>(flat.size(), 7.0f), vocab);
  Tensor top = d.zeros(DType::I32, 1, 2), conf = d.zeros(DType::F32, 1, 2);
  std::vector<RowSampling> rs(2, row_of(params(1.0f, 0, 1.0f, 0.0f)));
  rs[1].skip = 1;
  d.dd.make_probs(probs, top, conf, logits, d.put_structs(rs), Tensor{});
  const auto got = d.get<float>(probs);
  EXPECT_EQ(d.get<int32_t>(top)[0], -1);
  EXPECT_EQ(d.get<int32_t>(top)[1], -2);
  // Neither is drawn from.
  Tensor ids = d.zeros(DType::I32, 1, 2);
  d.dd.sample_probs(ids, probs, top, d.put_structs(std::vector<NoiseKey>(2, NoiseKey::of(1, 2))), kTagSample, false);
  EXPECT_EQ(d.get<int32_t>(ids), (std::vector<int32_t>{-1, -1}));
  for (int v = 0; v < vocab; ++v) EXPECT_EQ(got[static_cast<size_t>(v)], 0.0f);
  for (int v = 0; v < vocab; ++v) EXPECT_EQ(got[static_cast<size_t>(vocab + v)], 7.0f);  // untouched
}

// One row's probabilities from the device, and the same as a host Distribution (sorted by
// probability desc, id asc, as make_distribution lists them).
struct Row {
  std::vector<float> dense;
  Distribution dist;
};
Row device_row(Dev& d, const std::vector<float>& logits, const SamplingParams& p) {
  const auto vocab = static_cast<int64_t>(logits.size());
  Tensor lt = d.put(DType::F32, logits, vocab);
  Tensor probs = d.zeros(DType::F32, vocab, 1), top = d.zeros(DType::I32, 1, 1), conf = d.zeros(DType::F32, 1, 1);
  d.dd.make_probs(probs, top, conf, lt, d.put_structs(std::vector<RowSampling>{row_of(p)}), Tensor{});
  Row r;
  r.dense = d.get<float>(probs);
  std::vector<std::pair<float, int32_t>> e;
  for (int32_t v = 0; v < vocab; ++v)
    if (r.dense[static_cast<size_t>(v)] > 0.0f) e.push_back({r.dense[static_cast<size_t>(v)], v});
  std::sort(e.begin(), e.end(), [](auto a, auto b) { return a.first > b.first || (a.first == b.first && a.second < b.second); });
  for (auto [pv, id] : e) r.dist.ids.push_back(id), r.dist.probs.push_back(pv);
  return r;
}

std::vector<float> random_logits(int vocab, unsigned seed, float sd) {
  std::mt19937 g(seed);
  std::vector<float> v(static_cast<size_t>(vocab));
  for (auto& x : v) x = std::normal_distribution<float>(0, sd)(g);
  return v;
}

TEST(CudaSampling, DrawsFollowTheRowAndCoupledDrawsAreTheCpusGumbelArgmax) {
  const int vocab = 200, n = trials(6000);
  Dev d;
  const Row row = device_row(d, random_logits(vocab, 5, 1.5f), params(1.0f, 12, 0.97f, 0.0f));
  std::vector<float> flat;
  std::vector<NoiseKey> keys;
  for (int i = 0; i < n; ++i) {
    flat.insert(flat.end(), row.dense.begin(), row.dense.end());
    keys.push_back(NoiseKey::of(0x1234567890abcdefULL, 1000 + i));
  }
  Tensor probs = d.put(DType::F32, flat, vocab);
  Tensor kt = d.put_structs(keys);
  Tensor ids = d.zeros(DType::I32, 1, n);
  Tensor tops = d.zeros(DType::I32, 1, n);  // every row has a token
  d.dd.sample_probs(ids, probs, tops, kt, kTagSample, false);
  const auto drawn = d.get<int32_t>(ids);
  std::vector<int64_t> obs(row.dist.size(), 0);
  for (int32_t t : drawn) {
    auto it = std::find(row.dist.ids.begin(), row.dist.ids.end(), t);
    ASSERT_NE(it, row.dist.ids.end()) << "drew a token with probability 0: " << t;
    ++obs[static_cast<size_t>(it - row.dist.ids.begin())];
  }
  std::vector<double> pr(row.dist.probs.begin(), row.dist.probs.end());
  if (full_statistics(n, 6000)) {
    const auto fit = test::chi2_goodness_of_fit(obs, pr, n);
    EXPECT_GT(fit.p_value, 1e-4) << "chi2 " << fit.statistic << " df " << fit.df;
    // A draw from another row (the same tokens, the probabilities of the next one) fails it.
    std::vector<double> shifted(pr.size());
    for (size_t i = 0; i < pr.size(); ++i) shifted[i] = pr[(i + 1) % pr.size()];
    EXPECT_LT(test::chi2_goodness_of_fit(obs, shifted, n).p_value, 1e-6);
  }

  d.dd.sample_probs(ids, probs, tops, kt, kTagSample, true);
  const auto coupled = d.get<int32_t>(ids);
  const PositionNoise noise(0x1234567890abcdefULL);
  for (int i = 0; i < n; ++i) ASSERT_EQ(coupled[static_cast<size_t>(i)], gumbel_argmax(row.dist, noise, 1000 + i)) << i;
}

// A synthetic step: the target's rows p_0..p_k do not depend on the context, so each emitted
// token must be distributed as its row, whatever was drafted.
struct StepCase {
  std::vector<Row> p, q;  // k + 1 target rows, k draft rows
};

TEST(CudaSampling, RejectionVerificationFollowsTheTargetAtEveryPosition) {
  const int vocab = 48, k = 2, n = trials(6000);
  Dev d;
  StepCase c;
  // q near p (the target's logits plus noise), so that drafts are often accepted and every
  // position is reached; top-k 8 on both, so they keep different tokens now and then.
  std::mt19937 g(4);
  for (int i = 0; i <= k; ++i) {
    const auto lp = random_logits(vocab, 10 + i, 1.2f);
    c.p.push_back(device_row(d, lp, params(1.0f, 8, 1.0f, 0.0f)));
    if (i == k) break;
    auto lq = lp;
    for (auto& x : lq) x += std::normal_distribution<float>(0, 0.6f)(g);
    c.q.push_back(device_row(d, lq, params(1.0f, 8, 1.0f, 0.0f)));
  }
  for (bool point_mass : {false, true}) {
    SCOPED_TRACE(point_mass ? "point-mass drafts" : "drafts drawn from q");
    std::vector<float> pflat, qflat;
    std::vector<SeqVerify> seqs;
    std::vector<int32_t> drafts, q_rows;
    std::vector<NoiseKey> qkeys;
    for (int s = 0; s < n; ++s) {
      for (const Row& r : c.p) pflat.insert(pflat.end(), r.dense.begin(), r.dense.end());
      for (const Row& r : c.q) qflat.insert(qflat.end(), r.dense.begin(), r.dense.end());
      SeqVerify sv;
      sv.first_row = s * (k + 1);
      sv.n_drafts = k;
      sv.with_q = point_mass ? 0 : 1;
      sv.key = NoiseKey::of(77, 10 * s);
      seqs.push_back(sv);
      for (int i = 0; i < k; ++i) qkeys.push_back(NoiseKey::of(77, 10 * s + i)), q_rows.push_back(s * k + i);
    }
    Tensor pt = d.put(DType::F32, pflat, vocab), qt = d.put(DType::F32, qflat, vocab);
    if (point_mass) {
      // A fixed guess per position (the target's most likely token): accepted with its
      // probability, else the token comes from p with the guess removed.
      for (int s = 0; s < n; ++s)
        for (int i = 0; i < k; ++i) drafts.push_back(c.p[static_cast<size_t>(i)].dist.ids[0]);
    } else {
      Tensor ids = d.zeros(DType::I32, 1, static_cast<int64_t>(n) * k);
      d.dd.sample_probs(ids, qt, d.zeros(DType::I32, 1, static_cast<int64_t>(n) * k), d.put_structs(qkeys), kTagDraft,
                        false);
      drafts = d.get<int32_t>(ids);
    }
    Tensor acc = d.zeros(DType::I32, 1, n), out = d.zeros(DType::I32, k + 1, n);
    d.dd.verify_sampled(pt, point_mass ? Tensor{} : qt, d.put_structs(seqs), d.put(DType::I32, drafts, k),
                        d.put(DType::I32, q_rows, k), acc, out);
    const auto na = d.get<int32_t>(acc);
    const auto toks = d.get<int32_t>(out);
    // Position i's token exists when at least i drafts were accepted.
    for (int i = 0; i <= k; ++i) {
      const Distribution& want = c.p[static_cast<size_t>(i)].dist;
      std::vector<int64_t> obs(want.size(), 0);
      int64_t total = 0;
      for (int s = 0; s < n; ++s) {
        const int32_t a = na[static_cast<size_t>(s)];
        ASSERT_GE(a, 0);
        ASSERT_LE(a, k);
        if (a < i) continue;
        const int32_t t = toks[static_cast<size_t>(s * (k + 1) + i)];
        auto it = std::find(want.ids.begin(), want.ids.end(), t);
        ASSERT_NE(it, want.ids.end()) << "position " << i << " emitted " << t << ", which p gives no mass";
        ++obs[static_cast<size_t>(it - want.ids.begin())];
        ++total;
      }
      if (!full_statistics(n, 6000)) continue;
      ASSERT_GT(total, 200) << "position " << i << " was reached too rarely to test";
      std::vector<double> pr(want.probs.begin(), want.probs.end());
      const auto fit = test::chi2_goodness_of_fit(obs, pr, total);
      EXPECT_GT(fit.p_value, 1e-4) << "position " << i << ": chi2 " << fit.statistic << " df " << fit.df;
    }
    int64_t accepted = 0;
    for (int32_t a : na) accepted += a;
    if (full_statistics(n, 6000)) {
      EXPECT_GT(accepted, n / 4) << "the drafts were almost never accepted: the test says little";
    }
  }
}

// Token trees in rejection mode (verify_sampled with parents): a root with three children
// drawn from q0 without replacement (draw_rows), the first of them with two drawn from qa;
// every row's p its own (the root PR, node 0 PA, nodes 1 and 2 PB, nodes 3 and 4 PC). The
// first token follows PR whatever was drafted; after an accepted child the next follows that
// child's row; after nodes 0 and 3 or 4, PC. Also with point-mass children (fixed guesses).
TEST(CudaSampling, RejectionTreesFollowTheTargetAtEveryDepth) {
  const int vocab = 24, n = trials(6000), nodes = 5;
  Dev d;
  std::mt19937 g(8);
  auto near = [&](const std::vector<float>& lp) {
    auto l = lp;
    for (auto& x : l) x += std::normal_distribution<float>(0, 0.5f)(g);
    return l;
  };
  const auto lr = random_logits(vocab, 31, 1.2f), la = random_logits(vocab, 32, 1.2f);
  const Row PR = device_row(d, lr, params(1.0f, 8, 1.0f, 0.0f)), PA = device_row(d, la, params(1.0f, 8, 1.0f, 0.0f));
  const Row PB = device_row(d, random_logits(vocab, 33, 1.2f), params(1.0f, 8, 1.0f, 0.0f));
  const Row PC = device_row(d, random_logits(vocab, 34, 1.2f), params(1.0f, 8, 1.0f, 0.0f));
  const Row q0 = device_row(d, near(lr), params(1.0f, 8, 1.0f, 0.0f)), qa = device_row(d, near(la), params(1.0f, 8, 1.0f, 0.0f));
  const std::vector<const Row*> row_of_node = {&PR, &PA, &PB, &PB, &PC, &PC};  // row r: node r - 1
  const std::vector<int32_t> parents = {-1, -1, -1, 0, 0};
  for (bool point_mass : {false, true}) {
    SCOPED_TRACE(point_mass ? "point-mass children" : "children drawn from q");
    std::vector<float> pflat, qflat(q0.dense);
    qflat.insert(qflat.end(), qa.dense.begin(), qa.dense.end());
    std::vector<SeqVerify> seqs;
    std::vector<int32_t> drafts, q_rows, par, lrows, counts, tags;
    std::vector<NoiseKey> keys;
    for (int s = 0; s < n; ++s) {
      for (const Row* r : row_of_node) pflat.insert(pflat.end(), r->dense.begin(), r->dense.end());
      SeqVerify sv;
      sv.first_row = s * (nodes + 1);
      sv.n_drafts = nodes;
      sv.with_q = point_mass ? 0 : 1;
      sv.key = NoiseKey::of(91, 20 * s);
      seqs.push_back(sv);
      par.insert(par.end(), parents.begin(), parents.end());
      for (int32_t r : {0, 0, 0, 1, 1}) q_rows.push_back(r);
      // The draws: the root's three children at position 20 s, node 0's two at 20 s + 1.
      lrows.insert(lrows.end(), {0, 1});
      counts.insert(counts.end(), {3, 2});
      tags.insert(tags.end(), {tree_draw_tag(1, 0), tree_draw_tag(2, 3)});
      keys.push_back(NoiseKey::of(91, 20 * s));
      keys.push_back(NoiseKey::of(91, 20 * s + 1));
    }
    const Tensor qt = d.put(DType::F32, qflat, vocab);
    if (point_mass) {
      for (int s = 0; s < n; ++s)
        for (int32_t t : {PR.dist.ids[0], PR.dist.ids[1], PR.dist.ids[2], PA.dist.ids[0], PA.dist.ids[1]}) drafts.push_back(t);
    } else {
      const int64_t m = static_cast<int64_t>(lrows.size());
      Tensor ids = d.zeros(DType::I32, 3, m), vals = d.zeros(DType::F32, 3, m);
      d.dd.draw_rows(ids, vals, qt, d.put(DType::I32, lrows, 1), d.put(DType::I32, counts, 1), d.put_structs(keys),
                     d.put(DType::I32, tags, 1), 3);
      const auto got = d.get<int32_t>(ids);
      for (int s = 0; s < n; ++s) {
        const int32_t* r0 = &got[static_cast<size_t>(2 * s) * 3];
        const int32_t* ra = r0 + 3;
        ASSERT_TRUE(r0[0] >= 0 && r0[1] >= 0 && r0[2] >= 0 && ra[0] >= 0 && ra[1] >= 0 && ra[2] == -1);
        ASSERT_TRUE(r0[0] != r0[1] && r0[0] != r0[2] && r0[1] != r0[2] && ra[0] != ra[1]) << "drawn twice";
        for (int32_t t : {r0[0], r0[1], r0[2], ra[0], ra[1]}) drafts.push_back(t);
      }
    }
    Tensor acc = d.zeros(DType::I32, 1, n), out = d.zeros(DType::I32, nodes + 1, n);
    d.dd.verify_sampled(d.put(DType::F32, pflat, vocab), point_mass ? Tensor{} : qt, d.put_structs(seqs),
                        d.put(DType::I32, drafts, nodes), d.put(DType::I32, q_rows, nodes), acc, out,
                        d.put(DType::I32, par, nodes));
    const auto na = d.get<int32_t>(acc);
    const auto toks = d.get<int32_t>(out);
    // Each emitted token by what it should follow: depth 0 PR; depth 1 the accepted child's
    // row; depth 2 PC.
    std::map<const Row*, std::vector<int64_t>> obs;
    std::map<const Row*, int64_t> totals;
    auto count = [&](const Row* want, int32_t t) {
      auto& o = obs[want];
      o.resize(want->dist.size(), 0);
      auto it = std::find(want->dist.ids.begin(), want->dist.ids.end(), t);
      ASSERT_NE(it, want->dist.ids.end()) << "emitted " << t << ", which its row gives no mass";
      ++o[static_cast<size_t>(it - want->dist.ids.begin())];
      ++totals[want];
    };
    for (int s = 0; s < n; ++s) {
      const int32_t a = na[static_cast<size_t>(s)];
      ASSERT_TRUE(a >= 0 && a <= 2) << a;
      const int32_t* t = &toks[static_cast<size_t>(s * (nodes + 1))];
      const int32_t* dr = &drafts[static_cast<size_t>(s * nodes)];
      count(&PR, t[0]);
      if (a >= 1) {
        const int child = static_cast<int>(std::find(dr, dr + 3, t[0]) - dr);
        ASSERT_LT(child, 3) << "an accepted first token that is no child of the root";
        count(row_of_node[static_cast<size_t>(child + 1)], t[1]);
        if (a == 2) {
          ASSERT_EQ(child, 0);
          ASSERT_TRUE(t[1] == dr[3] || t[1] == dr[4]);
          count(&PC, t[2]);
        }
      }
    }
    for (const Row* r : {&PR, &PA, &PB, &PC}) {
      if (!full_statistics(n, 6000)) break;
      ASSERT_GT(totals[r], 300) << "a row was reached too rarely to test";
      std::vector<double> pr(r->dist.probs.begin(), r->dist.probs.end());
      const auto fit = test::chi2_goodness_of_fit(obs[r], pr, totals[r]);
      EXPECT_GT(fit.p_value, 1e-4) << "chi2 " << fit.statistic << " df " << fit.df << " over " << totals[r];
      if (r == &PR) {  // and the test can tell: the next row's probabilities fail it
        std::vector<double> shifted(pr.size());
        for (size_t i = 0; i < pr.size(); ++i) shifted[i] = pr[(i + 1) % pr.size()];
        EXPECT_LT(test::chi2_goodness_of_fit(obs[r], shifted, totals[r]).p_value, 1e-6);
      }
    }
  }
}

TEST(CudaSampling, CoupledVerificationAcceptsExactlyTheDraftsEqualToTheTargetsToken) {
  const int vocab = 64, k = 3, n = 400;
  Dev d;
  std::vector<Row> p;
  for (int i = 0; i <= k; ++i) p.push_back(device_row(d, random_logits(vocab, 40 + i, 2.0f), params(0.9f, 0, 0.95f, 0.0f)));
  std::vector<float> pflat;
  std::vector<SeqVerify> seqs;
  std::vector<int32_t> drafts;
  std::mt19937 g(1);
  for (int s = 0; s < n; ++s) {
    for (const Row& r : p) pflat.insert(pflat.end(), r.dense.begin(), r.dense.end());
    SeqVerify sv;
    sv.first_row = s * (k + 1);
    sv.n_drafts = k;
    sv.coupled = 1;
    sv.key = NoiseKey::of(9, 50 * s);
    seqs.push_back(sv);
    const PositionNoise noise(9);
    for (int i = 0; i < k; ++i) {  // the target's own token half of the time
      const int32_t y = gumbel_argmax(p[static_cast<size_t>(i)].dist, noise, 50 * s + i);
      drafts.push_back(g() % 2 ? y : static_cast<int32_t>(g() % vocab));
    }
  }
  Tensor acc = d.zeros(DType::I32, 1, n), out = d.zeros(DType::I32, k + 1, n);
  d.dd.verify_sampled(d.put(DType::F32, pflat, vocab), Tensor{}, d.put_structs(seqs), d.put(DType::I32, drafts, k),
                      d.put(DType::I32, std::vector<int32_t>(drafts.size(), -1), k), acc, out);
  const auto na = d.get<int32_t>(acc);
  const auto toks = d.get<int32_t>(out);
  const PositionNoise noise(9);
  for (int s = 0; s < n; ++s) {
    int a = 0;
    while (a < k && drafts[static_cast<size_t>(s * k + a)] == gumbel_argmax(p[static_cast<size_t>(a)].dist, noise, 50 * s + a)) ++a;
    ASSERT_EQ(na[static_cast<size_t>(s)], a) << "sequence " << s;
    for (int i = 0; i < a; ++i) EXPECT_EQ(toks[static_cast<size_t>(s * (k + 1) + i)], drafts[static_cast<size_t>(s * k + i)]);
    EXPECT_EQ(toks[static_cast<size_t>(s * (k + 1) + a)], gumbel_argmax(p[static_cast<size_t>(a)].dist, noise, 50 * s + a));
    for (int i = a + 1; i <= k; ++i) EXPECT_EQ(toks[static_cast<size_t>(s * (k + 1) + i)], -1);
  }
}

TEST(CudaSampling, VerificationRefusesRowsOutOfRange) {
  Dev d;
  const int vocab = 16;
  Tensor pt = d.put(DType::F32, std::vector<float>(static_cast<size_t>(vocab) * 2, 1.0f / vocab), vocab);
  SeqVerify sv;
  sv.first_row = 0;
  sv.n_drafts = 2;  // needs 3 rows, there are 2
  Tensor acc = d.zeros(DType::I32, 1, 1), out = d.zeros(DType::I32, 3, 1);
  d.dd.verify_sampled(pt, Tensor{}, d.put_structs(std::vector<SeqVerify>{sv}), d.put(DType::I32, std::vector<int32_t>{1, 2}, 2),
                      d.put(DType::I32, std::vector<int32_t>{-1, -1}, 2), acc, out);
  std::vector<int32_t> a(1);
  EXPECT_THROW(d.be->download(a.data(), acc, 4), std::out_of_range);
}

TEST(CudaSampling, TheInjectedBiasMovesMassFromTheTopTokenToTheSecond) {
  Dev d;
  const auto logits = random_logits(100, 3, 1.0f);
  const Row plain = device_row(d, logits, params(1.0f, 10, 1.0f, 0.0f));
  RowSampling r = row_of(params(1.0f, 10, 1.0f, 0.0f));
  r.bias_mass = 0.02f;
  Tensor probs = d.zeros(DType::F32, 100, 1), top = d.zeros(DType::I32, 1, 1), conf = d.zeros(DType::F32, 1, 1);
  d.dd.make_probs(probs, top, conf, d.put(DType::F32, logits, 100), d.put_structs(std::vector<RowSampling>{r}), Tensor{});
  const auto got = d.get<float>(probs);
  EXPECT_FLOAT_EQ(got[static_cast<size_t>(plain.dist.ids[0])], plain.dist.probs[0] - 0.02f);
  EXPECT_FLOAT_EQ(got[static_cast<size_t>(plain.dist.ids[1])], plain.dist.probs[1] + 0.02f);
}

TEST(CudaSampling, ScatterColsSpreadsASubsetsColumnsOverTheVocabulary) {
  Dev d;
  const int vocab = 300, rows = 3;
  const std::vector<int32_t> ids = {0, 7, 8, 150, 299};
  std::vector<float> src;
  for (int r = 0; r < rows; ++r)
    for (size_t j = 0; j < ids.size(); ++j) src.push_back(static_cast<float>(r * 10 + static_cast<int>(j)));
  Tensor dst = d.zeros(DType::F32, vocab, rows);
  d.dd.scatter_cols(dst, d.put(DType::F32, src, static_cast<int64_t>(ids.size())), d.put(DType::I32, ids, 1),
                    -std::numeric_limits<float>::infinity());
  const auto got = d.get<float>(dst);
  for (int r = 0; r < rows; ++r)
    for (int v = 0; v < vocab; ++v) {
      const auto it = std::find(ids.begin(), ids.end(), v);
      const float want = it == ids.end() ? -std::numeric_limits<float>::infinity()
                                         : static_cast<float>(r * 10 + static_cast<int>(it - ids.begin()));
      ASSERT_EQ(got[static_cast<size_t>(r * vocab + v)], want) << r << " " << v;
    }
  // An id outside the vocabulary is refused, not written.
  d.dd.scatter_cols(dst, d.put(DType::F32, src, static_cast<int64_t>(ids.size())),
                    d.put(DType::I32, std::vector<int32_t>{0, 7, 8, 150, 300}, 1), 0.0f);
  std::vector<float> one(1);
  EXPECT_THROW(d.be->download(one.data(), dst, 4), std::out_of_range);
}

// Grammar masks on the device (RowMasks, DeviceDecode::mask_rows): a masked row's
// distribution is the host's over the same mask (make_distribution(..., allowed)) for greedy
// and sampled transforms with penalties, masks shorter than the row allow nothing past
// them, rows sharing a mask share its upload, unlisted rows keep their bits, and a row
// index outside the logits is reported.
TEST(CudaSampling, MaskedRowsGiveTheHostsConstrainedDistribution) {
  Dev d;
  const int vocab = 200, rows = 4;
  std::mt19937 g(11);
  std::normal_distribution<float> nd(0.0f, 2.0f);
  std::vector<float> logits(static_cast<size_t>(vocab * rows));
  for (float& x : logits) x = nd(g);
  logits[5] = std::numeric_limits<float>::quiet_NaN();
  logits[vocab + 7] = std::numeric_limits<float>::infinity();  // a forbidden +inf: masked away
  // Masks: one over the whole vocabulary, one of 2 words (tokens >= 128 never allowed).
  TokenMaskWords a(4, 0), b(2, 0);
  for (int v = 0; v < vocab; ++v) {
    if (v % 3 != 0) a[static_cast<size_t>(v / 64)] |= uint64_t{1} << (v % 64);
    if (v < 128 && v % 5 < 2) b[static_cast<size_t>(v / 64)] |= uint64_t{1} << (v % 64);
  }
  const std::vector<std::span<const uint64_t>> of_row = {a, b, a, {}};  // row 3 unconstrained
  Tensor t = d.put(DType::F32, logits, vocab);
  RowMasks rm;
  for (int r = 0; r < rows; ++r) rm.add(r, of_row[static_cast<size_t>(r)]);
  std::unique_ptr<Buffer> buf;
  rm.apply(*d.be, d.dd, t, buf);
  const auto got = d.get<float>(t);
  for (int r = 0; r < rows; ++r)
    for (int v = 0; v < vocab; ++v) {
      const auto m = of_row[static_cast<size_t>(r)];
      const size_t i = static_cast<size_t>(r * vocab + v);
      if (m.empty() || mask_allows(m, v)) ASSERT_EQ(std::memcmp(&got[i], &logits[i], 4), 0) << r << " " << v;
      else ASSERT_EQ(got[i], -std::numeric_limits<float>::infinity()) << r << " " << v;
    }
  // The masked rows' distributions are the host's constrained ones.
  SamplingParams sp;
  sp.temperature = 0.9f;
  sp.top_k = 20;
  sp.top_p = 0.95f;
  sp.repetition_penalty = 1.3f;
  const std::vector<int32_t> history = {1, 2, 2, 64, 150};
  for (const bool greedy : {false, true}) {
    SamplingParams p = sp;
    if (greedy) p.temperature = 0.0f;
    std::vector<int32_t> pens;
    std::vector<RowSampling> params;
    for (int r = 0; r < rows; ++r) params.push_back(row_sampling(p, history, vocab, pens));
    Tensor probs = d.zeros(DType::F32, vocab, rows), top = d.zeros(DType::I32, rows, 1),
           conf = d.zeros(DType::F32, rows, 1);
    d.dd.make_probs(probs, top, conf, t, d.put_structs(params), d.put(DType::I32, pens, kPenaltyEntryWords));
    const auto pr = d.get<float>(probs);
    for (int r = 0; r < rows; ++r) {
      const auto row = std::span<const float>(logits).subspan(static_cast<size_t>(r * vocab), vocab);
      const auto m = of_row[static_cast<size_t>(r)];
      const Distribution want = m.empty() ? make_distribution(row, p, history) : make_distribution(row, p, history, m);
      std::vector<float> dense(vocab, 0.0f);
      for (size_t j = 0; j < want.ids.size(); ++j) dense[static_cast<size_t>(want.ids[j])] = want.probs[j];
      for (int v = 0; v < vocab; ++v)
        ASSERT_NEAR(pr[static_cast<size_t>(r * vocab + v)], dense[static_cast<size_t>(v)], 2e-6f)
            << (greedy ? "greedy " : "sampled ") << r << " " << v;
    }
  }
  // Masks narrower than the rows (3 words of 32 bits: 96 columns) allow nothing past them.
  {
    Tensor u = d.put(DType::F32, logits, vocab);
    const std::vector<int32_t> words = {-1, -1, 0x55555555};
    d.dd.mask_rows(u, d.put(DType::I32, std::vector<int32_t>{2}, 1), d.put(DType::I32, std::vector<int32_t>{0}, 1),
                   d.put(DType::I32, words, 3));
    const auto narrow = d.get<float>(u);
    for (int v = 0; v < vocab; ++v) {
      const size_t i = static_cast<size_t>(2 * vocab + v);
      const bool allowed = v < 64 || (v < 96 && v % 2 == 0);
      if (allowed) ASSERT_EQ(std::memcmp(&narrow[i], &logits[i], 4), 0) << v;
      else ASSERT_EQ(narrow[i], -std::numeric_limits<float>::infinity()) << v;
    }
  }
  // One upload per distinct mask, however many rows share it.
  RowMasks twice;
  twice.add(0, a);
  twice.add(2, a);
  EXPECT_EQ(twice.distinct(), 1u);
  // A row outside the logits is refused.
  RowMasks bad;
  bad.add(rows, a);
  bad.apply(*d.be, d.dd, t, buf);
  std::vector<float> one(1);
  EXPECT_THROW(d.be->download(one.data(), t, 4), std::out_of_range);
}

// make_probs through a row map (a few rows of a large pass into rows of their own): each
// mapped row is the unmapped call's row of its source, bit for bit, with its top and
// confidence; a source outside the logits is reported.
TEST(CudaSampling, MakeProbsThroughARowMapGivesTheSameRows) {
  Dev d;
  const int vocab = 300, rows = 5;
  const auto logits = random_logits(vocab * rows, 21, 2.0f);
  Tensor t = d.put(DType::F32, logits, vocab);
  SamplingParams sampled = params(0.8f, 20, 0.9f, 0.02f);
  sampled.repetition_penalty = 1.3f;
  const std::vector<int32_t> history = {4, 4, 200};
  std::vector<int32_t> pens;
  std::vector<RowSampling> all;
  for (int r = 0; r < rows; ++r) all.push_back(row_sampling(r % 2 ? sampled : params(0.0f, 0, 1.0f, 0.0f), history, vocab, pens));
  all[2].penalised_only = 1;
  const Tensor tpen = d.put(DType::I32, pens, kPenaltyEntryWords);
  Tensor full = d.zeros(DType::F32, vocab, rows), top = d.zeros(DType::I32, rows, 1), conf = d.zeros(DType::F32, rows, 1);
  d.dd.make_probs(full, top, conf, t, d.put_structs(all), tpen);
  const std::vector<int32_t> map = {3, 0, 2, 3};
  std::vector<RowSampling> mapped;
  for (int32_t r : map) mapped.push_back(all[static_cast<size_t>(r)]);
  const auto m = static_cast<int64_t>(map.size());
  Tensor part = d.zeros(DType::F32, vocab, m), mtop = d.zeros(DType::I32, m, 1), mconf = d.zeros(DType::F32, m, 1);
  d.dd.make_probs(part, mtop, mconf, t, d.put_structs(mapped), tpen, d.put(DType::I32, map, 1));
  const auto f = d.get<float>(full), p = d.get<float>(part), ft = d.get<float>(conf), pt = d.get<float>(mconf);
  const auto fi = d.get<int32_t>(top), pi = d.get<int32_t>(mtop);
  for (size_t i = 0; i < map.size(); ++i) {
    const auto r = static_cast<size_t>(map[i]);
    EXPECT_EQ(std::memcmp(&p[i * vocab], &f[r * vocab], vocab * 4), 0) << "mapped row " << i;
    EXPECT_EQ(pi[i], fi[r]) << i;
    EXPECT_EQ(std::memcmp(&pt[i], &ft[r], 4), 0) << i;
  }
  EXPECT_EQ(pi[2], -2) << "a penalised_only row has no top";
  // A source row outside the logits.
  Tensor one = d.zeros(DType::F32, vocab, 1), otop = d.zeros(DType::I32, 1, 1), oconf = d.zeros(DType::F32, 1, 1);
  d.dd.make_probs(one, otop, oconf, t, d.put_structs(std::vector<RowSampling>{all[0]}), tpen,
                  d.put(DType::I32, std::vector<int32_t>{rows}, 1));
  std::vector<int32_t> got(1);
  EXPECT_THROW(d.be->download(got.data(), otop, 4), std::out_of_range);
}

// Logprobs on the device (logprob_rows over make_probs' penalised logits and final
// distributions) are the host's token_logprobs of the same rows: the same tokens in the same
// order, and the same values up to the normaliser's summation order. Rows cover greedy with
// penalties, NaN and ties across segments, +inf logits, a row almost all -inf (a grammar's
// mask), sampled rows whose distribution has fewer tokens than asked for (the list goes on
// at -inf in logit order) and one with the whole vocabulary, a chosen token the cuts left
// out; vocabularies of several segments and one smaller than the list.
TEST(CudaSampling, LogprobRowsGiveTheHostsTokenLogprobs) {
  Dev d;
  constexpr float kInf = std::numeric_limits<float>::infinity();
  const std::vector<int32_t> history = {3, 3, 700, 4100, 8999};
  struct Case {
    SamplingParams p;
    int shape;  // 0 plain, 1 NaN and a tie across segments, 2 two +inf, 3 almost all -inf
  };
  SamplingParams pen = params(0.0f, 0, 1.0f, 0.0f);
  pen.presence_penalty = 0.8f;
  pen.repetition_penalty = 1.2f;
  SamplingParams k5 = params(0.8f, 5, 1.0f, 0.0f);
  k5.frequency_penalty = 0.5f;
  SamplingParams biased = params(0.0f, 0, 1.0f, 0.0f);  // a bias on a penalised token and others
  biased.repetition_penalty = 1.2f;
  biased.logit_bias = {{3, 2.5f}, {8, -1.0f}, {11, 4.0f}, {7000, -100.0f}};
  SamplingParams biased_k5 = k5;
  biased_k5.logit_bias = biased.logit_bias;
  const std::vector<Case> cases = {{pen, 1},
                                   {k5, 0},
                                   {biased, 0},
                                   {biased_k5, 1},
                                   {params(0.7f, 0, 0.9f, 0.05f), 1},
                                   {params(0.0f, 0, 1.0f, 0.0f), 2},
                                   {params(1.0f, 0, 1.0f, 0.0f), 0},
                                   {params(0.0f, 0, 1.0f, 0.0f), 3},
                                   {params(1.1f, 40, 1.0f, 0.0f), 3}};
  for (const int vocab : {9000, 12}) {
    const auto rows = static_cast<int64_t>(cases.size());
    std::vector<float> logits(static_cast<size_t>(vocab * rows));
    std::mt19937 g(static_cast<unsigned>(vocab));
    std::normal_distribution<float> nd(0.0f, 3.0f);
    for (float& x : logits) x = nd(g);
    for (int64_t r = 0; r < rows; ++r) {
      float* row = &logits[static_cast<size_t>(r * vocab)];
      const int a = vocab > 100 ? 100 : 1, b = vocab > 100 ? 5000 : 9;
      switch (cases[static_cast<size_t>(r)].shape) {
        case 1:
          row[a] = row[b] = 20.0f;  // tied at the top, in different segments
          row[2] = std::numeric_limits<float>::quiet_NaN();
          break;
        case 2:
          row[b] = row[a] = kInf;
          break;
        case 3:
          for (int v = 0; v < vocab; ++v)
            if (v % 4000 != 7 && v != 2) row[v] = -kInf;
          break;
      }
    }
    Tensor t = d.put(DType::F32, logits, vocab);
    std::vector<int32_t> pens;
    std::vector<RowSampling> wp, pp;
    for (const Case& c : cases) {
      RowSampling rs = row_sampling(c.p, history, vocab, pens);
      pp.push_back(rs);
      if (c.p.greedy()) pp.back().skip = 1;
      rs.penalised_only = 1;
      wp.push_back(rs);
    }
    Tensor w = d.zeros(DType::F32, vocab, rows), p = d.zeros(DType::F32, vocab, rows);
    Tensor top = d.zeros(DType::I32, rows, 1), conf = d.zeros(DType::F32, rows, 1);
    const Tensor tpen = d.put(DType::I32, pens, kPenaltyEntryWords);
    d.dd.make_probs(w, top, conf, t, d.put_structs(wp), tpen);
    d.dd.make_probs(p, top, conf, t, d.put_structs(pp), tpen);
    // Each row listed once in reverse order, with a chosen token: the second most likely for
    // a greedy row, for a sampled one alternately a kept token and one the cuts left out.
    std::vector<TokenLogprobs> want;
    std::vector<int32_t> listed_rows, chosen;
    for (int n_top : {20, 7, 0}) {
      want.clear();
      listed_rows.clear();
      chosen.clear();
      for (int64_t r = rows - 1; r >= 0; --r) {
        const Case& c = cases[static_cast<size_t>(r)];
        const auto row = std::span<const float>(logits).subspan(static_cast<size_t>(r * vocab), static_cast<size_t>(vocab));
        const TokenLogprobs all = token_logprobs(row, c.p, history, nullptr, 0, std::min(vocab, 20));
        std::optional<Distribution> dist;
        if (!c.p.greedy()) dist = make_distribution(row, c.p, history);
        int32_t tok = all.top[1].token;
        if (dist) tok = r % 2 == 0 ? dist->ids.back() : all.top.back().token;
        want.push_back(token_logprobs(row, c.p, history, dist ? &*dist : nullptr, tok, n_top));
        listed_rows.push_back(static_cast<int32_t>(r));
        listed_rows.push_back(c.p.greedy() ? -1 : static_cast<int32_t>(r));
        chosen.push_back(tok);
      }
      const auto m = static_cast<int64_t>(chosen.size());
      Tensor lp = d.zeros(DType::F32, m, 1), ids = d.zeros(DType::I32, std::max<int64_t>(1, n_top * m), 1),
             lps = d.zeros(DType::F32, std::max<int64_t>(1, n_top * m), 1);
      Tensor ids_v = make_tensor(ids.buf, DType::I32, n_top * m, 1), lps_v = make_tensor(lps.buf, DType::F32, n_top * m, 1);
      Tensor scratch = d.zeros(DType::I32, logprob_scratch_words(m, vocab, n_top), 1);
      d.dd.logprob_rows(lp, ids_v, lps_v, w, p, d.put(DType::I32, listed_rows, 2), d.put(DType::I32, chosen, 1), n_top,
                        scratch);
      const auto got_lp = d.get<float>(lp), got_lps = d.get<float>(lps);
      const auto got_ids = d.get<int32_t>(ids);
      // Equal, or within the summation order's rounding of the normaliser.
      auto same = [](float a, float b) {
        if (std::isinf(b)) return a == b;
        return std::fabs(a - b) <= 1e-6f * std::max(1.0f, std::fabs(b));
      };
      int filled = 0;
      for (int64_t i = 0; i < m; ++i) {
        const TokenLogprobs& h = want[static_cast<size_t>(i)];
        const std::string what = "vocab " + std::to_string(vocab) + " n_top " + std::to_string(n_top) + " row " +
                                 std::to_string(listed_rows[static_cast<size_t>(2 * i)]);
        EXPECT_TRUE(same(got_lp[static_cast<size_t>(i)], h.chosen.logprob))
            << what << ": " << got_lp[static_cast<size_t>(i)] << " vs " << h.chosen.logprob;
        ASSERT_EQ(h.top.size(), static_cast<size_t>(std::min(n_top, vocab))) << what;
        for (int j = 0; j < n_top; ++j) {
          const size_t at = static_cast<size_t>(i * n_top + j);
          if (j >= vocab) {
            EXPECT_EQ(got_ids[at], -1) << what << " past the vocabulary";
            continue;
          }
          const TokenLogprob& e = h.top[static_cast<size_t>(j)];
          EXPECT_EQ(got_ids[at], e.token) << what << " alt " << j;
          EXPECT_TRUE(same(got_lps[at], e.logprob)) << what << " alt " << j << ": " << got_lps[at] << " vs " << e.logprob;
          filled += !std::isfinite(e.logprob) && cases[static_cast<size_t>(listed_rows[static_cast<size_t>(2 * i)])].p.temperature > 0;
        }
      }
      if (n_top == 20) {
        EXPECT_GT(filled, 0) << "a distribution shorter than the list goes on at -inf";
      }
    }
  }
  // A row outside w, or a chosen token outside the vocabulary, is refused.
  const int vocab = 12;
  Tensor w = d.zeros(DType::F32, vocab, 2), lp = d.zeros(DType::F32, 1, 1), ids = d.zeros(DType::I32, 1, 1);
  Tensor scratch = d.zeros(DType::I32, logprob_scratch_words(1, vocab, 1), 1);
  for (const auto& [row, tok] : {std::pair{2, 0}, std::pair{0, vocab}}) {
    d.dd.logprob_rows(lp, ids, d.zeros(DType::F32, 1, 1), w, Tensor{}, d.put(DType::I32, std::vector<int32_t>{row, -1}, 2),
                      d.put(DType::I32, std::vector<int32_t>{tok}, 1), 1, scratch);
    std::vector<float> one(1);
    EXPECT_THROW(d.be->download(one.data(), lp, 4), std::out_of_range) << row << " " << tok;
  }
}

// Token trees drafted on the device take their nodes' children from top_rows: by value over
// logits rows (greedy trees: the host's scan, ties to the lower id, NaN and -inf never, none
// under a +inf logit) with the row's log-sum-exp, and by Gumbel key over probs rows (coupled
// trees: the CPU's gumbel_top). Listed rows in any order, w past what is possible.
TEST(CudaSampling, TopRowsGiveTheHostsTreeChildren) {
  Dev d;
  const int vocab = 700, w = 5;
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<std::vector<float>> rows;
  for (unsigned s = 0; s < 4; ++s) {  // values on a coarse grid: many ties, at the top too
    std::vector<float> r = random_logits(vocab, 40 + s, 2.0f);
    for (auto& x : r) x = std::round(x * 2.0f) / 2.0f;
    r[3] = nan, r[11] = -inf;
    rows.push_back(r);
  }
  rows.push_back(std::vector<float>(static_cast<size_t>(vocab), -inf));  // nothing possible
  rows.back()[5] = nan;
  rows.push_back(std::vector<float>(static_cast<size_t>(vocab), -inf));  // two possible tokens
  rows.back()[600] = 1.0f, rows.back()[2] = 1.0f;
  rows.push_back(random_logits(vocab, 9, 1.0f));  // a +inf logit: no children
  rows.back()[17] = inf;
  std::vector<float> flat;
  for (const auto& r : rows) flat.insert(flat.end(), r.begin(), r.end());
  const Tensor src = d.put(DType::F32, flat, vocab);
  const std::vector<int32_t> listed = {3, 0, 6, 5, 1, 4, 2, 3};
  const auto m = static_cast<int64_t>(listed.size());
  Tensor ids = d.zeros(DType::I32, w, m), vals = d.zeros(DType::F32, w, m), lse = d.zeros(DType::F32, 2, m);
  d.dd.top_rows(ids, vals, lse, src, d.put(DType::I32, listed, 1), Tensor{}, w);
  const auto gi = d.get<int32_t>(ids);
  const auto gv = d.get<float>(vals);
  const auto gl = d.get<float>(lse);
  for (size_t i = 0; i < listed.size(); ++i) {
    const auto& r = rows[static_cast<size_t>(listed[i])];
    std::vector<int32_t> order;
    for (int32_t v = 0; v < vocab; ++v)
      if (r[static_cast<size_t>(v)] > -inf) order.push_back(v);
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return r[size_t(a)] > r[size_t(b)]; });
    if (!order.empty() && r[size_t(order[0])] == inf) order.clear();
    double z = 0.0;
    for (int32_t v : order) z += static_cast<double>(exp_nonpos(r[size_t(v)] - r[size_t(order[0])]));
    for (int j = 0; j < w; ++j) {
      const size_t at = i * w + static_cast<size_t>(j);
      const int32_t want = j < static_cast<int>(order.size()) ? order[static_cast<size_t>(j)] : -1;
      ASSERT_EQ(gi[at], want) << "row " << listed[i] << " rank " << j;
      if (want >= 0) {
        ASSERT_EQ(gv[at], r[static_cast<size_t>(want)]);
      }
    }
    if (!order.empty()) {
      EXPECT_NEAR(static_cast<double>(gl[2 * i]) + static_cast<double>(gl[2 * i + 1]), std::log(z), 1e-13)
          << "row " << listed[i];
    }
  }

  // By Gumbel key over make_probs rows (top-k and top-p cuts: supports smaller than w too).
  std::vector<Row> prows;
  const SamplingParams ps[] = {params(1.0f, 0, 1.0f, 0.0f), params(0.7f, 3, 1.0f, 0.0f), params(1.3f, 40, 0.9f, 0.0f)};
  std::vector<float> pflat;
  for (size_t k = 0; k < 3; ++k) {
    prows.push_back(device_row(d, random_logits(vocab, 70 + static_cast<unsigned>(k), 1.5f), ps[k]));
    pflat.insert(pflat.end(), prows.back().dense.begin(), prows.back().dense.end());
  }
  const Tensor probs = d.put(DType::F32, pflat, vocab);
  const std::vector<int32_t> plisted = {2, 0, 1, 0};
  std::vector<NoiseKey> keys;
  for (size_t i = 0; i < plisted.size(); ++i) keys.push_back(NoiseKey::of(0xfeedULL + i, 300 + 7 * static_cast<int64_t>(i)));
  const auto pm = static_cast<int64_t>(plisted.size());
  Tensor kids = d.zeros(DType::I32, w, pm), kvals = d.zeros(DType::F32, w, pm), klse = d.zeros(DType::F32, 2, pm);
  d.dd.top_rows(kids, kvals, klse, probs, d.put(DType::I32, plisted, 1), d.put_structs(keys), w);
  const auto ki = d.get<int32_t>(kids);
  const auto kv = d.get<float>(kvals);
  for (size_t i = 0; i < plisted.size(); ++i) {
    const Row& r = prows[static_cast<size_t>(plisted[i])];
    const std::vector<int32_t> want =
        gumbel_top(r.dist, PositionNoise(0xfeedULL + i), 300 + 7 * static_cast<int64_t>(i), static_cast<size_t>(w));
    for (int j = 0; j < w; ++j) {
      const size_t at = i * w + static_cast<size_t>(j);
      ASSERT_EQ(ki[at], j < static_cast<int>(want.size()) ? want[static_cast<size_t>(j)] : -1) << "row " << i << " rank " << j;
      if (ki[at] >= 0) {
        ASSERT_EQ(kv[at], r.dense[static_cast<size_t>(ki[at])]);
      }
    }
  }

  // A listed row outside src is refused.
  d.dd.top_rows(ids, vals, lse, src, d.put(DType::I32, std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6, 7}, 1), Tensor{}, w);
  std::vector<int32_t> one(1);
  EXPECT_THROW(d.be->download(one.data(), ids, 4), std::out_of_range);
}

}  // namespace
}  // namespace tandem::kernels
