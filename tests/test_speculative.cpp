// Speculative decoding end to end through tandem::Engine on tiny fixture models:
// greedy output identical to target-only output for K = 1..8 (draft model and n-gram),
// sampled output distributed like target-only output (per-position chi-square), KV
// rollback equivalence, pairing refusal, metrics; and the real Qwen2.5-Coder pair.
#include <gtest/gtest.h>

#include <map>

#include "engine/forward.hpp"
#include "engine/tokenizer.hpp"
#include "engine/vocab_compat.hpp"
#include "tandem/engine.hpp"
#include "tests/support/paths.hpp"
#include "tests/support/stats.hpp"
#include "tests/support/tiny_model.hpp"
#include "tests/support/tiny_vocab.hpp"

namespace tandem {
namespace {

// Target (F32); a close draft (the same weights in F16: agrees often, not always); a far
// draft (other random weights, one layer: rarely agrees).
const test::TinyPair& fixture_pair() {
  static const test::TinyPair p = [] {
    test::TinyModelSpec t;
    t.arch = "qwen2";
    t.tied_embeddings = false;
    t.seed = 3;
    t.weight_scale = 0.0f;
    return test::write_tiny_pair(test::scratch_dir("spec-pair"), t);
  }();
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
  std::vector<int32_t> t;
  uint32_t x = seed * 2654435761u + 1;
  for (int i = 0; i < n; ++i) {
    x = x * 1664525u + 1013904223u;
    t.push_back(static_cast<int32_t>((x >> 8) % 300));
  }
  return t;
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

TEST(Speculative, SameSeedSameOutput) {
  const auto& fx = fixture_pair();
  auto e = load(fx.target, fx.close_draft);
  GenerateOptions g;
  g.max_tokens = 24;
  g.ignore_eos = true;
  g.sampling.seed = 1234;
  g.speculative.mode = DraftMode::Model;
  const auto a = e->generate_tokens(prompt_of(5, 1), g);
  const auto b = e->generate_tokens(prompt_of(5, 1), g);
  EXPECT_EQ(a.tokens, b.tokens);
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
  auto make = [](const test::TinyVocab& v) {
    TokenizerData d;
    d.model = "gpt2";
    d.tokens = v.tokens;
    d.token_types = v.token_types;
    d.merges = v.merges;
    d.bos_id = v.bos_id;
    d.eos_id = v.eos_id;
    return Tokenizer::from_data(std::move(d));
  };
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

}  // namespace
}  // namespace tandem
