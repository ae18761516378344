// Speculative decoding end to end through tandem::Engine on tiny fixture models:
// greedy output identical to target-only output for K = 1..8 (draft model and n-gram),
// sampled output distributed like target-only output (per-position chi-square), KV
// rollback equivalence, pairing refusal, metrics, EOS and stop strings inside accepted
// drafts; and the real Qwen2.5-Coder pair.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "engine/runtime/engine_access.hpp"
#include "engine/model/transformer.hpp"
#include "engine/runtime/sequence_run.hpp"
#include "engine/text/tokenizer.hpp"
#include "engine/text/vocab_compat.hpp"
#include "tandem/engine.hpp"
#include "tests/support/drive.hpp"
#include "tests/support/paths.hpp"
#include "tests/support/prompts.hpp"
#include "tests/support/stats.hpp"
#include "tests/support/tiny_model.hpp"
#include "tests/support/tiny_vocab.hpp"

namespace tandem {
namespace {

// Target (F32); a close draft (the same weights in F16: agrees often, not always); a far
// draft (other random weights, one layer: rarely agrees).
test::TinyModelSpec fixture_spec() {
  test::TinyModelSpec t;
  t.arch = "qwen2";
  t.tied_embeddings = false;
  t.seed = 3;
  t.weight_scale = 0.0f;
  return t;
}

const test::TinyPair& fixture_pair() {
  static const test::TinyPair p = test::write_tiny_pair(test::scratch_dir("spec-pair"), fixture_spec());
  return p;
}

std::unique_ptr<Engine> load(const std::string& target, const std::string& draft = "") {
  LoadOptions o;
  o.model_path = target;
  o.draft_model_path = draft;
  o.threads = 1;
  o.context = 256;
  return Engine::load(o);
}

std::vector<int32_t> prompt_of(int n, uint32_t seed) {
  return test::random_prompt(n, seed, 1);
}

GenerateOptions greedy(int n) {
  GenerateOptions g;
  g.max_tokens = n;
  g.sampling.temperature = 0.0f;
  g.ignore_eos = true;
  return g;
}

TEST(Speculative, GreedyDraftModelOutputIsTheTargetsForEveryK) {
  const auto& fx = fixture_pair();
  for (const std::string& draft : {fx.close_draft, fx.far_draft}) {
    auto e = load(fx.target, draft);
    int64_t accepted = 0;
    for (uint32_t s = 0; s < 6; ++s) {
      const auto prompt = prompt_of(3 + static_cast<int>(s) * 5, s);
      const auto plain = e->generate_tokens(prompt, greedy(40));
      for (int k = 1; k <= 8; ++k) {
        GenerateOptions g = greedy(40);
        g.speculative.mode = DraftMode::Model;
        g.speculative.draft_max = k;
        const auto spec = e->generate_tokens(prompt, g);
        ASSERT_EQ(spec.tokens, plain.tokens) << "draft " << draft << " prompt " << s << " k " << k;
        EXPECT_EQ(spec.speculative.drafted_per_position.size(), static_cast<size_t>(k));
        EXPECT_LE(spec.speculative.accepted_tokens, spec.speculative.drafted_tokens);
        accepted += spec.speculative.accepted_tokens;
      }
    }
    if (draft == fx.close_draft) {
      EXPECT_GT(accepted, 0) << "the close draft should agree sometimes";
    }
  }
}

TEST(Speculative, GreedyNgramOutputIsTheTargetsForEveryK) {
  auto e = load(fixture_pair().target);
  for (uint32_t s = 0; s < 4; ++s) {
    // A prompt that repeats itself, so lookups find matches.
    auto prompt = prompt_of(12, s);
    const auto again = prompt;
    prompt.insert(prompt.end(), again.begin(), again.end());
    const auto plain = e->generate_tokens(prompt, greedy(48));
    for (int k = 1; k <= 8; ++k) {
      GenerateOptions g = greedy(48);
      g.speculative.mode = DraftMode::Ngram;
      g.speculative.draft_max = k;
      const auto spec = e->generate_tokens(prompt, g);
      ASSERT_EQ(spec.tokens, plain.tokens) << "prompt " << s << " k " << k;
    }
  }
}

TEST(Speculative, StopStringsAndMaxTokensCutAcceptedSpansLikePlainDecoding) {
  const auto& fx = fixture_pair();
  auto e = load(fx.target, fx.close_draft);
  const auto prompt = prompt_of(8, 42);
  const auto plain_long = e->generate_tokens(prompt, greedy(30));
  ASSERT_GE(plain_long.text.size(), 6u);
  const std::string stop = plain_long.text.substr(plain_long.text.size() / 2, 3);
  for (int max_tokens : {1, 2, 5, 13}) {
    GenerateOptions g = greedy(max_tokens);
    g.stop = {stop};
    const auto plain = e->generate_tokens(prompt, g);
    g.speculative.mode = DraftMode::Model;
    g.speculative.draft_max = 6;
    const auto spec = e->generate_tokens(prompt, g);
    EXPECT_EQ(spec.text, plain.text) << max_tokens;
    EXPECT_EQ(spec.tokens, plain.tokens) << max_tokens;
    EXPECT_EQ(spec.finish, plain.finish) << max_tokens;
  }
}

// Stop token ids end the output where the token comes, as an end-of-generation token does:
// the token is the last one and adds no text, with or without speculation, whatever
// ignore_eos says; ids outside the vocabulary are refused.
TEST(Speculative, StopTokenIdsEndTheOutputWhereTheTokenComes) {
  const auto& fx = fixture_pair();
  auto e = load(fx.target, fx.close_draft);
  const auto prompt = prompt_of(8, 42);
  const auto plain_long = e->generate_tokens(prompt, greedy(30));
  ASSERT_GE(plain_long.tokens.size(), 12u);
  const int32_t n_vocab = e->info().n_vocab;
  // A token whose first occurrence is past the start, so that the cut is visible.
  size_t at = 0;
  int32_t stop = -1;
  for (size_t i = 6; i < plain_long.tokens.size() && stop < 0; ++i)
    if (std::find(plain_long.tokens.begin(), plain_long.tokens.begin() + static_cast<std::ptrdiff_t>(i),
                  plain_long.tokens[i]) == plain_long.tokens.begin() + static_cast<std::ptrdiff_t>(i))
      at = i, stop = plain_long.tokens[i];
  ASSERT_GE(stop, 0) << "no token occurs first after position 6";
  const std::vector<int32_t> want(plain_long.tokens.begin(), plain_long.tokens.begin() + static_cast<std::ptrdiff_t>(at) + 1);
  for (bool ignore_eos : {false, true}) {
    GenerateOptions g = greedy(30);
    g.ignore_eos = ignore_eos;
    g.stop_token_ids = {n_vocab - 1, stop};
    const auto plain = e->generate_tokens(prompt, g);
    EXPECT_EQ(plain.tokens, want);
    EXPECT_EQ(plain.finish, FinishReason::Stop);
    EXPECT_EQ(plain.text, e->generate_tokens(prompt, greedy(static_cast<int32_t>(at))).text)
        << "the stop token adds no text";
    for (DraftMode mode : {DraftMode::Model, DraftMode::Ngram}) {
      GenerateOptions s = g;
      s.speculative.mode = mode;
      s.speculative.draft_max = 6;
      const auto spec = e->generate_tokens(prompt, s);
      EXPECT_EQ(spec.tokens, plain.tokens);
      EXPECT_EQ(spec.text, plain.text);
      EXPECT_EQ(spec.finish, plain.finish);
    }
  }
  GenerateOptions bad = greedy(4);
  bad.stop_token_ids = {n_vocab};
  EXPECT_THROW(e->generate_tokens(prompt, bad), std::invalid_argument);
  bad.stop_token_ids = {-1};
  EXPECT_THROW(e->generate_tokens(prompt, bad), std::invalid_argument);
}

// Sampling: the marginal distribution of each output position with speculation equals
// the target-only one (two-sample chi-square per position, fixed seeds: deterministic).
std::vector<std::map<int64_t, int64_t>> sample_positions(Engine& e, const std::vector<int32_t>& prompt,
                                                         GenerateOptions g, int runs, int positions) {
  std::vector<std::map<int64_t, int64_t>> counts(static_cast<size_t>(positions));
  g.max_tokens = positions;
  g.ignore_eos = true;
  for (int r = 0; r < runs; ++r) {
    g.sampling.seed = 1000003ull * static_cast<uint64_t>(r) + 17;
    const auto res = e.generate_tokens(prompt, g);
    for (int j = 0; j < positions && j < static_cast<int>(res.tokens.size()); ++j)
      ++counts[static_cast<size_t>(j)][res.tokens[static_cast<size_t>(j)]];
  }
  return counts;
}

TEST(Speculative, SampledOutputFollowsTheTargetDistribution) {
  const auto& fx = fixture_pair();
  auto e = load(fx.target, fx.close_draft);
  const auto prompt = prompt_of(6, 5);
  GenerateOptions g;
  g.sampling.temperature = 1.5f;  // flat enough that several tokens compete
  g.sampling.top_k = 6;
  g.sampling.top_p = 0.9f;
  g.sampling.min_p = 0.0f;
  // Rejection sampling (coupled output equals plain output seed for seed: test_coupled).
  g.speculative.verify = VerifyMode::Rejection;
  const int runs = 4000, positions = 4;
  const auto plain = sample_positions(*e, prompt, g, runs, positions);
  for (DraftMode mode : {DraftMode::Model, DraftMode::Ngram}) {
    GenerateOptions s = g;
    s.speculative.mode = mode;
    s.speculative.draft_max = 3;
    const auto spec = sample_positions(*e, prompt, s, runs, positions);
    for (int j = 0; j < positions; ++j) {
      int df = 0;
      const double pv = test::chi2_two_sample_pvalue(plain[static_cast<size_t>(j)], spec[static_cast<size_t>(j)], &df);
      EXPECT_GT(pv, 1e-4) << "position " << j << " (df " << df << ")";
      if (j == 0) {
        EXPECT_GE(df, 2) << "too few competing tokens for a meaningful test";
      }
    }
  }
  // Power check: a different temperature is detected at some position.
  GenerateOptions hot = g;
  hot.sampling.temperature = 0.6f;
  const auto other = sample_positions(*e, prompt, hot, runs, positions);
  double min_p = 1.0;
  for (int j = 0; j < positions; ++j)
    min_p = std::min(min_p, test::chi2_two_sample_pvalue(plain[static_cast<size_t>(j)], other[static_cast<size_t>(j)]));
  EXPECT_LT(min_p, 1e-4);
}

// Coupled verification (the default): a seed's text is the target's own, drafted or not —
// speculative output against plain decoding with the same seed, at several k.
TEST(Speculative, ASeedGivesThePlainTextWhateverTheDraft) {
  const auto& fx = fixture_pair();
  auto e = load(fx.target, fx.close_draft);
  GenerateOptions g;
  g.max_tokens = 24;
  g.ignore_eos = true;
  g.sampling.seed = 1234;
  const auto plain = e->generate_tokens(prompt_of(5, 1), g);
  EXPECT_EQ(plain.seed, 1234u);
  g.speculative.mode = DraftMode::Model;
  for (int32_t k : {1, 3, 6}) {
    g.speculative.draft_max = k;
    const auto spec = e->generate_tokens(prompt_of(5, 1), g);
    EXPECT_EQ(spec.tokens, plain.tokens) << "k " << k;
    EXPECT_GT(spec.speculative.accepted_tokens, 0) << "k " << k << ": nothing accepted, nothing shown";
  }
}

// Without a seed, each request draws its own: two runs of one prompt differ, and the seed
// each reports gives its text back.
TEST(Speculative, UnseededRequestsDrawFreshSeedsAndReportThem) {
  const auto& fx = fixture_pair();
  auto e = load(fx.target, fx.close_draft);
  GenerateOptions g;
  g.max_tokens = 24;
  g.ignore_eos = true;
  g.sampling.temperature = 1.0f;
  g.sampling.top_k = 0;
  g.sampling.top_p = 1.0f;
  g.sampling.min_p = 0.0f;
  g.speculative.mode = DraftMode::Model;
  ASSERT_FALSE(g.sampling.seed.has_value());
  const auto a = e->generate_tokens(prompt_of(5, 1), g);
  const auto b = e->generate_tokens(prompt_of(5, 1), g);
  EXPECT_NE(a.seed, b.seed);
  EXPECT_NE(a.tokens, b.tokens) << "two unseeded requests at temperature 1 gave the same 24 tokens";
  g.sampling.seed = a.seed;
  EXPECT_EQ(e->generate_tokens(prompt_of(5, 1), g).tokens, a.tokens);
  g.speculative.mode = DraftMode::None;
  EXPECT_EQ(e->generate_tokens(prompt_of(5, 1), g).tokens, a.tokens);
}

// After a rejection the cache is truncated; it must then behave exactly like a cache that
// only ever saw the accepted tokens.
TEST(Speculative, RollbackGivesTheSameLogitsAsAFreshRun) {
  auto be = kernels::make_cpu_backend(1);
  auto model = Model::load(fixture_pair().target, *be);
  KVCacheOptions o;
  o.block_size = 4;
  o.max_tokens = 64;
  KVCache cache(*be, model->config(), o);
  Transformer tf(*model, cache);
  const auto ctx = prompt_of(6, 9);              // committed
  const std::vector<int32_t> rejected = {11, 12, 13, 14, 15, 16, 17};  // crosses block boundaries
  const std::vector<int32_t> next = {21, 22};
  std::vector<float> rolled, fresh;
  {
    SequenceKV s(cache);
    Batch b;
    b.add(s, ctx);
    tf.forward(b, rolled);
    b.clear();
    b.add(s, rejected);
    tf.forward(b, rolled);
    s.truncate(static_cast<int32_t>(ctx.size()) + 1);  // keep the first drafted token only
    EXPECT_EQ(s.block_table().size(), 2u);
    b.clear();
    b.add_all_logits(s, next);
    tf.forward(b, rolled);
  }
  SequenceKV s(cache);
  std::vector<int32_t> all = ctx;
  all.push_back(rejected[0]);
  all.insert(all.end(), next.begin(), next.end());
  Batch b;
  b.add(s, std::span(all).first(all.size() - 2));
  tf.forward(b, fresh);
  b.clear();
  b.add_all_logits(s, next);
  tf.forward(b, fresh);
  ASSERT_EQ(rolled.size(), fresh.size());
  for (size_t i = 0; i < fresh.size(); ++i) ASSERT_EQ(rolled[i], fresh[i]) << i;
}

TEST(Speculative, IncompatiblePairIsRefusedNamingTheDifference) {
  const std::string dir = test::scratch_dir("spec-bad-pair");
  test::TinyModelSpec t;
  test::write_tiny_model(dir + "/target.gguf", t);
  test::TinyModelSpec spm = t;
  spm.tokenizer = "llama";
  test::write_tiny_model(dir + "/spm.gguf", spm);
  test::TinyModelSpec bigger = t;
  bigger.n_vocab = 400;  // same tokenizer, specials moved: ids 317.. differ
  test::write_tiny_model(dir + "/bigger.gguf", bigger);
  test::TinyModelSpec huge = t;
  huge.n_vocab = 600;
  test::write_tiny_model(dir + "/huge.gguf", huge);
  auto expect_refused = [&](const std::string& draft, const std::string& fragment) {
    try {
      load(dir + "/target.gguf", draft);
      ADD_FAILURE() << "pair accepted: " << draft;
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    }
  };
  expect_refused(dir + "/spm.gguf", "tokenizer types differ");
  expect_refused(dir + "/huge.gguf", "vocabulary sizes differ");
  expect_refused(dir + "/bigger.gguf", "BOS tokens differ: target 317, draft 397");
  EXPECT_NO_THROW(load(dir + "/target.gguf", dir + "/target.gguf"));
}

// Same sizes and specials, one token text changed: the message names that id and both texts.
TEST(Speculative, VocabularyCheckNamesTheFirstDifferentToken) {
  auto make = [](const test::TinyVocab& v) { return Tokenizer::from_data(test::tokenizer_data(v, "gpt2")); };
  const test::TinyVocab a = test::build_gpt2_vocab(320);
  test::TinyVocab b = a;
  std::swap(b.tokens[300], b.tokens[301]);  // same token set, two ids exchanged
  const auto ta = make(a), tb = make(b), tc = make(a);
  EXPECT_EQ(vocab_incompatibility(*ta, *tc), "");
  const std::string why = vocab_incompatibility(*ta, *tb);
  EXPECT_NE(why.find("token 300 differs"), std::string::npos) << why;
  EXPECT_NE(why.find(a.tokens[301]), std::string::npos) << why;
}

TEST(Speculative, MetricsAreConsistent) {
  const auto& fx = fixture_pair();
  auto e = load(fx.target, fx.close_draft);
  GenerateOptions g = greedy(40);
  g.speculative.mode = DraftMode::Model;
  g.speculative.draft_max = 4;
  const auto r = e->generate_tokens(prompt_of(7, 3), g);
  const SpeculativeMetrics& m = r.speculative;
  ASSERT_GT(m.drafts, 0);
  int64_t drafted = 0, accepted = 0;
  for (size_t i = 0; i < m.drafted_per_position.size(); ++i) {
    drafted += m.drafted_per_position[i];
    accepted += m.accepted_per_position[i];
    EXPECT_LE(m.accepted_per_position[i], m.drafted_per_position[i]);
    if (i > 0) {
      EXPECT_LE(m.accepted_per_position[i], m.accepted_per_position[i - 1]);
    }
  }
  EXPECT_EQ(drafted, m.drafted_tokens);
  EXPECT_EQ(accepted, m.accepted_tokens);
  EXPECT_GE(m.acceptance_rate(), 0.0);
  EXPECT_LE(m.acceptance_rate(), 1.0);
  EXPECT_NEAR(m.mean_accepted_length(), 1.0 + double(m.accepted_tokens) / m.drafts, 1e-12);
  // Every generated token came from a target pass: passes + accepted drafts = tokens.
  EXPECT_EQ(m.target_passes + 1 + m.accepted_tokens, static_cast<int64_t>(r.tokens.size()));
  EXPECT_GT(m.cost_ratio(), 0.0);
}

// The first token comes from the target alone: the draft model reads the prompt after it
// (its prefill), so a drafting step's measured cost is drafting, and a one-token request
// never touches the draft. Each draft pass of a step feeds at most the pending tokens.
TEST(Speculative, DraftReadsThePromptAfterTheFirstToken) {
  const auto& fx = fixture_pair();
  auto e = load(fx.target, fx.close_draft);
  GenerateOptions g = greedy(1);
  g.speculative.mode = DraftMode::Model;
  g.speculative.draft_max = 4;
  const auto one = e->generate_tokens(prompt_of(30, 5), g);
  EXPECT_EQ(one.tokens.size(), 1u);
  EXPECT_EQ(one.speculative.draft_forwards, 0);
  EXPECT_EQ(one.speculative.draft_ms, 0.0);
  g.max_tokens = 12;
  const auto r = e->generate_tokens(prompt_of(30, 5), g);
  const SpeculativeMetrics& m = r.speculative;
  ASSERT_GT(m.drafts, 0);
  // No prompt catch-up inside drafting: at most draft_max passes per drafting step.
  EXPECT_LE(m.draft_forwards, m.drafts * 4);
  int64_t steps = 0;
  for (int64_t n : m.steps_per_k) steps += n;
  EXPECT_EQ(steps, m.target_passes);  // every decoding step after the first was a policy decision
}

// EOS and stop strings inside accepted drafts. The tests above ignore EOS (the vocabulary's
// own never comes from random weights); here the fixture's EOS is a token greedy decoding
// really emits: the first new token from output index 16 on of `base`'s continuation. The
// prompts are base + the first r tokens of that continuation, so each meets the EOS at a
// different output index, i.e. at every position within a step's drafts; the close draft
// agrees with greedy decoding, so drafts past the EOS are accepted too.
struct EosCase {
  test::TinyPair pair;  // the fixture's weights, `eos` as EOS
  int32_t eos = -1;
  std::vector<int32_t> continuation;  // of base, with EOS ignored
  std::vector<std::vector<int32_t>> prompts;
};

const EosCase& eos_case() {
  static const EosCase c = [] {
    EosCase c;
    const auto base = prompt_of(8, 1);
    c.continuation = load(fixture_pair().target)->generate_tokens(base, greedy(40)).tokens;
    const auto& out = c.continuation;
    auto j = out.begin() + 16;
    while (j != out.end() && std::find(out.begin(), j, *j) != j) ++j;
    if (j == out.end()) throw std::runtime_error("eos_case: the fixture's output has no new token after index 16");
    c.eos = *j;
    test::TinyModelSpec t = fixture_spec();
    t.eos_id = c.eos;
    c.pair = test::write_tiny_pair(test::scratch_dir("spec-eos"), t);
    for (size_t r = 0; r < 12; ++r) {
      auto p = base;
      p.insert(p.end(), out.begin(), out.begin() + static_cast<ptrdiff_t>(r));
      c.prompts.push_back(std::move(p));
    }
    return c;
  }();
  return c;
}

// How a sampled output may end: at its first end-of-generation token (its last token),
// with a stop string (cut from the text), or at max_tokens.
void expect_finish_consistent(const GenerateResult& r, const Tokenizer& tok, const GenerateOptions& g,
                              const std::string& what) {
  const auto first_eog = std::find_if(r.tokens.begin(), r.tokens.end(), [&](int32_t t) { return tok.is_eog(t); });
  for (const std::string& s : g.stop) EXPECT_EQ(r.text.find(s), std::string::npos) << what;
  if (first_eog != r.tokens.end()) {
    EXPECT_EQ(first_eog + 1, r.tokens.end()) << what << ": tokens after the end of generation";
    EXPECT_EQ(r.finish, FinishReason::Stop) << what;
  } else if (r.finish == FinishReason::Length) {
    EXPECT_EQ(static_cast<int32_t>(r.tokens.size()), g.max_tokens) << what;
  } else {
    EXPECT_EQ(r.finish, FinishReason::Stop) << what;
    EXPECT_FALSE(g.stop.empty()) << what << ": stopped without EOS or stop string";
  }
}

TEST(Speculative, GreedyEosAndStopStringsInsideAcceptedDraftsEndLikeTargetOnly) {
  const EosCase& c = eos_case();
  auto e = load(c.pair.target, c.pair.close_draft);
  // A stop string from the middle of the output, before the EOS.
  const std::string stop = e->detokenize(std::span(c.continuation).subspan(8, 1));
  ASSERT_FALSE(stop.empty());
  int64_t accepted = 0;
  for (bool with_stop : {false, true}) {
    for (size_t r = 0; r < c.prompts.size(); ++r) {
      GenerateOptions g = greedy(40);
      g.ignore_eos = false;
      if (with_stop) g.stop = {stop};
      const auto plain = e->generate_tokens(c.prompts[r], g);
      ASSERT_EQ(plain.finish, FinishReason::Stop) << r;
      if (!with_stop) {
        ASSERT_EQ(plain.tokens.back(), c.eos) << r;
      }
      for (int k : {2, 4, 7}) {
        g.speculative.mode = DraftMode::Model;
        g.speculative.draft_max = k;
        const auto spec = e->generate_tokens(c.prompts[r], g);
        EXPECT_EQ(spec.tokens, plain.tokens) << "prompt " << r << " k " << k << " stop " << with_stop;
        EXPECT_EQ(spec.text, plain.text) << "prompt " << r << " k " << k << " stop " << with_stop;
        EXPECT_EQ(spec.finish, plain.finish) << "prompt " << r << " k " << k << " stop " << with_stop;
        accepted += spec.speculative.accepted_tokens;
      }
    }
  }
  EXPECT_GT(accepted, 0);
}

TEST(Speculative, SampledEosAndStopStringsInsideDraftsEndTheOutput) {
  const EosCase& c = eos_case();
  auto e = load(c.pair.target, c.pair.close_draft);
  const Tokenizer& tok = EngineAccess::parts(*e).tokenizer;
  int eos_stops = 0, string_stops = 0;
  for (size_t r = 0; r < c.prompts.size(); ++r) {
    for (uint64_t seed : {1, 2}) {
      for (DraftMode mode : {DraftMode::None, DraftMode::Model}) {
        GenerateOptions g;
        g.max_tokens = 40;
        g.sampling.temperature = 0.2f;  // the EOS and the stop string still come in many runs
        g.sampling.seed = seed * 1000 + r;
        g.stop = {e->detokenize(std::span(c.continuation).subspan(8, 1))};
        g.speculative.mode = mode;
        g.speculative.draft_max = 4;
        const auto res = e->generate_tokens(c.prompts[r], g);
        expect_finish_consistent(res, tok, g, "prompt " + std::to_string(r) + " mode " + std::to_string(int(mode)));
        if (res.finish == FinishReason::Stop) ++(tok.is_eog(res.tokens.back()) ? eos_stops : string_stops);
      }
    }
  }
  // Both endings were exercised (fixed seeds: the counts are deterministic).
  EXPECT_GT(eos_stops, 0);
  EXPECT_GT(string_stops, 0);
}

// Drafts a known continuation (the greedy one), so every draft is accepted; remembers the
// last proposal.
class ScriptProposer final : public PerSequenceProposer {
 public:
  explicit ScriptProposer(std::vector<int32_t> script) : script_(std::move(script)) {}
  std::string name() const override { return "script"; }
  Proposal propose_sequence(std::span<const int32_t> context, const ProposeOptions& o, Rng&) override {
    Proposal p;
    last_from = context.size();
    for (size_t i = last_from; i < script_.size() && static_cast<int32_t>(p.tokens.size()) < o.max_tokens; ++i)
      p.tokens.push_back(script_[i]);
    last_count = p.tokens.size();
    return p;
  }
  size_t last_from = 0, last_count = 0;  // script positions of the last proposal

