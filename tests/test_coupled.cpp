// Coupled (Gumbel-max) sampling and verification: the noise is a pure function of
// (seed, position, token), Gumbel-max with it samples the distribution exactly, and the
// text for a seed is the same with speculation off, any k, any policy or proposer, and any
// batch (through the Engine and the Scheduler). Rejection mode is shown NOT to have that
// property, so the equality tests can fail.
#include <gtest/gtest.h>

#include <cmath>
#include <condition_variable>
#include <map>
#include <mutex>
#include <set>

#include "engine/sampling/gumbel.hpp"
#include "engine/runtime/scheduler.hpp"
#include "tests/support/paths.hpp"
#include "tests/support/prompts.hpp"
#include "tests/support/stats.hpp"
#include "tests/support/tiny_model.hpp"
#include "verify/verifier.hpp"

namespace tandem {
namespace {

TEST(PortableLog, MatchesLibmToTheLastBitsOverTheRangeUsed) {
  double worst = 0.0;
  for (double x : {1e-300, 1e-17, 5.551115123125783e-17, 1e-9, 0.001, 0.25, 0.5, 0.7071067811865476, 0.9, 0.999999,
                   1.0 - 0x1.0p-53, 1.0, 1.0 + 0x1.0p-52, 2.0, 37.4, 1e10, 1e300}) {
    const double ref = std::log(x);
    const double got = portable_log(x);
    const double err = ref == 0.0 ? std::fabs(got) : std::fabs(got - ref) / std::fabs(ref);
    worst = std::max(worst, err);
    EXPECT_LE(err, 4e-16) << x;
  }
  Rng r(5);
  for (int i = 0; i < 100000; ++i) {
    const double x = std::exp(80.0 * (r.uniform() - 0.5));
    EXPECT_LE(std::fabs(portable_log(x) - std::log(x)), 4e-16 * std::max(1.0, std::fabs(std::log(x)))) << x;
  }
  EXPECT_TRUE(std::isinf(portable_log(0.0)));
  EXPECT_TRUE(std::isnan(portable_log(-1.0)));
}

TEST(PositionNoise, IsAPureFunctionOfSeedPositionAndToken) {
  const PositionNoise a(42), b(42), c(43);
  EXPECT_EQ(a.uniform(7, 3), b.uniform(7, 3));
  EXPECT_NE(a.uniform(7, 3), c.uniform(7, 3));
  EXPECT_NE(a.uniform(7, 3), a.uniform(8, 3));
  EXPECT_NE(a.uniform(7, 3), a.uniform(7, 4));
  // Uniform on (0, 1): mean, variance, and no value at the ends, over many keys.
  double sum = 0.0, sq = 0.0;
  const int n = 200000;
  for (int i = 0; i < n; ++i) {
    const double u = a.uniform(i / 64, i % 64);
    ASSERT_GT(u, 0.0);
    ASSERT_LT(u, 1.0);
    sum += u;
    sq += u * u;
  }
  EXPECT_NEAR(sum / n, 0.5, 0.005);
  EXPECT_NEAR(sq / n - (sum / n) * (sum / n), 1.0 / 12.0, 0.002);
}

Distribution dist(std::vector<int32_t> ids, std::vector<float> probs) {
  Distribution d;
  d.ids = std::move(ids);
  d.probs = std::move(probs);
  return d;
}

// Gumbel-max over positions samples p (one-sample χ² against p), and the tokens of
// neighbouring positions are independent (χ² of the pair against the product).
TEST(GumbelArgmax, SamplesTheDistributionAndPositionsAreIndependent) {
  const Distribution p = dist({5, 9, 2, 7, 11}, {0.4f, 0.25f, 0.2f, 0.1f, 0.05f});
  const PositionNoise noise(2024);
  const int n = 60000;
  std::map<int32_t, size_t> index;
  for (size_t i = 0; i < p.size(); ++i) index[p.ids[i]] = i;
  std::vector<int64_t> single(p.size(), 0), pair(p.size() * p.size(), 0);
  for (int i = 0; i < n; ++i) {
    const size_t a = index.at(gumbel_argmax(p, noise, 2 * i));
    const size_t b = index.at(gumbel_argmax(p, noise, 2 * i + 1));
    ++single[a];
    ++pair[a * p.size() + b];
  }
  std::vector<double> probs(p.probs.begin(), p.probs.end()), joint;
  for (float x : p.probs)
    for (float y : p.probs) joint.push_back(double(x) * y);
  const auto r1 = test::chi2_goodness_of_fit(single, probs, n);
  EXPECT_GT(r1.p_value, 1e-4) << "chi2 " << r1.statistic;
  const auto r2 = test::chi2_goodness_of_fit(pair, joint, n);
  EXPECT_GT(r2.p_value, 1e-4) << "chi2 " << r2.statistic;
  // Power: a 2% shift of mass is visible at this n.
  std::vector<double> shifted = probs;
  shifted[0] -= 0.02;
  shifted[1] += 0.02;
  EXPECT_LT(test::chi2_goodness_of_fit(single, shifted, n).p_value, 1e-4);
}

// Gumbel-max written out from its definition, independently of gumbel_argmax: the token of
// p's support with the largest log p(v) - log(-log u(position, v)), in libm's logarithms.
int32_t reference_gumbel_max(const Distribution& p, const PositionNoise& noise, int64_t position) {
  int32_t best = -1;
  double best_key = -INFINITY;
  for (size_t i = 0; i < p.size(); ++i) {
    if (p.probs[i] <= 0.0f) continue;
    const double g = -std::log(-std::log(noise.uniform(position, p.ids[i])));
    const double key = std::log(static_cast<double>(p.probs[i])) + g;
    if (key > best_key) {
      best_key = key;
      best = p.ids[i];
    }
  }
  return best;
}

// Coupled verification against that reference: every emitted token (accepted drafts, then
// the correction or bonus) is the target's Gumbel-max token at its position, whatever the
// draft proposed, so the output follows p at every position (χ² over the emitted tokens);
// a draft is accepted exactly when it is that token, which the draft's own Gumbel-max with
// the same noise often is (acceptance at most Σ min(p, q)).
TEST(VerifyCoupled, EmitsTheTargetsGumbelMaxTokensWhateverTheDraft) {
  const Distribution p = dist({1, 2, 3}, {0.5f, 0.3f, 0.2f});
  const Distribution q = dist({2, 1, 3}, {0.6f, 0.3f, 0.1f});
  const PositionNoise noise(9);
  DistFn pf = [&](int32_t) { return p; };
  int64_t accepted = 0, drafted = 0, emitted = 0;
  std::map<int32_t, int64_t> first;  // the first emitted token of each step
  Rng wrong(3);
  for (int64_t pos = 0; pos < 40000; pos += 4) {
    // Odd steps draft as a coupled draft model would (Gumbel-max of q with the same noise),
    // even ones draw the draft with their own randomness: the output must not care.
    std::vector<int32_t> draft;
    for (int i = 0; i < 3; ++i)
      draft.push_back(pos % 8 == 4 ? gumbel_argmax(q, noise, pos + i) : sample(q, wrong));
    const VerifyResult v = verify_coupled(draft, pf, noise, pos);
    for (int i = 0; i < v.n_accepted; ++i) ASSERT_EQ(draft[i], reference_gumbel_max(p, noise, pos + i)) << pos;
    ASSERT_EQ(v.next_token, reference_gumbel_max(p, noise, pos + v.n_accepted)) << pos;
    if (!v.all_accepted) {
      ASSERT_NE(draft[static_cast<size_t>(v.n_accepted)], v.next_token);
    }
    ++first[v.n_accepted > 0 ? draft[0] : v.next_token];
    emitted += v.n_accepted + 1;
    if (pos % 8 == 4) {
      accepted += v.n_accepted > 0;
      ++drafted;
    }
  }
  std::vector<int64_t> obs;
  std::vector<double> probs;
  for (size_t i = 0; i < p.size(); ++i) {
    obs.push_back(first[p.ids[i]]);
    probs.push_back(p.probs[i]);
  }
  const int64_t steps = 40000 / 4;
  const auto chi = test::chi2_goodness_of_fit(obs, probs, steps);
  EXPECT_GT(chi.p_value, 1e-4) << "chi2 " << chi.statistic;
  EXPECT_GT(emitted, steps);  // drafts were accepted
  const double rate = double(accepted) / drafted;
  EXPECT_GT(rate, 0.4);  // Σ min(p, q) = 0.3 + 0.3 + 0.1 = 0.7; coupling attains less
  EXPECT_LT(rate, 0.7 + 0.03);
}

// ---- end to end ---------------------------------------------------------------------------

const test::TinyPair& models() {
  static const test::TinyPair f = [] {
    test::TinyModelSpec t;
    t.arch = "qwen2";
    t.seed = 5;
    t.tied_embeddings = false;  // logits of order one: sampled outputs vary with the seed
    return test::write_tiny_pair(test::scratch_dir("coupled"), t);
  }();
  return f;
}

// The draft: the target's weights perturbed (agrees often, not always).
const std::string& perturbed_draft() {
  static const std::string path = [] {
    test::TinyModelSpec t;
    t.arch = "qwen2";
    t.seed = 5;
    t.tied_embeddings = false;
    t.perturb = 0.5f;
    const std::string p = test::scratch_dir("coupled-draft") + "/draft.gguf";
    test::write_tiny_model(p, t);
    return p;
  }();
  return path;
}

std::unique_ptr<Engine> load() {
  LoadOptions o;
  o.model_path = models().target;
  o.draft_model_path = perturbed_draft();
  o.threads = 1;
  o.context = 128;
  return Engine::load(o);
}

std::vector<int32_t> prompt_of(int n, uint32_t seed) {
  std::vector<int32_t> t = test::random_prompt(n, seed, 3);
  // Repeat it, so prompt lookup has something to propose.
  const auto once = t;
  t.insert(t.end(), once.begin(), once.end());
  return t;
}

GenerateOptions sampled(uint64_t seed, VerifyMode mode) {
  GenerateOptions g;
  g.max_tokens = 24;
  g.ignore_eos = true;
  g.sampling.temperature = 1.0f;
  g.sampling.top_k = 20;
  g.sampling.top_p = 0.95f;
  g.sampling.min_p = 0.0f;
  g.sampling.repetition_penalty = 1.1f;
  g.sampling.seed = seed;
  g.speculative.verify = mode;
  return g;
}

struct Variant {
  const char* name;
  DraftMode mode;
  int k;
  const char* policy;
};
const Variant kVariants[] = {
    {"model k1", DraftMode::Model, 1, "fixed"},        {"model k2", DraftMode::Model, 2, "fixed"},
    {"model k3", DraftMode::Model, 3, "fixed"},        {"model k4", DraftMode::Model, 4, "fixed"},
    {"model k5", DraftMode::Model, 5, "fixed"},        {"model k6", DraftMode::Model, 6, "fixed"},
    {"model k7", DraftMode::Model, 7, "fixed"},        {"model k8", DraftMode::Model, 8, "fixed"},
    {"model adaptive", DraftMode::Model, 6, "adaptive"}, {"model goodput", DraftMode::Model, 6, "goodput"},
    {"model confidence", DraftMode::Model, 4, "confidence"}, {"ngram k4", DraftMode::Ngram, 4, "fixed"},
    {"ngram k8 adaptive", DraftMode::Ngram, 8, "adaptive"},
};
constexpr size_t kNumVariants = sizeof(kVariants) / sizeof(kVariants[0]);

GenerateOptions with(GenerateOptions g, const Variant& v) {
  g.speculative.mode = v.mode;
  g.speculative.draft_max = v.k;
  g.speculative.policy = v.policy;
  g.speculative.draft_min = v.k > 4 ? 2 : 0;
  return g;
}

TEST(Coupled, SameSeedSameTextWithOrWithoutSpeculationForEveryK) {
  auto e = load();
  int64_t accepted = 0;
  std::set<std::vector<int32_t>> texts;
  for (uint64_t seed : {1ull, 2ull, 3ull, 99ull}) {
    for (uint32_t ps : {1u, 2u}) {
      const auto prompt = prompt_of(6, ps);
      const auto plain = e->generate_tokens(prompt, sampled(seed, VerifyMode::Coupled));
      texts.insert(plain.tokens);
      for (const Variant& v : kVariants) {
        const auto spec = e->generate_tokens(prompt, with(sampled(seed, VerifyMode::Coupled), v));
        ASSERT_EQ(spec.tokens, plain.tokens) << v.name << " seed " << seed << " prompt " << ps;
        accepted += spec.speculative.accepted_tokens;
      }
    }
  }
  EXPECT_GE(texts.size(), 7u) << "different seeds should give different texts";
  EXPECT_GT(accepted, 100) << "speculation should have accepted drafts";
}

// The property is not free: with rejection sampling the random stream is consumed per step,
// so the text for a seed changes with k (this is what makes the test above meaningful).
TEST(Coupled, RejectionModeTextDependsOnK) {
  auto e = load();
  int differ = 0;
  for (uint64_t seed : {1ull, 2ull, 3ull, 99ull}) {
    const auto prompt = prompt_of(6, 1);
    const auto plain = e->generate_tokens(prompt, sampled(seed, VerifyMode::Rejection));
    const auto spec = e->generate_tokens(prompt, with(sampled(seed, VerifyMode::Rejection), kVariants[2]));
    differ += spec.tokens != plain.tokens;
  }
  EXPECT_GT(differ, 0);
}

// Through the scheduler: 16 requests at once (mixed proposers, k and policies), each text
// equal to the Engine's plain coupled run for its seed.
TEST(Coupled, SameSeedSameTextInABatchOf16ThroughTheScheduler) {
  auto e = load();
  struct Req {
    std::vector<int32_t> prompt;
    GenerateOptions opts;
    std::vector<int32_t> expect;
  };
  std::vector<Req> reqs;
  for (int i = 0; i < 16; ++i) {
    Req r;
    r.prompt = prompt_of(5 + i % 3, static_cast<uint32_t>(i % 4));
    const uint64_t seed = 100 + static_cast<uint64_t>(i);
    r.expect = e->generate_tokens(r.prompt, sampled(seed, VerifyMode::Coupled)).tokens;
    r.opts = i % 5 == 4 ? sampled(seed, VerifyMode::Coupled)
                        : with(sampled(seed, VerifyMode::Coupled), kVariants[static_cast<size_t>(i) % kNumVariants]);
    reqs.push_back(std::move(r));
  }
  SchedulerOptions so;
  so.max_seqs = 16;
  so.prefill_chunk = 7;  // prompts arrive in chunks while others decode
  Scheduler s(*e, so);
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::vector<int32_t>> got(reqs.size());
  std::vector<std::string> errors(reqs.size());
  size_t done = 0;
  for (size_t i = 0; i < reqs.size(); ++i) {
    ServeRequest r;
    r.prompt = reqs[i].prompt;
    r.opts = reqs[i].opts;
    r.on_done = [&, i](const GenerateResult& res, const std::string& err) {
      std::lock_guard<std::mutex> lk(mu);
      got[i] = res.tokens;
      errors[i] = err;
      ++done;
      cv.notify_all();
    };
    ASSERT_EQ(s.submit(std::move(r)).status, SubmitStatus::Ok);
  }
  std::unique_lock<std::mutex> lk(mu);
  cv.wait(lk, [&] { return done == reqs.size(); });
  for (size_t i = 0; i < reqs.size(); ++i) {
    EXPECT_EQ(errors[i], "");
    EXPECT_EQ(got[i], reqs[i].expect) << "request " << i;
  }
  EXPECT_GT(s.stats().speculative.accepted_tokens, 0);
}

}  // namespace
}  // namespace tandem
