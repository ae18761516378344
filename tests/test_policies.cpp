// Speculation policies and the cost model on synthetic inputs: when speculation must turn
// off (α tiny, c large, r(k) steep, big batch) and back on, not being fooled by short
// drafts, probing within its budget; cost model formulas, interpolation, batch model, JSON
// and cache round trips; and the policies wired through tandem::Engine on tiny models.
#include <gtest/gtest.h>
#include <boost/json.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <future>
#include <iterator>

#include "policies/acceptance_estimator.hpp"
#include "policies/adaptive_policy.hpp"
#include "policies/replay.hpp"
#include "engine/runtime/engine_access.hpp"
#include "engine/runtime/engine_calibration.hpp"
#include "engine/runtime/scheduler.hpp"
#include "policies/calibration.hpp"
#include "policies/cost_model.hpp"
#include "policies/factory.hpp"
#include "policies/output_lengths.hpp"
#include "policies/shape_cache.hpp"
#include "policies/shape_choice.hpp"
#include "tandem/engine.hpp"
#include "tandem/version.hpp"
#include "kernels/backend.hpp"
#include "tests/support/paths.hpp"
#include "tests/support/tiny_model.hpp"

namespace tandem {
namespace {

// r(k) = 1 + slope·k for k = 0..16.
CostModel linear_costs(double c, double slope) {
  std::vector<double> r;
  for (int k = 0; k <= 16; ++k) r.push_back(1.0 + slope * k);
  return CostModel::from_ratios(c, r);
}

// Runs a policy against a draft whose every token is accepted with probability alpha
// (deterministic pseudo-random stream); returns the k chosen at each step.
std::vector<int32_t> simulate(SpeculationPolicy& p, double alpha, int steps, int32_t k_max = 8, int32_t batch = 1,
                              int32_t* position = nullptr, uint32_t seed = 1) {
  std::vector<int32_t> ks;
  int32_t pos = position ? *position : 20;
  uint32_t x = seed;
  auto uniform = [&] {
    x = x * 1664525u + 1013904223u;
    return (x >> 8) / 16777216.0;
  };
  for (int s = 0; s < steps; ++s) {
    const int32_t k = p.choose_k({k_max, batch, pos});
    ks.push_back(k);
    StepOutcome o;
    o.drafted = k;
    while (o.accepted < k && uniform() < alpha) ++o.accepted;
    p.observe(o);
    pos += o.accepted + 1;
  }
  if (position) *position = pos;
  return ks;
}

int count_on(const std::vector<int32_t>& ks, size_t from = 0, size_t to = SIZE_MAX) {
  const size_t end = std::min(to, ks.size());
  if (from >= end) return 0;
  const auto first = ks.begin() + static_cast<std::ptrdiff_t>(from), last = ks.begin() + static_cast<std::ptrdiff_t>(end);
  return static_cast<int>(std::count_if(first, last, [](int32_t k) { return k > 0; }));
}

AdaptiveConfig cfg(double prior = 0.6) {
  AdaptiveConfig c;
  c.alpha_prior = prior;
  return c;
}

// ---- cost model ------------------------------------------------------------------------

TEST(CostModel, FormulasMatchTheNotes) {
  EXPECT_DOUBLE_EQ(CostModel::expected_tokens(0.0, 4), 1.0);
  EXPECT_DOUBLE_EQ(CostModel::expected_tokens(1.0, 4), 5.0);
  EXPECT_NEAR(CostModel::expected_tokens(0.8, 5), (1 - std::pow(0.8, 6)) / 0.2, 1e-12);
  EXPECT_DOUBLE_EQ(CostModel::expected_tokens(0.7, 0), 1.0);
  // Leviathan's example: α = 0.8, k = 5, c = 0.05, r = 1 → S ≈ 2.95.
  const CostModel flat = linear_costs(0.05, 0.0);
  EXPECT_NEAR(flat.predict_speedup(0.8, 5), 2.95, 0.01);
  // ... and with r = 4 it is below 1.
  std::vector<double> r(9, 4.0);
  r[0] = 1.0;
  EXPECT_LT(CostModel::from_ratios(0.05, r).predict_speedup(0.8, 5), 1.0);
  EXPECT_DOUBLE_EQ(flat.predict_speedup(0.3, 0), 1.0);
  const CostModel m = linear_costs(0.2, 0.1);
  EXPECT_NEAR(m.c(), 0.2, 1e-12);
  EXPECT_NEAR(m.r(3), 1.3, 1e-12);
  EXPECT_NEAR(m.predict_speedup(0.7, 3), CostModel::expected_tokens(0.7, 3) / (3 * 0.2 + 1.3), 1e-12);
  EXPECT_NEAR(m.predict_speedup(0.7, 3, 1, /*draft_free=*/true), CostModel::expected_tokens(0.7, 3) / 1.3, 1e-12);
}

TEST(CostModel, CurvesInterpolateExtrapolateAndModelTheBatch) {
  PassCurve t{1, {1, 2, 4, 8}, {10, 11, 13, 21}};
  EXPECT_DOUBLE_EQ(t.at(1), 10);
  EXPECT_DOUBLE_EQ(t.at(3), 12);
  EXPECT_DOUBLE_EQ(t.at(12), 29);  // last segment: 2 ms per token
  PassCurve down{1, {1, 2}, {10, 9}};
  EXPECT_DOUBLE_EQ(down.at(10), 9);  // never extrapolates downhill
  PassCurve d{1, {1, 2, 4, 8}, {3, 3.5, 4, 6}};
  CostModel m("k", {t}, {d});
  // No batch-4 curve: a pass of 4 sequences × n tokens costs one sequence's 4·n tokens.
  EXPECT_DOUBLE_EQ(m.target_ms(2, 4), t.at(8));
  EXPECT_DOUBLE_EQ(m.target_ms(1, 4), t.at(4));
  EXPECT_DOUBLE_EQ(m.r(1, 4), t.at(8) / t.at(4));
  EXPECT_DOUBLE_EQ(m.c(4), d.at(4) / t.at(4));
  // With a measured batch-4 curve, that one.
  PassCurve t4{4, {1, 2}, {15, 40}};
  CostModel m4("k", {t, t4}, {d});
  EXPECT_DOUBLE_EQ(m4.target_ms(2, 4), 40);
  EXPECT_DOUBLE_EQ(m4.catch_up(8), 6.0 / 10.0);
  EXPECT_EQ(m4.max_measured_n(), 8);
  EXPECT_THROW(CostModel("k", {t4}, {}), std::invalid_argument);  // needs batch 1
}

TEST(CostModel, JsonRoundTrip) {
  PassCurve t{1, {1, 2, 3, 16}, {10.5, 11.25, 12.125, 30}};
  PassCurve t2{2, {1, 2, 3}, {12, 14, 17}};
  PassCurve d{1, {1, 2, 3, 16}, {2.5, 2.75, 3, 8}};
  CostModel m("target=a:1;draft=b:2;backend=cpu", {t, t2}, {d});
  m.context = 32;
  m.reps = 5;
  m.warmup = 1;
  m.created = "2026-01-01T00:00:00Z";
  const CostModel back = CostModel::from_json(m.to_json());
  EXPECT_EQ(back.key(), m.key());
  EXPECT_EQ(back.created, m.created);
  EXPECT_EQ(back.context, 32);
  EXPECT_EQ(back.reps, 5);
  ASSERT_EQ(back.target_curves().size(), 2u);
  for (int b : {1, 2, 5})
    for (int n = 1; n <= 20; ++n) {
      EXPECT_DOUBLE_EQ(back.target_ms(n, b), m.target_ms(n, b));
      EXPECT_DOUBLE_EQ(back.draft_ms(n, b), m.draft_ms(n, b));
    }
  EXPECT_THROW(CostModel::from_json("{"), std::runtime_error);
  EXPECT_THROW(CostModel::from_json("{\"key\":\"x\"}"), std::runtime_error);
  EXPECT_THROW(CostModel::from_json("{\"key\":\"x\",\"target\":[{\"batch\":1,\"n\":[1,2],\"ms\":[1]}]}"),
               std::runtime_error);
  EXPECT_THROW(CostModel::from_json("{\"key\":\"x\",\"target\":[{\"batch\":1,\"n\":[1],\"ms\":[-1]}]}"),
               std::runtime_error);
}

TEST(CostModel, CacheFileKeepsOneModelPerKey) {
  const std::string dir = test::scratch_dir("cost-cache");
  const std::string path = dir + "/sub/cost_models.json";
  EXPECT_EQ(load_cached_cost_model(path, "a"), nullptr);  // no file
  PassCurve t{1, {1, 2}, {10, 12}};
  save_cached_cost_model(path, CostModel("a", {t}, {}));
  PassCurve t2{1, {1, 2}, {20, 30}};
  save_cached_cost_model(path, CostModel("b", {t2}, {}));
  auto a = load_cached_cost_model(path, "a");
  auto b = load_cached_cost_model(path, "b");
  ASSERT_TRUE(a && b);
  EXPECT_DOUBLE_EQ(a->target_ms(2), 12);
  EXPECT_DOUBLE_EQ(b->target_ms(2), 30);
  EXPECT_EQ(load_cached_cost_model(path, "c"), nullptr);
  save_cached_cost_model(path, CostModel("a", {t2}, {}));  // replaces
  EXPECT_DOUBLE_EQ(load_cached_cost_model(path, "a")->target_ms(2), 30);
  std::ofstream(path) << "not json";
  EXPECT_EQ(load_cached_cost_model(path, "a"), nullptr);
  save_cached_cost_model(path, CostModel("a", {t}, {}));  // a damaged file is replaced
  EXPECT_NE(load_cached_cost_model(path, "a"), nullptr);
}

TEST(CostModel, CacheDropsTheEntriesTheFilterRefuses) {
  const std::string path = test::scratch_dir("cost-cache-prune") + "/cost_models.json";
  PassCurve t{1, {1, 2}, {10, 12}};
  for (const char* k : {"old-1", "old-2", "kept"}) save_cached_cost_model(path, CostModel(k, {t}, {}));
  // The entry being saved stays whatever the filter says; the refused others go.
  save_cached_cost_model(path, CostModel("new", {t}, {}), [](const std::string& k) { return k.rfind("old", 0) != 0 && k != "new"; });
  EXPECT_EQ(load_cached_cost_model(path, "old-1"), nullptr);
  EXPECT_EQ(load_cached_cost_model(path, "old-2"), nullptr);
  EXPECT_NE(load_cached_cost_model(path, "kept"), nullptr);
  EXPECT_NE(load_cached_cost_model(path, "new"), nullptr);
}

TEST(CostModel, LiveKeysNeedTheirFilesAsMeasuredAndThisBuild) {
  const std::string dir = test::scratch_dir("cost-keys");
  const std::string f = dir + "/model.gguf";
  std::ofstream(f) << "12345";  // 5 bytes
  const std::string tag = std::string("tandem=") + version_string() + ".t" + std::to_string(kernels::kTimingRevision);
  const std::string live = "target=" + f + ":5;draft=-;backend=cpu (avx2, 2 threads);" + tag;
  EXPECT_TRUE(cost_model_key_is_live(live));
  EXPECT_TRUE(cost_model_key_is_live("target=" + f + ":5;draft=" + f + ":5;backend=cpu;" + tag + ";draft_type=auto"));
  EXPECT_FALSE(cost_model_key_is_live("target=" + f + ":6;draft=-;backend=cpu;" + tag));  // the file changed
  EXPECT_FALSE(cost_model_key_is_live("target=" + dir + "/gone.gguf:5;draft=-;backend=cpu;" + tag));
  EXPECT_FALSE(cost_model_key_is_live("target=" + f + ":5;draft=" + dir + "/gone.gguf:9;backend=cpu;" + tag));
  EXPECT_FALSE(cost_model_key_is_live("target=" + f + ":5;draft=-;backend=cpu;tandem=0.0.1.t1"));  // another build
  EXPECT_TRUE(cost_model_key_is_live("a key of another format"));
  // A draft vocabulary ranked by token ids, or by a counts file that must still be there.
  const std::string both = "target=" + f + ":5;draft=" + f + ":5;backend=cpu;" + tag;
  EXPECT_TRUE(cost_model_key_is_live(both + ";draft_vocab=16384:ids;draft_type=auto"));
  EXPECT_TRUE(cost_model_key_is_live(both + ";draft_vocab=16384:" + f + ":5"));
  EXPECT_FALSE(cost_model_key_is_live(both + ";draft_vocab=16384:" + f + ":6"));
  EXPECT_FALSE(cost_model_key_is_live(both + ";draft_vocab=16384:" + dir + "/gone.counts:5;draft_type=q4_0"));
  // Ours, from a build before keys carried the build: never looked up again.
  EXPECT_FALSE(cost_model_key_is_live("target=" + f + ":5;draft=" + f + ":5;backend=cpu"));
}

// A timer whose passes take what the test says: the freshness check of a cached model.
class ScriptedTimer final : public PassTimer {
 public:
  double ms = 1.0;                // what every pass takes once `first` is used up
  std::vector<double> first;      // the first passes timed, the warm-up included
  std::string key() const override { return "scripted"; }
  bool has_draft() const override { return false; }
  std::vector<std::vector<double>> time_passes(bool, int32_t, std::span<const int32_t> n, int32_t, int32_t reps) override {
    std::vector<std::vector<double>> out(n.size());
    for (auto& v : out)
      for (int32_t r = 0; r < reps; ++r) v.push_back(taken < first.size() ? first[taken++] : ms);
    return out;
  }
  size_t taken = 0;  // of `first`
};

TEST(Calibration, ACachedModelIsKeptUnlessTheMachineReallyChanged) {
  const std::string path = test::scratch_dir("cost-fresh") + "/costs.json";
  CalibrationOptions co;
  co.k_max = 1;
  co.extra_n = {};
  co.reps = 1;
  co.warmup = 0;
  co.cache_path = path;
  auto cached_with = [&](double cached_ms, double now_ms, std::vector<double> first = {}) {
    save_cached_cost_model(path, CostModel("scripted", {PassCurve{1, {1, 2}, {cached_ms, cached_ms * 1.1}}}, {}));
    ScriptedTimer t;
    t.ms = now_ms;
    t.first = std::vector<double>{now_ms};  // the warm-up pass
    t.first.insert(t.first.end(), first.begin(), first.end());
    bool from_cache = false;
    calibrate_cost_model(t, co, &from_cache);
    return from_cache;
  };
  EXPECT_TRUE(cached_with(20.0, 26.0));    // 30% off: within the tolerance (0.35)
  EXPECT_FALSE(cached_with(20.0, 28.0));   // 40% off: measured again
  EXPECT_FALSE(cached_with(20.0, 12.0));   // faster as well
  EXPECT_TRUE(cached_with(0.15, 0.23));    // 53% off, but 0.08 ms: timer noise at this size
  EXPECT_FALSE(cached_with(0.15, 0.40));   // 0.25 ms off
  // One noisy moment (the first median of 3 is off) does not throw the model away; the
  // median of 9 more decides.
  EXPECT_TRUE(cached_with(20.0, 21.0, {40.0, 40.0, 21.0}));
  EXPECT_FALSE(cached_with(20.0, 40.0, {21.0, 40.0, 40.0}));
}

// ---- acceptance estimate ---------------------------------------------------------------

TEST(AcceptanceEstimator, CountsOnlyTriedPositions) {
  AcceptanceEstimator e(0.5, 2.0, 1.0);  // no decay: plain Beta posterior
  e.observe(4, 4);                       // 4 successes
  EXPECT_DOUBLE_EQ(e.trials(), 4);
  e.observe(4, 1);  // 1 success, 1 failure; positions 3, 4 never tried
  EXPECT_DOUBLE_EQ(e.trials(), 6);
  EXPECT_DOUBLE_EQ(e.mean(), (5 + 1.0) / (6 + 2.0));
  e.observe(0, 0);  // an n-gram miss: nothing tried
  EXPECT_DOUBLE_EQ(e.trials(), 6);
  e.fade(0.5);
  EXPECT_DOUBLE_EQ(e.trials(), 3);
  e.reset();
  EXPECT_DOUBLE_EQ(e.mean(), 0.5);
}

TEST(AcceptanceEstimator, ShortDraftsAreNotRejections) {
  // A proposer that only ever finds one token (asked for 8) that is always right: α → 1.
  AcceptanceEstimator e(0.5, 2.0, 0.95);
  for (int i = 0; i < 50; ++i) e.observe(1, 1);
  EXPECT_GT(e.mean(), 0.9);
  // Decay: after a switch to a draft that is always wrong, the estimate follows.
  for (int i = 0; i < 60; ++i) e.observe(3, 0);
  EXPECT_LT(e.mean(), 0.15);
}

// ---- adaptive ---------------------------------------------------------------------------

TEST(AdaptivePolicy, SpeculatesDeeperTheBetterTheDraftAgrees) {
  const CostModel m = linear_costs(0.05, 0.03);
  AdaptivePolicy p(m, cfg());
  const auto good = simulate(p, 0.9, 200);
  EXPECT_GE(count_on(good, 20), 175);
  int32_t k_good = good.back();
  EXPECT_GE(k_good, 4);
  p.reset();
  const auto fair = simulate(p, 0.6, 200);
  EXPECT_GE(count_on(fair, 20), 175);
  EXPECT_LT(fair.back(), k_good);
  // best_k agrees with a brute-force argmax of the formula.
  for (double a : {0.2, 0.5, 0.7, 0.9, 0.99}) {
    double best = 1.0;
    int32_t kb = 0;
    for (int32_t k = 1; k <= 8; ++k)
      if (m.predict_speedup(a, k) > best) best = m.predict_speedup(a, k), kb = k;
    if (best < 1.02) kb = 0;
    EXPECT_EQ(p.best_k(a, 8, 1), kb) << a;
  }
}

TEST(AdaptivePolicy, TurnsOffWhenTheDraftRarelyAgrees) {
  // Catch-up of the draft: 0.3 · 0.03 = 0.009 target steps per missed token, within budget.
  const CostModel m = linear_costs(0.3, 0.03);
  AdaptivePolicy p(m, cfg());
  const auto ks = simulate(p, 0.05, 400);
  EXPECT_LE(count_on(ks, 0, 10), 4) << "learns within a few steps";
  // Off, apart from occasional probes.
  EXPECT_LE(count_on(ks, 10), 12);
  EXPECT_GE(count_on(ks, 10), 1) << "keeps probing";
  EXPECT_TRUE(p.off());
}

TEST(AdaptivePolicy, DoesNotProbeADraftWhoseCatchUpCostsMoreThanTheBudget) {
  // Catch-up: 0.5 · 0.2 = 0.1 target steps per missed token, five times the 2% budget: any
  // probe after L steps off would cost 10% of them.
  const CostModel m = linear_costs(0.5, 0.2);
  AdaptivePolicy p(m, cfg(0.95));
  const auto ks = simulate(p, 0.0, 1000);
  EXPECT_LE(count_on(ks, 0, 10), 3);
  EXPECT_EQ(count_on(ks, 10), 0);
  // Unless a forced probe interval says otherwise.
  AdaptiveConfig forced = cfg(0.95);
  forced.max_probe_interval = 100;
  AdaptivePolicy q(m, forced);
  const auto kq = simulate(q, 0.0, 1000);
  EXPECT_GE(count_on(kq, 10), 8);
  EXPECT_LE(count_on(kq, 10), 11);
}

// Never slower: before its first draft a sequence knows α only from the prior,
// and that draft first pays the catch-up over the whole prompt. The policy starts only when
// that step, were nothing accepted, costs at most start_budget of the tokens still to come.
TEST(AdaptivePolicy, StartsOnlyWhenTheFirstDraftRisksLittleOfWhatIsLeft) {
  // Catch-up over a 40-token prompt: 0.3 · (1 + 0.1 · 39) = 1.47 target steps, plus the
  // step itself: well over 2% of 32 tokens, well under 2% of 2000.
  const CostModel m = linear_costs(0.3, 0.1);
  AdaptivePolicy p(m, cfg(0.9));
  ASSERT_GT(p.best_k(0.9, 4, 1), 0) << "the prior alone predicts a gain";
  EXPECT_EQ(p.choose_k({4, 1, 40, 32}), 0) << "a short output: not worth the prompt pass";
  EXPECT_TRUE(p.off());
  EXPECT_EQ(p.choose_k({4, 1, 41, 31}), 0);
  p.reset();
  const int32_t k = p.choose_k({4, 1, 40, 2000});
  EXPECT_GT(k, 0) << "a long output pays for it";
  // Once the draft has run, the rule is spent: later steps go by α alone, however few are left.
  StepOutcome o;
  o.drafted = k;
  o.accepted = k;
  p.observe(o);
  EXPECT_GT(p.choose_k({4, 1, 40 + k + 1, 8}), 0);
  // No length known (0), no limit (start_budget < 0), or a draft with nothing to catch up
  // (n-gram): the prior decides, as before.
  p.reset();
  EXPECT_GT(p.choose_k({4, 1, 40, 0}), 0);
  AdaptiveConfig any = cfg(0.9);
  any.start_budget = -1.0;
  AdaptivePolicy q(m, any);
  EXPECT_GT(q.choose_k({4, 1, 40, 32}), 0);
  AdaptiveConfig ngram = cfg(0.9);
  ngram.draft_free = true;
  AdaptivePolicy r(m, ngram);
  EXPECT_GT(r.choose_k({4, 1, 40, 32}), 0);
}

// Before the draft runs, the target's top-token probability stands in for α: a sure target
// starts the draft on an output too short for start_budget alone, an unsure one does not,
// and neither before confidence_tokens of them were seen. The start needs the predicted
// gain over what is left to cover the first step's cost plus what it risks.
TEST(AdaptivePolicy, StartsOnTheTargetsConfidenceWhenThePredictedGainCoversTheRisk) {
  // As above: catch-up over 40 tokens 1.47 target steps; at the prior 0.9 k = 4 (first step
  // 1.47 + 3 · 0.3 + 0.4 = 2.77, with the two committed steps 2 · 0.4 more: 3.57), well over
  // 2% of 32 tokens.
  const CostModel m = linear_costs(0.3, 0.1);
  AdaptivePolicy p(m, cfg(0.6));
  ASSERT_TRUE(p.wants_confidence());
  EXPECT_LT(p.confidence(), 0.0) << "nothing seen yet";
  for (int i = 0; i < 3; ++i) {
    p.observe_confidence(0.95);
    EXPECT_EQ(p.choose_k({4, 1, 40 + i, 32 - i}), 0) << "only " << i + 1 << " confidences seen";
  }
  p.observe_confidence(0.95);
  EXPECT_NEAR(p.confidence(), 0.95, 1e-12);
  // α = 0.95: k = 4 predicts (1 − 0.95^5) / 0.05 / (4 · 0.3 + 1.4) = 1.74, so 29 tokens
  // save 29 · (1 − 1 / 1.74) = 12.3 steps: less 2.77, over 3.57.
  const int32_t k = p.choose_k({4, 1, 43, 29});
  EXPECT_EQ(k, 4) << "a sure target: start, k from its confidence";
  EXPECT_FALSE(p.wants_confidence()) << "started: the draft's own acceptance takes over";

  // Unsure (0.3): no k pays, whatever is left.
  AdaptivePolicy q(m, cfg(0.6));
  for (int i = 0; i < 8; ++i) q.observe_confidence(0.3);
  EXPECT_EQ(q.choose_k({4, 1, 48, 1000}), 0);
  // Sure but too little left: 8 tokens save 8 · 0.43 = 3.4 steps, less 2.77, under 3.57.
  AdaptivePolicy r(m, cfg(0.6));
  for (int i = 0; i < 8; ++i) r.observe_confidence(0.95);
  EXPECT_EQ(r.choose_k({4, 1, 48, 8}), 0);
  // The estimate follows the recent tokens: unsure ones after sure ones pull it down.
  for (int i = 0; i < 12; ++i) r.observe_confidence(0.2);
  EXPECT_LT(r.confidence(), 0.35);
  EXPECT_EQ(r.choose_k({4, 1, 60, 29}), 0);
  // Stricter odds, or the rule off, and the same sure target waits.
  AdaptiveConfig strict = cfg(0.6);
  strict.confidence_odds = 4.0;  // 12.3 − 2.77 < 4 · 3.57
  AdaptiveConfig never = cfg(0.6);
  never.confidence_tokens = 0;
  for (const AdaptiveConfig& c : {strict, never}) {
    AdaptivePolicy t(m, c);
    for (int i = 0; i < 8; ++i) t.observe_confidence(0.95);
    EXPECT_EQ(t.choose_k({4, 1, 43, 29}), 0);
  }
  EXPECT_FALSE(AdaptivePolicy(m, never).wants_confidence());
  // Reading it costs an exp over the vocabulary: every plain step for the first
  // 2 · confidence_tokens, then every fourth.
  AdaptivePolicy w(m, cfg(0.6));
  int wanted = 0;
  for (int i = 0; i < 40; ++i) {
    if (w.wants_confidence()) w.observe_confidence(0.3), ++wanted;
    ASSERT_EQ(w.choose_k({4, 1, 40 + i, 100 - i}), 0);
  }
  EXPECT_EQ(wanted, 8 + 8);
  // Values that are not probabilities are ignored.
  AdaptivePolicy u(m, cfg(0.6));
  u.observe_confidence(std::nan(""));
  u.observe_confidence(1.5);
  EXPECT_LT(u.confidence(), 0.0);
  // reset() forgets them.
  p.reset();
  EXPECT_LT(p.confidence(), 0.0);
  EXPECT_TRUE(p.wants_confidence());
}

// The start rule weighs the draft's prompt pass against the output still expected
// (PolicyInput::horizon), not against what max_tokens allows: a sure target whose outputs end
// after a few tokens does not start the draft that the limit alone would have started.
TEST(AdaptivePolicy, StartsOnTheOutputStillExpectedNotOnTheLimit) {
  const CostModel m = linear_costs(0.3, 0.1);
  auto sure = [](AdaptivePolicy& p) {
    for (int i = 0; i < 8; ++i) p.observe_confidence(0.95);
  };
  AdaptivePolicy limit_only(m, cfg(0.6)), expected_long(m, cfg(0.6)), expected_short(m, cfg(0.6));
  for (AdaptivePolicy* p : {&limit_only, &expected_long, &expected_short}) sure(*p);
  EXPECT_EQ(limit_only.choose_k({4, 1, 43, 29}), 4) << "as above: 29 tokens pay for the prompt pass";
  EXPECT_EQ(expected_long.choose_k({4, 1, 43, 29, 29.0}), 4);
  // 3 tokens expected (outputs like this one end soon): 3 · 0.43 saves less than the first step costs.
  EXPECT_EQ(expected_short.choose_k({4, 1, 43, 29, 3.0}), 0);
  // start_budget's share likewise: 2% of 2000 tokens covers the first step, 2% of 20 does not.
  AdaptivePolicy unsure(m, cfg(0.9));
  EXPECT_EQ(unsure.choose_k({4, 1, 40, 2000, 20.0}), 0);
  unsure.reset();
  EXPECT_GT(unsure.choose_k({4, 1, 40, 2000, 1500.0}), 0);
}

TEST(OutputLengths, TheLimitWithoutEvidenceThenWhatFinishedOutputsSay) {
  OutputLengths l;
  EXPECT_EQ(l.expected_left(4, 64), 60.0) << "nothing finished yet: the limit";
  EXPECT_EQ(l.expected_left(64, 64), 0.0);
  EXPECT_EQ(l.expected_left(70, 64), 0.0);
  for (int i = 0; i < 8; ++i) l.add(7, true);  // short outputs that ended themselves
  // Those that ran past 4 had 3 more each; the limit counts as one more output (60).
  EXPECT_DOUBLE_EQ(l.expected_left(4, 64), (60.0 + 8 * 3.0) / 9.0);
  // Past 7 none of them says anything: the limit again.
  EXPECT_EQ(l.expected_left(7, 64), 57.0);
  // An output cut by its limit might have gone on: it counts as running to this one's limit.
  l.add(30, false);
  EXPECT_DOUBLE_EQ(l.expected_left(4, 64), (60.0 + 8 * 3.0 + 60.0) / 10.0);
  // A stopped output longer than this one's limit counts up to that limit.
  l.add(500, true);
  EXPECT_DOUBLE_EQ(l.expected_left(4, 100), (96.0 + 8 * 3.0 + 96.0 + 96.0) / 11.0);
  // Only the last kKept outputs count, oldest first out.
  for (size_t i = 0; i < OutputLengths::kKept; ++i) l.add(1000, true);
  ASSERT_EQ(l.records().size(), OutputLengths::kKept);
  EXPECT_EQ(l.expected_left(4, 64), 60.0);
  l.restore({{5, true}, {6, false}});
  EXPECT_EQ(l.records().size(), 2u);
  l.add(-1, true);  // not a length
  EXPECT_EQ(l.records().size(), 2u);
  l.reset();
  EXPECT_TRUE(l.records().empty());
}

// One rejected token right after starting is not enough to stop on: a sequence tries
// min_trials draft tokens first (the Qwen pair's code prompts drew a rejection first and
// stayed off for good, the catch-up outgrowing the probe budget), and start_budget covers
// those single-token steps too.
TEST(AdaptivePolicy, TriesAFewDraftTokensBeforeTurningOff) {
  // Catch-up 0.5 · 0.2 = 0.1 target steps a token: once off, never probed again.
  const CostModel m = linear_costs(0.5, 0.2);
  ASSERT_EQ(AdaptivePolicy(m, cfg()).best_k(0.6, 4, 1), 0) << "the prior alone predicts no gain";
  AdaptivePolicy p(m, cfg(0.9));
  ASSERT_GT(p.choose_k({4, 1, 20, 0}), 0);
  StepOutcome miss;
  miss.drafted = 1;
  p.observe(miss);  // α: (2 · 0.9) / 3 = 0.6, no gain predicted any more
  ASSERT_EQ(p.best_k(p.alpha(), 4, 1), 0);
  EXPECT_EQ(p.choose_k({4, 1, 21, 0}), 1) << "one rejection: keep trying";
  p.observe(miss);
  EXPECT_EQ(p.choose_k({4, 1, 22, 0}), 1) << "two: keep trying";
  p.observe(miss);
  EXPECT_EQ(p.choose_k({4, 1, 23, 0}), 0) << "three draft tokens tried, all rejected: off";
  EXPECT_TRUE(p.off());
  // A draft that agrees then stays on as α recovers.
  p.reset();
  ASSERT_GT(p.choose_k({4, 1, 20, 0}), 0);
  p.observe(miss);
  ASSERT_EQ(p.choose_k({4, 1, 21, 0}), 1);
  StepOutcome hit;
  hit.drafted = hit.accepted = 1;
  for (int i = 0; i < 4; ++i) p.observe(hit), p.choose_k({4, 1, 22 + 2 * i, 0});
  EXPECT_GT(p.choose_k({4, 1, 30, 0}), 0);
  // The budget counts the committed steps: a start that fits alone but not with them waits.
  // First step (k = 2 at the prior 0.9): catch-up over 10 tokens 0.5 · (1 + 0.2 · 9) = 1.4,
  // the second draft step 0.5, r(2) − 1 = 0.4: 2.3; the two more single-token steps,
  // 2 · (0.5 + 0.2) = 1.4: 3.7 in all.
  AdaptivePolicy q(m, cfg(0.9));
  EXPECT_EQ(q.choose_k({4, 1, 10, 120}), 0) << "3.7 > 2% of 120";
  q.reset();
  EXPECT_GT(q.choose_k({4, 1, 10, 200}), 0) << "3.7 <= 2% of 200";
  AdaptiveConfig one = cfg(0.9);
  one.min_trials = 1;
  AdaptivePolicy r(m, one);
  EXPECT_GT(r.choose_k({4, 1, 10, 120}), 0) << "2.3 <= 2% of 120 without the commitment";
}

// Step timings that exceed the cost model's predictions for speculative steps (sampling,
// bookkeeping, longer contexts) turn an optimistic model's "on" into "off"; timings that
// match it change nothing.
TEST(AdaptivePolicy, MeasuredStepTimesCorrectAnOptimisticCostModel) {
  // As calibrated on a machine (absolute milliseconds, T(1) = 1 ms): at α = 0.9, k = 3
  // predicts 1.46; 1.8 times dearer speculative steps make every k lose.
  const CostModel ratios = linear_costs(0.3, 0.15);
  const CostModel costs("test-machine", ratios.target_curves(), ratios.draft_curves());
  ASSERT_TRUE(costs.absolute());
  AdaptiveConfig c;
  c.alpha_prior = 0.9;
  auto run = [&](double spec_slowdown) {
    AdaptivePolicy p(costs, c);
    int32_t pos = 20, on = 0;
    uint32_t x = 1;
    auto uniform = [&] {
      x = x * 1664525u + 1013904223u;
      return (x >> 8) / 16777216.0;
    };
    for (int s = 0; s < 400; ++s) {
      const int32_t k = p.choose_k({4, 1, pos});
      StepOutcome o;
      o.drafted = k;
      while (o.accepted < k && uniform() < 0.9) ++o.accepted;
      o.target_tokens = k + 1;
      // What the model predicts, times the slowdown for speculative steps.
      const double slow = k > 0 ? spec_slowdown : 1.0;
      o.target_ms = costs.target_ms(k + 1) * slow;
      o.draft_ms = k * costs.draft_ms(1) * slow;
      p.observe(o);
      pos += o.accepted + 1;
      if (s >= 300) on += k > 0;
    }
    return std::make_pair(on, p.overhead());
  };
  const auto [on_exact, oh_exact] = run(1.0);
  EXPECT_GE(on_exact, 95);
  EXPECT_NEAR(oh_exact, 1.0, 1e-9);
  const auto [on_slow, oh_slow] = run(1.8);
  EXPECT_GT(oh_slow, 1.5);
  EXPECT_LT(on_slow, 10);  // off, apart from probes
  // The engine shares one tracker between sequences: a new request starts from what earlier
  // ones measured (and a new sequence does not wipe it).
  auto shared = std::make_shared<OverheadTracker>();
  for (int i = 0; i < 20; ++i) shared->add(false, 1.8);
  AdaptivePolicy fresh(costs, c, shared);
  EXPECT_GT(fresh.overhead(), 1.5);
  EXPECT_EQ(fresh.choose_k({4, 1, 20}), 0);
  fresh.reset();
  EXPECT_GT(fresh.overhead(), 1.5);
  // A model given as bare ratios has no time scale: without timed plain steps, no correction.
  AdaptivePolicy bare(ratios, c);
  StepOutcome o;
  o.drafted = 3, o.accepted = 3, o.target_tokens = 4, o.target_ms = 50.0, o.draft_ms = 30.0;
  for (int i = 0; i < 20; ++i) bare.observe(o);
  EXPECT_DOUBLE_EQ(bare.overhead(), 1.0);
}

TEST(AdaptivePolicy, TurnsOffForAnExpensiveDraftOrSteepVerificationWithoutProbing) {
  // c = 1.2: even a draft that is always right cannot pay.
  const CostModel dear = linear_costs(1.2, 0.05);
  AdaptivePolicy p(dear, cfg(0.95));
  EXPECT_EQ(count_on(simulate(p, 1.0, 300)), 0);
  // r(k) = 1 + k: verification costs as much as decoding token by token.
  const CostModel steep = linear_costs(0.02, 1.0);
  AdaptivePolicy q(steep, cfg(0.95));
  EXPECT_EQ(count_on(simulate(q, 1.0, 300)), 0);
}

TEST(AdaptivePolicy, TurnsBackOnWhenTheDraftStartsAgreeing) {
  // A cheap catch-up (0.002 target steps per missed token): probing goes on even after the
  // failed probes have cut the budget to its floor (an eighth of 2%).
  const CostModel m = linear_costs(0.1, 0.02);
  AdaptivePolicy p(m, cfg());
  int32_t pos = 20;
  const auto bad = simulate(p, 0.0, 150, 8, 1, &pos);
  ASSERT_TRUE(p.off());
  const auto good = simulate(p, 0.95, 400, 8, 1, &pos, 7);
  // A probe finds the draft agreeing and speculation stays on from then on.
  size_t first_on = 0;
  while (first_on < good.size() && good[first_on] == 0) ++first_on;
  ASSERT_LT(first_on, good.size()) << "never probed again";
  EXPECT_GE(count_on(good, first_on), static_cast<int>(good.size() - first_on) - 3);
  EXPECT_FALSE(p.off());
}

TEST(AdaptivePolicy, ProbingStaysWithinItsBudget) {
  // Probes after L off steps cost catch_up(L) + (k − 1)·c + r(k) − 1 target steps.
  const CostModel m = linear_costs(0.2, 0.02);
  AdaptiveConfig c = cfg();
  AdaptivePolicy p(m, c);
  const int steps = 5000;
  int32_t pos = 20, last_draft = 0;
  double cost = 0;
  int probes = 0;
  for (int s = 0; s < steps; ++s) {
    const int32_t k = p.choose_k({8, 1, pos});
    StepOutcome o;
    o.drafted = k;  // always rejected
    p.observe(o);
    if (k > 0) {
      if (s >= 10) {
        cost += m.catch_up(pos - last_draft) + (k - 1) * m.c() + m.r(k) - 1;
        ++probes;
      }
      last_draft = pos;
    }
    pos += 1;
  }
  EXPECT_LT(cost / steps, c.probe_budget);
  EXPECT_GE(probes, 3) << "probing continues, ever more rarely";
}

TEST(AdaptivePolicy, IsNotFooledByShortDrafts) {
  // n-gram-like proposer: free, usually finds one token or none, and what it finds is right.
  const CostModel m = linear_costs(0.3, 0.05);
  AdaptiveConfig c = cfg(0.5);
  c.draft_free = true;
  AdaptivePolicy p(m, c);
  int32_t pos = 10;
  for (int s = 0; s < 300; ++s) {
    const int32_t k = p.choose_k({8, 1, pos});
    StepOutcome o;
    o.drafted = k > 0 && s % 3 == 0 ? 1 : 0;  // a miss two steps in three
    o.accepted = o.drafted;
    p.observe(o);
    pos += o.accepted + 1;
  }
  EXPECT_FALSE(p.off());
  EXPECT_GT(p.alpha(), 0.85);
}

// goodput alone is the adaptive policy; in a batch its choice is a wish that the step
// budget (policies/step_budget.hpp, test_step_budget) may cut, and it keeps its books by what
// was granted: a draft that never ran read nothing, a probe that never ran spent no budget.
TEST(GoodputPolicy, AloneItIsAdaptiveInABatchItsDraftsAreGranted) {
  const CostModel m = linear_costs(0.2, 0.02);
  AdaptiveConfig c = cfg(0.8);
  c.batch_aware = true;
  AdaptivePolicy goodput(m, c);
  AdaptivePolicy adaptive(m, cfg(0.8));
  EXPECT_EQ(goodput.name(), "goodput");
  EXPECT_EQ(simulate(goodput, 0.8, 60), simulate(adaptive, 0.8, 60));
  EXPECT_FALSE(adaptive.budget_alpha().has_value());
  const double alpha = goodput.alpha();
  EXPECT_GT(goodput.choose_k({8, 4, 500}), 0);
  ASSERT_TRUE(goodput.budget_alpha().has_value());
  EXPECT_NEAR(*goodput.budget_alpha(), alpha, 1e-12) << "the acceptance it chose with";

  // Always rejected: it turns off, then probes. A probe the budget refuses costs nothing, so
  // the policy asks again at the next step rather than saving up for another interval.
  AdaptivePolicy p(m, c);
  int32_t pos = 20;
  int denied = 0, asked_again = 0;
  bool last_denied = false;
  for (int s = 0; s < 3000; ++s) {
    const int32_t k = p.choose_k({8, 1, pos});
    if (k > 0 && last_denied) ++asked_again;
    last_denied = false;
    if (k > 0 && p.off() && denied < 5) {  // a probe: refused
      ASSERT_TRUE(p.budget_alpha().has_value());
      EXPECT_NEAR(*p.budget_alpha(), c.alpha_prior, 1e-12) << "a probe hopes for the prior";
      p.granted(0);
      ++denied;
      last_denied = true;
      p.observe(StepOutcome{});
    } else {
      StepOutcome o;
      o.drafted = k;
      p.observe(o);
    }
    pos += 1;
  }
  EXPECT_EQ(denied, 5);
  EXPECT_EQ(asked_again, 5);
}

// ---- factory -----------------------------------------------------------------------------

TEST(PolicyFactory, NamesOptionsAndDefaults) {
  for (const auto& n : policy_names()) EXPECT_TRUE(is_policy_name(n));
  EXPECT_TRUE(is_policy_name(""));
  EXPECT_FALSE(is_policy_name("greedy"));
  SpeculativeOptions so;
  so.draft_max = 5;
  EXPECT_EQ(make_policy(so, nullptr)->name(), "fixed");
  EXPECT_EQ(make_policy(so, nullptr)->choose_k({5, 1, 0}), 5);
  so.policy = "confidence";
  EXPECT_EQ(make_policy(so, nullptr)->choose_k({5, 1, 0}), 5);
  EXPECT_FLOAT_EQ(effective_options(so).draft_p_min, 0.5f);
  so.draft_p_min = 0.2f;
  EXPECT_FLOAT_EQ(effective_options(so).draft_p_min, 0.2f);
  so.policy = "fixed";
  so.draft_p_min = 0.0f;
  EXPECT_FLOAT_EQ(effective_options(so).draft_p_min, 0.0f);
  so.policy = "bogus";
  EXPECT_THROW(make_policy(so, nullptr), std::invalid_argument);
  // The prior decides the first step: pessimistic → off, optimistic → on.
  const CostModel m = linear_costs(0.1, 0.05);
  so.policy = "adaptive";
  so.alpha_prior = 0.1f;
  EXPECT_EQ(make_policy(so, &m)->choose_k({8, 1, 10}), 0);
  so.alpha_prior = 0.9f;
  EXPECT_GT(make_policy(so, &m)->choose_k({8, 1, 10}), 0);
  so.policy = "goodput";
  EXPECT_EQ(make_policy(so, &m)->name(), "goodput");
  EXPECT_TRUE(policy_uses_cost_model("goodput"));
  EXPECT_FALSE(policy_uses_cost_model("confidence"));
}

// ---- through the engine -------------------------------------------------------------------

const test::TinyPair& fixture() {
  static const test::TinyPair f = [] {
    test::TinyModelSpec t;
    t.arch = "qwen2";
    t.tied_embeddings = false;
    t.seed = 3;
    return test::write_tiny_pair(test::scratch_dir("policies-models"), t);
  }();
  return f;
}

std::unique_ptr<Engine> load(const std::string& target, const std::string& draft, const std::string& device = "auto") {
  LoadOptions o;
  o.model_path = target;
  o.draft_model_path = draft;
  o.threads = 1;
  o.context = 256;
  o.device = device;
  return Engine::load(o);
}

GenerateOptions greedy(int n, const std::string& policy, int k = 6) {
  GenerateOptions g;
  g.max_tokens = n;
  g.sampling.temperature = 0.0f;
  g.ignore_eos = true;
  g.speculative.mode = DraftMode::Model;
  g.speculative.draft_max = k;
  g.speculative.policy = policy;
  return g;
}

TEST(PoliciesInEngine, OutputIsTheTargetsAndAFarDraftIsTurnedOff) {
  const auto& fx = fixture();
  const std::vector<int32_t> prompt = {5, 17, 33, 9, 120, 44, 7, 250};
  for (const std::string& draft : {fx.close_draft, fx.far_draft}) {
    auto e = load(fx.target, draft);
    e->set_cost_model(std::make_shared<CostModel>(linear_costs(0.1, 0.05)));
    GenerateOptions plain = greedy(48, "fixed");
    plain.speculative.mode = DraftMode::None;
    const auto ref = e->generate_tokens(prompt, plain);
    for (const std::string& pol : policy_names()) {
      const auto r = e->generate_tokens(prompt, greedy(48, pol));
      ASSERT_EQ(r.tokens, ref.tokens) << draft << " " << pol;
      int64_t steps = 0;
      for (int64_t s : r.speculative.steps_per_k) steps += s;
      EXPECT_GT(steps, 0) << pol;
      if (pol == "adaptive" && draft == fx.far_draft) {
        ASSERT_FALSE(r.speculative.steps_per_k.empty());
        EXPECT_GT(r.speculative.steps_per_k[0], steps / 2) << "a far draft should be turned off";
      }
      if (pol == "fixed") {  // k = 0 only for the last step, which has no token budget left to draft
        EXPECT_LE(r.speculative.steps_per_k.size() > 0 ? r.speculative.steps_per_k[0] : 0, 1);
      }
    }
  }
  auto e = load(fx.target, fx.far_draft);
  GenerateOptions bad = greedy(8, "bogus");
  EXPECT_THROW(e->generate_tokens(prompt, bad), std::invalid_argument);
}

// The step trace (GenerateOptions::record_steps) is what the counters sum, and a recorded
// fixed-k run replays to itself (policies/replay.hpp).
TEST(PoliciesInEngine, RecordedStepsAddUpAndReplay) {
  const auto& fx = fixture();
  const std::vector<int32_t> prompt = {5, 17, 33, 9, 120, 44, 7, 250};
  auto e = load(fx.target, fx.close_draft);
  GenerateOptions g = greedy(40, "fixed", 4);
  g.speculative.lookup = false;  // replay models the draft model's steps alone
  const auto unrecorded = e->generate_tokens(prompt, g);
  EXPECT_TRUE(unrecorded.speculative.steps.empty());
  g.record_steps = true;
  const auto r = e->generate_tokens(prompt, g);
  EXPECT_EQ(r.tokens, unrecorded.tokens);
  const auto& m = r.speculative;
  int64_t drafts = 0, drafted = 0, accepted = 0, tokens = 1;
  for (const SpeculativeStep& s : m.steps) {
    drafts += s.drafted > 0;
    drafted += s.drafted;
    accepted += s.accepted;
    tokens += s.accepted + 1;
  }
  EXPECT_EQ(drafts, m.drafts);
  EXPECT_EQ(drafted, m.drafted_tokens);
  EXPECT_EQ(accepted, m.accepted_tokens);
  EXPECT_EQ(tokens, static_cast<int64_t>(r.tokens.size()));
  EXPECT_GT(accepted, 0);
  const auto trace = AgreementTrace::from_steps(m.steps, static_cast<int32_t>(r.tokens.size()),
                                                static_cast<int32_t>(prompt.size()));
  FixedPolicy fixed;
  const auto replayed = replay(fixed, trace, linear_costs(0.1, 0.05), 4, static_cast<int32_t>(r.tokens.size()));
  EXPECT_EQ(replayed.steps_per_k, m.steps_per_k);
  EXPECT_EQ(replayed.unknown, 0);
}

// Never slower: a policy that is off from the start (a draft too dear to pay
// even when always right) leaves the draft model unfed: no prompt pass, no forward at all,
// alone and in the scheduler's batches. Output is the target's either way; a cheap draft
// still gets its prompt pass and speculates.
TEST(PoliciesInEngine, ADraftThePolicyNeverAsksForNeverReadsThePrompt) {
  const auto& fx = fixture();
  const std::vector<int32_t> prompt = {5, 17, 33, 9, 120, 44, 7, 250};
  auto e = load(fx.target, fx.close_draft);
  GenerateOptions plain = greedy(40, "fixed");
  plain.speculative.mode = DraftMode::None;
  const auto ref = e->generate_tokens(prompt, plain);
  for (const char* pol : {"adaptive", "goodput"}) {
    e->set_cost_model(std::make_shared<CostModel>(linear_costs(2.0, 0.5)));  // never pays
    const auto off = e->generate_tokens(prompt, greedy(40, pol));
    EXPECT_EQ(off.tokens, ref.tokens) << pol;
    EXPECT_EQ(off.speculative.draft_prefill_tokens, 0) << pol << ": the draft read the prompt although never asked for";
    EXPECT_EQ(off.speculative.draft_forwards, 0) << pol;
    EXPECT_EQ(off.speculative.drafted_tokens, 0) << pol;
    e->set_cost_model(std::make_shared<CostModel>(linear_costs(0.05, 0.02)));  // pays
    const auto on = e->generate_tokens(prompt, greedy(40, pol));
    EXPECT_EQ(on.tokens, ref.tokens) << pol;
    EXPECT_GE(on.speculative.draft_prefill_tokens, static_cast<int64_t>(prompt.size())) << pol;
    EXPECT_GT(on.speculative.draft_forwards, 0) << pol;
    EXPECT_GT(on.speculative.accepted_tokens, 0) << pol;
  }
  // Costs that pay once the draft runs, but not for its prompt pass on a short output: the
  // draft stays unfed (start_budget), unless the request lifts the limit.
  for (const char* pol : {"adaptive", "goodput"}) {
    e->set_cost_model(std::make_shared<CostModel>(linear_costs(0.3, 0.3)));
    GenerateOptions shorter = greedy(12, pol);
    shorter.speculative.alpha_prior = 0.9f;
    const auto off = e->generate_tokens(prompt, shorter);
    EXPECT_EQ(off.speculative.draft_prefill_tokens, 0) << pol << ": a short output paid the draft's prompt pass";
    shorter.speculative.start_budget = -1.0f;
    const auto on = e->generate_tokens(prompt, shorter);
    EXPECT_GT(on.speculative.draft_prefill_tokens, 0) << pol;
    EXPECT_EQ(on.tokens, off.tokens) << pol;
  }
  // In the scheduler's batches too.
  e->set_cost_model(std::make_shared<CostModel>(linear_costs(2.0, 0.5)));
  Scheduler s(*e, SchedulerOptions{});
  std::promise<GenerateResult> done;
  ServeRequest req;
  req.prompt = prompt;
  req.opts = greedy(40, "goodput");
  req.on_text = [](const StreamEvent&) { return true; };
  req.on_done = [&](const GenerateResult& r, const std::string&) { done.set_value(r); };
  ASSERT_EQ(s.submit(std::move(req)).status, SubmitStatus::Ok);
  const GenerateResult batched = done.get_future().get();
  EXPECT_EQ(batched.tokens, ref.tokens);
  EXPECT_EQ(batched.speculative.draft_prefill_tokens, 0);
  EXPECT_EQ(s.stats().draft_prefill_tokens_total, 0);
}

// A waiting policy starts the draft on the target's confidence (AdaptivePolicy: an output
// too short for start_budget alone, but a sure target) on the CUDA backend as on the CPU:
// there the confidence is read on the device with the verdict. The same costs and the same
// tokens give the same steps on both; an unsure target does not start (a probe at most).
TEST(PoliciesInEngine, TheTargetsConfidenceStartsTheDraftOnTheCudaBackendAsOnTheCpu) {
  const std::vector<int32_t> prompt = {5, 17, 33, 9, 120, 44, 7, 250};
  int64_t sure_drafted[2] = {0, 0};  // adaptive, goodput
  for (const float scale : {3.0f, 0.0f}) {  // a sure target (top probability ~0.8), an unsure one (~0.04)
    test::TinyModelSpec t;
    t.arch = "qwen2";
    t.tied_embeddings = false;
    t.seed = 3;
    t.weight_scale = scale;
    const auto f = test::write_tiny_pair(test::scratch_dir("policies-sure-" + std::to_string(scale > 0)), t);
    for (const char* pol : {"adaptive", "goodput"}) {
      std::vector<GenerateResult> by;
      for (const char* device : {"cpu", "cuda-emulated"}) {
        auto e = load(f.target, f.close_draft, device);
        e->set_cost_model(std::make_shared<CostModel>(linear_costs(0.1, 0.05)));
        GenerateOptions g = greedy(24, pol);
        g.record_steps = true;
        by.push_back(e->generate_tokens(prompt, g));
      }
      const std::string what = std::string(pol) + (scale > 0 ? ", sure target" : ", unsure target");
      const SpeculativeMetrics &cpu = by[0].speculative, &cuda = by[1].speculative;
      ASSERT_EQ(by[1].tokens, by[0].tokens) << what;
      if (scale > 0) {
        // Not at once: after the confidences it waits for.
        ASSERT_GE(cpu.steps.size(), 3u) << what;
        EXPECT_EQ(cpu.steps[0].drafted, 0) << what;
        EXPECT_GT(cpu.drafted_tokens, 0) << what << ": started on the target's confidence";
        sure_drafted[pol[0] == 'g'] = cpu.drafted_tokens;
      } else {
        // The same costs, no confidence to start on: at most a probe.
        EXPECT_LT(4 * cpu.drafted_tokens, sure_drafted[pol[0] == 'g']) << what;
      }
      EXPECT_GT(cuda.device_verified_steps, 0) << what;
      ASSERT_EQ(cuda.steps.size(), cpu.steps.size()) << what;
      for (size_t i = 0; i < cpu.steps.size(); ++i) {
        EXPECT_EQ(cuda.steps[i].drafted, cpu.steps[i].drafted) << what << ", step " << i;
        EXPECT_EQ(cuda.steps[i].accepted, cpu.steps[i].accepted) << what << ", step " << i;
      }
    }
  }
}

// Prompt lookup ahead of the draft model (SpeculativeOptions::lookup): the output stays the
// target's, alone and in the scheduler's batches; its steps are counted apart and in the
// totals; off, no step is lookup's.
TEST(PoliciesInEngine, PromptLookupAheadOfTheDraftKeepsTheOutput) {
  const auto& fx = fixture();
  // Repeats, so that the last tokens keep occurring earlier.
  const std::vector<int32_t> prompt = {5, 17, 33, 9, 5, 17, 33, 9, 5, 17, 33, 9, 120, 44};
  auto e = load(fx.target, fx.far_draft);
  GenerateOptions plain = greedy(48, "fixed");
  plain.speculative.mode = DraftMode::None;
  const auto ref = e->generate_tokens(prompt, plain);
  for (const char* pol : {"fixed", "goodput"}) {
    GenerateOptions g = greedy(48, pol, 4);
    g.speculative.start_budget = -1.0f;
    g.speculative.lookup = true;
    g.speculative.lookup_min = 1;
    const auto on = e->generate_tokens(prompt, g);
    EXPECT_EQ(on.tokens, ref.tokens) << pol;
    const SpeculativeMetrics& m = on.speculative;
    if (std::string(pol) == "fixed") {
      EXPECT_GT(m.lookup_steps, 0);
      EXPECT_GT(m.lookup_accepted_tokens, 0);
    }
    EXPECT_LE(m.lookup_steps, m.drafts);
    EXPECT_LE(m.lookup_drafted_tokens, m.drafted_tokens);
    EXPECT_LE(m.lookup_accepted_tokens, std::min(m.lookup_drafted_tokens, m.accepted_tokens));
    EXPECT_LE(m.lookup_drafted_tokens, 4 * m.lookup_steps) << "lookup drafted past draft_max";
    g.speculative.lookup = false;
    const auto off = e->generate_tokens(prompt, g);
    EXPECT_EQ(off.tokens, ref.tokens) << pol;
    EXPECT_EQ(off.speculative.lookup_steps, 0) << pol;
  }
  GenerateOptions bad = greedy(8, "fixed", 4);
  bad.speculative.lookup_min = 0;
  EXPECT_THROW(e->generate_tokens(prompt, bad), std::invalid_argument);
  // In the scheduler's batches: two sequences, one with lookup, one without.
  Scheduler s(*e, SchedulerOptions{});
  std::promise<GenerateResult> done[2];
  for (int i = 0; i < 2; ++i) {
    ServeRequest req;
    req.prompt = prompt;
    req.opts = greedy(48, "fixed", 4);
    req.opts.speculative.lookup = i == 0;
    req.opts.speculative.lookup_min = 1;
    req.on_text = [](const StreamEvent&) { return true; };
    req.on_done = [&done, i](const GenerateResult& r, const std::string&) { done[i].set_value(r); };
    ASSERT_EQ(s.submit(std::move(req)).status, SubmitStatus::Ok);
  }
  const GenerateResult with = done[0].get_future().get(), without = done[1].get_future().get();
  EXPECT_EQ(with.tokens, ref.tokens);
  EXPECT_EQ(without.tokens, ref.tokens);
  EXPECT_GT(with.speculative.lookup_steps, 0);
  EXPECT_EQ(without.speculative.lookup_steps, 0);
}

TEST(PoliciesInEngine, CalibrationMeasuresCachesAndReloads) {
  const auto& fx = fixture();
  auto e = load(fx.target, fx.close_draft);
  const std::vector<int32_t> n = {1, 3};
  const auto ms = e->time_forward_passes(false, 2, n, 8, 3);
  ASSERT_EQ(ms.size(), 2u);
  for (const auto& v : ms) {
    ASSERT_EQ(v.size(), 3u);
    for (double x : v) EXPECT_GT(x, 0.0);
  }
  EXPECT_THROW(e->time_forward_passes(false, 64, n, 200, 1), std::invalid_argument);  // does not fit
  auto plain = load(fx.target, "");
  EXPECT_THROW(plain->time_forward_passes(true, 1, n, 0, 1), std::invalid_argument);

  const std::string cache = test::scratch_dir("policies-calib") + "/cost.json";
  CalibrationOptions co;
  co.k_max = 3;
  co.extra_n = {8};
  co.batches = {1, 2};
  co.reps = 2;
  co.context = 8;
  co.cache_path = cache;
  double last = 0;
  co.progress = [&](double f) { last = f; };
  // Entries nothing can look up any more are dropped when the new model is saved: one for a
  // model file that is gone, one of another build; a key of another format stays.
  {
    PassCurve t{1, {1, 2}, {10, 12}};
    const std::string here = cost_model_key(*e);
    const std::string gone = "target=" + test::scratch_dir("policies-calib-gone") + "/x.gguf:7;draft=-;backend=cpu;" +
                             here.substr(here.find("tandem="));
    std::string other_build = here;
    other_build.replace(other_build.find("tandem="), 7, "tandem=0.0.0-old.t0;was=");
    for (const std::string& k : {gone, other_build, std::string("foreign")}) save_cached_cost_model(cache, CostModel(k, {t}, {}));
    ASSERT_NE(load_cached_cost_model(cache, gone), nullptr);
    ASSERT_NE(load_cached_cost_model(cache, other_build), nullptr);
  }
  bool from_cache = true;
  const auto m = calibrate_cost_model(*e, co, &from_cache);
  EXPECT_FALSE(from_cache);
  {
    const std::string here = cost_model_key(*e);
    EXPECT_NE(load_cached_cost_model(cache, here), nullptr);
    EXPECT_NE(load_cached_cost_model(cache, "foreign"), nullptr);
    std::ifstream in(cache);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_EQ(text.find("x.gguf"), std::string::npos);
    EXPECT_EQ(text.find("0.0.0-old"), std::string::npos);
  }
  EXPECT_DOUBLE_EQ(last, 1.0);
  EXPECT_EQ(m->key(), cost_model_key(*e));
  EXPECT_TRUE(m->has_draft());
  EXPECT_EQ(m->max_measured_n(), 8);
  EXPECT_EQ(m->target_curves().size(), 2u);
  EXPECT_GT(m->c(), 0.0);
  for (int k = 0; k <= 3; ++k) EXPECT_GT(m->r(k), 0.0);
  co.stale_tolerance = 0.0;  // tiny models time too noisily for the freshness check
  const auto again = calibrate_cost_model(*e, co, &from_cache);
  EXPECT_TRUE(from_cache);
  EXPECT_DOUBLE_EQ(again->target_ms(3), m->target_ms(3));
  // A cached model whose one-token passes are far from what they take now (measured on
  // another machine, or under load) is measured again.
  {
    auto scaled = [](std::vector<PassCurve> cs) {
      for (PassCurve& c : cs)
        for (double& ms : c.ms) ms *= 1000.0;
      return cs;
    };
    save_cached_cost_model(cache, CostModel(m->key(), scaled(m->target_curves()), scaled(m->draft_curves())));
    co.stale_tolerance = 0.35;
    const auto fresh = calibrate_cost_model(*e, co, &from_cache);
    EXPECT_FALSE(from_cache);
    EXPECT_LT(fresh->target_ms(1), 100.0 * m->target_ms(1));
    co.stale_tolerance = 0.0;
  }
  co.k_max = 9;  // needs n = 10, which the cache lacks: measured again
  calibrate_cost_model(*e, co, &from_cache);
  EXPECT_FALSE(from_cache);
  e->set_cost_model(m);
  EXPECT_EQ(e->cost_model(), m);
}

// A calibration cheap enough for a test, cached in `cache`.
CalibrationOptions quick_calibration(const std::string& cache) {
  CalibrationOptions co;
  co.k_max = 3;
  co.reps = 1;
  co.context = 8;
  co.stale_tolerance = 0.0;
  co.cache_path = cache;
  return co;
}

// What an engine's ShapeChoice learned (trees against chains) is saved beside its cost model
// and taken up by the next engine of the same models that installs the cost model from that
// cache: a new process carries on instead of trying trees and chains again.
TEST(PoliciesInEngine, TreesAgainstChainsCarryOnInTheNextEngine) {
  const auto& fx = fixture();
  const std::string cache = test::scratch_dir("policies-shapes") + "/cost.json";
  const CalibrationOptions co = quick_calibration(cache);
  auto e = load(fx.target, fx.close_draft);
  calibrate_and_install(*e, co);
  ShapeChoice& shapes = *EngineAccess::policy_costs(*e).shapes;
  save_shape_choice(*e, cache);  // nothing learned: nothing written
  EXPECT_FALSE(load_cached_shape_choice(cache, cost_model_key(*e)));
  EXPECT_TRUE(shapes.prefer_tree());
  shapes.observe(true, 0, 50.0);  // trees lose here
  EXPECT_FALSE(shapes.prefer_tree());
  shapes.observe(false, 3, 20.0);
  for (int i = 0; i < 5; ++i) EXPECT_FALSE(shapes.prefer_tree());
  save_shape_choice(*e, cache);
  const RateChoice::State learned = shapes.state();

  auto next = load(fx.target, fx.close_draft);
  EXPECT_TRUE(EngineAccess::policy_costs(*next).shapes->prefer_tree()) << "a new engine with no cost model starts afresh";
  EXPECT_TRUE(calibrate_and_install(*next, co)) << "the cost model comes from the cache";
  ShapeChoice& carried = *EngineAccess::policy_costs(*next).shapes;
  EXPECT_TRUE(carried.state() == learned);
  int chains = 0;
  while (!carried.prefer_tree() && chains < 100) ++chains;
  EXPECT_EQ(chains, RateChoice::kRetryAfter - 1 - learned.passed) << "the tree is retried when the last engine would have";
  // The cost model's own entry is untouched by the shapes', and a damaged shapes entry is
  // ignored.
  EXPECT_NE(load_cached_cost_model(cache, cost_model_key(*e)), nullptr);
  put_cache_entry(cache, "shapes", cost_model_key(*e), boost::json::value("damaged"));
  EXPECT_FALSE(restore_shape_choice(*next, cache));
  EXPECT_NE(load_cached_cost_model(cache, cost_model_key(*e)), nullptr);
}

// The engine records each finished output's length (not a cancelled one's), and the next
// engine on the same models starts from them through the cache file.
TEST(PoliciesInEngine, OutputLengthsAreRecordedAndCarryOnInTheNextEngine) {
  const auto& fx = fixture();
  const std::string cache = test::scratch_dir("policies-lengths") + "/cost.json";
  const CalibrationOptions co = quick_calibration(cache);
  auto e = load(fx.target, fx.close_draft);
  calibrate_and_install(*e, co);
  OutputLengths& lengths = *EngineAccess::policy_costs(*e).lengths;
  save_output_lengths(*e, cache);  // nothing finished: nothing written
  EXPECT_FALSE(load_cached_output_lengths(cache, cost_model_key(*e)));
  GenerateOptions g;
  g.max_tokens = 6;
  g.sampling.temperature = 0.0f;
  g.ignore_eos = true;
  g.speculative.mode = DraftMode::Model;
  g.speculative.policy = "goodput";
  (void)e->generate("Once upon a time", g);
  g.max_tokens = 9;
  (void)e->generate("Once upon a time", g);
  ASSERT_EQ(lengths.records().size(), 2u);
  EXPECT_EQ(lengths.records()[0].generated, 6);
  EXPECT_FALSE(lengths.records()[0].stopped) << "cut by its limit";
  EXPECT_EQ(lengths.records()[1].generated, 9);
  // A cancelled output is not a length.
  (void)e->generate("Once upon a time", g, [](std::string_view, int32_t) { return false; });
  EXPECT_EQ(lengths.records().size(), 2u);
  save_output_lengths(*e, cache);

  auto next = load(fx.target, fx.close_draft);
  EXPECT_TRUE(EngineAccess::policy_costs(*next).lengths->records().empty());
  EXPECT_TRUE(calibrate_and_install(*next, co));
  const auto carried = EngineAccess::policy_costs(*next).lengths->records();
  ASSERT_EQ(carried.size(), 2u);
  EXPECT_EQ(carried[1].generated, 9);
  // The cost model's own entry is untouched, and a damaged entry is ignored.
  EXPECT_NE(load_cached_cost_model(cache, cost_model_key(*e)), nullptr);
  put_cache_entry(cache, "lengths", cost_model_key(*e), boost::json::value("damaged"));
  EXPECT_FALSE(restore_output_lengths(*next, cache));
  put_cache_entry(cache, "lengths", cost_model_key(*e), boost::json::array{boost::json::array{-3, true}});
  EXPECT_FALSE(restore_output_lengths(*next, cache));
}

}  // namespace
}  // namespace tandem