 private:
  std::vector<int32_t> script_;
};

// A stop inside the accepted drafts: the drafts after it were accepted (their KV written),
// but they are not committed, and the cache must not keep their KV (the scheduler
// publishes full blocks of the cache to the prefix cache under the committed tokens).
TEST(Speculative, AStopInsideAcceptedDraftsLeavesNoKVPastTheCommittedTokens) {
  const EosCase& c = eos_case();
  auto e = load(c.pair.target);
  const EngineParts parts = EngineAccess::parts(*e);
  const int32_t n_vocab = parts.target.model().config().n_vocab;
  const std::string stop = e->detokenize(std::span(c.continuation).subspan(8, 1));
  int past_stop = 0;  // runs whose last proposal went on past the stop
  for (bool with_stop : {false, true}) {
    for (const auto& prompt : c.prompts) {
      GenerateOptions g = greedy(40);
      g.ignore_eos = false;
      if (with_stop) g.stop = {stop};
      const auto plain = e->generate_tokens(prompt, g);
      ASSERT_EQ(plain.finish, FinishReason::Stop);
      std::vector<int32_t> script = c.prompts[0];  // every prompt is a prefix of it
      script.insert(script.end(), c.continuation.begin(), c.continuation.end());
      ScriptProposer proposer(script);
      FixedPolicy policy;
      g.speculative.mode = DraftMode::Model;
      g.speculative.draft_max = 4;
      SequenceRun run(parts.target, parts.tokenizer, prompt, g, {}, parts.context, n_vocab, &proposer,
                      &policy);
      test::drive_to_end(run, parts.target);
      EXPECT_EQ(run.result().tokens, plain.tokens);
      EXPECT_LE(run.kv().length(), static_cast<int32_t>(run.committed().size()))
          << "prompt of " << prompt.size() << " tokens, stop string " << with_stop;
      if (proposer.last_from + proposer.last_count > run.committed().size()) ++past_stop;
    }
  }
  EXPECT_GT(past_stop, 0) << "no run had drafts accepted past its stop";
}

// A policy that keeps the draft off until it has seen `wait` target confidences, then
// drafts k_max: what a sequence hands a policy waiting to start.
class ConfidenceSpy final : public SpeculationPolicy {
 public:
  explicit ConfidenceSpy(size_t wait) : wait_(wait) {}
  std::string name() const override { return "spy"; }
  bool may_start_off() const override { return true; }
  bool wants_confidence() const override { return !started_; }
  void observe_confidence(double p) override { seen.push_back(p); }
  int32_t choose_k(const PolicyInput& in) override {
    started_ = started_ || seen.size() >= wait_;
    return started_ ? in.k_max : 0;
  }
  void reset() override { seen.clear(), started_ = false; }
  std::vector<double> seen;

 private:
  size_t wait_;
  bool started_ = false;
};

// Each plain step before the draft is first asked for hands the policy the target's top
// probability at that position (checked against the logprob of the greedy token, computed
// elsewhere: token_logprobs) while the policy asks for it; the output stays the target's.
TEST(Speculative, APolicyWaitingToStartSeesTheTargetsConfidenceAtEachPlainStep) {
  const auto& fx = fixture_pair();
  auto e = load(fx.target);
  const EngineParts parts = EngineAccess::parts(*e);
  const int32_t n_vocab = parts.target.model().config().n_vocab;
  const auto prompt = prompt_of(9, 4);
  GenerateOptions g = greedy(20);
  g.logprobs = 0;
  const auto plain = e->generate_tokens(prompt, g);
  ASSERT_EQ(plain.logprobs.size(), plain.tokens.size());
  std::vector<int32_t> script = prompt;  // a draft that proposes the target's own output
  script.insert(script.end(), plain.tokens.begin(), plain.tokens.end());
  g.logprobs = -1;
  g.speculative.mode = DraftMode::Model;
  g.speculative.draft_max = 3;
  for (size_t wait : {size_t{5}, size_t{1000}}) {
    ScriptProposer proposer(script);
    ConfidenceSpy spy(wait);
    SequenceRun run(parts.target, parts.tokenizer, prompt, g, {}, parts.context, n_vocab, &proposer, &spy);
    test::drive_to_end(run, parts.target);
    EXPECT_EQ(run.result().tokens, plain.tokens) << wait;
    const size_t expect = std::min(wait, plain.tokens.size());
    ASSERT_EQ(spy.seen.size(), expect) << "one per plain step until the policy starts the draft";
    for (size_t i = 0; i < expect; ++i) {
      const double ref = std::exp(static_cast<double>(plain.logprobs[i].chosen.logprob));
      EXPECT_NEAR(spy.seen[i], ref, 1e-4 * ref + 1e-7) << "token " << i;
    }
    if (wait < plain.tokens.size()) {
      EXPECT_GT(run.result().speculative.accepted_tokens, 0);
    }
  }
}

// The real pair: Qwen2.5-Coder-0.5B drafting for Qwen2.5-Coder-1.5B.
TEST(Speculative, RealQwenPairGreedyIsLossless) {
  TANDEM_REQUIRE_MODEL(target, "qwen1.5b");
  TANDEM_REQUIRE_MODEL(draft, "qwen0.5b");
  LoadOptions o;
  o.model_path = target;
  o.draft_model_path = draft;
  o.context = 512;
  auto e = Engine::load(o);
  for (const char* p : {"def fibonacci(n):", "The capital of France is", "<|im_start|>user\nWrite a haiku about the sea.<|im_end|>\n<|im_start|>assistant\n"}) {
    GenerateOptions g = greedy(24);
    const auto plain = e->generate(p, g);
    for (int k : {1, 4, 8}) {
      g.speculative.mode = DraftMode::Model;
      g.speculative.draft_max = k;
      const auto spec = e->generate(p, g);
      EXPECT_EQ(spec.tokens, plain.tokens) << p << " k " << k;
    }
  }
}

// Fill in the middle with the coder model (Engine::fim_prompt): the markers around prefix and
// suffix, and what it writes is the code between them, the same with prompt lookup's drafts
// (which the suffix feeds). A model without the markers is refused by name.
TEST(Speculative, RealQwenCoderFillsInTheMiddle) {
  TANDEM_REQUIRE_MODEL(coder, "qwen0.5b");
  auto e = load(coder);
  const std::string prefix = "def area_of_rectangle(width, height):\n    return ";
  const std::string suffix = "\n\n\nprint(area_of_rectangle(3, 4))\n";
  const std::vector<int32_t> p = e->fim_prompt(prefix, suffix);
  const std::vector<int32_t> pre = e->tokenize(prefix, false, false), suf = e->tokenize(suffix, false, false);
  ASSERT_EQ(p.size(), pre.size() + suf.size() + 3);
  EXPECT_EQ(e->detokenize(std::span(p).first(1)), "<|fim_prefix|>");
  EXPECT_EQ(e->detokenize(std::span(p).subspan(1 + pre.size(), 1)), "<|fim_suffix|>");
  EXPECT_EQ(e->detokenize(std::span(p).last(1)), "<|fim_middle|>");
  GenerateOptions g = greedy(8);
  g.ignore_eos = false;
  const GenerateResult plain = e->generate_tokens(p, g);
  EXPECT_EQ(plain.text.substr(0, 14), "width * height") << plain.text;
  g.speculative.mode = DraftMode::Ngram;
  EXPECT_EQ(e->generate_tokens(p, g).tokens, plain.tokens);

  const auto plain_model = load(fixture_pair().target);  // a tiny vocabulary without FIM markers
  EXPECT_THROW(
      {
        try {
          plain_model->fim_prompt("a", "b");
        } catch (const std::invalid_argument& ex) {
          EXPECT_NE(std::string(ex.what()).find("fill-in-the-middle"), std::string::npos) << ex.what();
          throw;
        }
      },
      std::invalid_argument);
}

}  // namespace
}  // namespace tandem
