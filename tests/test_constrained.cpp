// Constrained decoding (GenerateOptions::grammar) through the real paths: Engine::generate
// and the Scheduler, with speculation off, by prompt lookup and by a draft model. Greedy
// output under a grammar is the same whatever drafted it; every output is a prefix of a
// sentence (a whole one when it ended by itself); bad grammars are refused up front. The
// sampled distribution under a grammar is χ²-tested in test_lossless.cpp (grammar_*).
#include <gtest/gtest.h>

#include <condition_variable>
#include <mutex>

#include "engine/grammar/grammar.hpp"
#include "engine/runtime/engine_access.hpp"
#include "engine/runtime/grammar_cache.hpp"
#include "engine/runtime/scheduler.hpp"
#include "kernels/backend_factory.hpp"
#include "tandem/engine.hpp"
#include "tests/support/paths.hpp"
#include "tests/support/prompts.hpp"
#include "tests/support/tiny_model.hpp"

namespace tandem {
namespace {

// A pair whose greedy output varies (qwen2 layout, untied output), and a close draft.
const test::TinyPair& models() {
  static const test::TinyPair f = [] {
    test::TinyModelSpec t;
    t.arch = "qwen2";
    t.tied_embeddings = false;
    t.seed = 5;
    return test::write_tiny_pair(test::scratch_dir("constrained"), t);
  }();
  return f;
}

std::unique_ptr<Engine> load(size_t kv_mem = 4 << 20, int32_t context = 256, const std::string& device = "cpu") {
  LoadOptions o;
  o.model_path = models().target;
  o.draft_model_path = models().close_draft;
  o.threads = 1;
  o.context = context;
  o.kv_mem_bytes = kv_mem;
  o.device = device;
  return Engine::load(o);
}

// A small JSON-like language: an object of "key": value pairs, values words, numbers, lists.
const char* const kObject = R"G(root ::= "{" ws pair ( "," ws pair )* "}"
pair ::= "\"" [a-z]+ "\"" ws ":" ws value ws
value ::= "\"" [a-z ]* "\"" | [0-9]+ | "[" ws ( value ( "," ws value )* )? "]"
ws ::= " "?)G";

GenerateOptions opts(int n, DraftMode mode, float temperature = 0.0f, uint64_t seed = 1) {
  GenerateOptions g;
  g.max_tokens = n;
  g.sampling.temperature = temperature;
  g.sampling.top_k = 0;
  g.sampling.top_p = 1.0f;
  g.sampling.min_p = 0.0f;
  g.sampling.seed = seed;
  g.speculative.mode = mode;
  g.speculative.draft_max = 3;
  g.grammar = kObject;
  return g;
}

// The output's text is a prefix of a sentence, and a whole sentence when the output ended
// by itself (the grammar completed, or an end-of-generation token where it may end).
void expect_in_language(const Grammar& g, const GenerateResult& r, const std::string& what) {
  GrammarState s = g.initial();
  g.advance_in_place(s, r.text);
  EXPECT_FALSE(s.dead()) << what << ": '" << r.text << "' leaves the grammar";
  if (r.finish == FinishReason::Stop) {
    EXPECT_TRUE(Grammar::accepting(s)) << what << ": '" << r.text << "' stopped early";
  }
}

TEST(Constrained, GreedyOutputIsTheSameWithSpeculationOnOrOff) {
  auto e = load();
  auto g = Grammar::parse(kObject);
  int stopped = 0, drafted = 0;
  for (int p = 0; p < 6; ++p) {
    const auto prompt = test::random_prompt(4 + p * 5, 40 + p, 3);
    const GenerateResult plain = e->generate_tokens(prompt, opts(60, DraftMode::None));
    expect_in_language(*g, plain, "plain");
    stopped += plain.finish == FinishReason::Stop;
    for (DraftMode mode : {DraftMode::Ngram, DraftMode::Model})
      for (int k : {1, 3, 5}) {
        GenerateOptions o = opts(60, mode);
        o.speculative.draft_max = k;
        const GenerateResult r = e->generate_tokens(prompt, o);
        EXPECT_EQ(r.tokens, plain.tokens) << "prompt " << p << " mode " << static_cast<int>(mode) << " k " << k;
        EXPECT_EQ(r.finish, plain.finish);
        drafted += static_cast<int>(r.speculative.drafted_tokens);
      }
  }
  EXPECT_GT(drafted, 100);
  EXPECT_GT(stopped, 0) << "no output completed its object: the completion path went untested";
}

TEST(Constrained, SampledOutputsStayInTheLanguage) {
  auto e = load();
  auto g = Grammar::parse(kObject);
  const auto prompt = test::random_prompt(12, 9, 3);
  int stopped = 0;
  for (DraftMode mode : {DraftMode::None, DraftMode::Ngram, DraftMode::Model})
    for (uint64_t seed = 1; seed <= 20; ++seed) {
      GenerateOptions o = opts(80, mode, 1.0f, seed);
      o.speculative.verify = seed % 2 ? VerifyMode::Rejection : VerifyMode::Coupled;
      const GenerateResult r = e->generate_tokens(prompt, o);
      expect_in_language(*g, r, "seed " + std::to_string(seed));
      stopped += r.finish == FinishReason::Stop;
    }
  EXPECT_GT(stopped, 0);
}

// On the CUDA backend constrained requests are drafted and verified there like the others:
// each row's grammar mask goes up and no row of logits comes down. Greedy output, and a
// seed's coupled output, are plain constrained decoding's on the same backend whatever
// drafts (n-gram, draft model, token trees); sampled (rejection) outputs stay in the
// language. Their distribution is χ²-tested in test_lossless.cpp (cuda_grammar_*).
TEST(Constrained, OnTheCudaBackendDraftsAndVerdictsStayOnTheDevice) {
  auto e = load(4 << 20, 256, "cuda-emulated");
  ASSERT_NE(e->info().backend.find("cuda-emulated"), std::string::npos) << e->info().backend;
  const kernels::Backend& be = EngineAccess::parts(*e).target.backend();
  const int64_t row = static_cast<int64_t>(EngineAccess::parts(*e).target.model().config().n_vocab) * 4;
  auto g = Grammar::parse(kObject);
  // Every decoding step verified on the device, and less than a row of logits a step down.
  auto all_on_device = [&](const GenerateResult& r, int64_t bytes, const std::string& what) {
    EXPECT_EQ(r.speculative.device_verified_steps, r.speculative.target_passes) << what;
    EXPECT_LT(bytes, r.speculative.target_passes * row / 2) << what;
  };
  int64_t device_drafted = 0;
  for (int p = 0; p < 2; ++p) {
    const auto prompt = test::random_prompt(5 + p * 6, 60 + p, 3);
    for (const bool coupled : {false, true}) {
      GenerateOptions base = opts(36, DraftMode::None, coupled ? 1.0f : 0.0f, 7 + static_cast<uint64_t>(p));
      base.speculative.verify = VerifyMode::Coupled;
      const GenerateResult plain = e->generate_tokens(prompt, base);
      expect_in_language(*g, plain, "plain");
      for (int how = 0; how < 3; ++how) {
        GenerateOptions o = base;
        o.speculative.mode = how == 0 ? DraftMode::Ngram : DraftMode::Model;
        o.speculative.policy = "fixed";
        if (how == 2) {
          o.speculative.tree_width = 3;
          o.speculative.tree_nodes = 9;
          o.speculative.lookup = false;
        }
        const std::string what = "prompt " + std::to_string(p) + (coupled ? " coupled" : " greedy") + " drafts " +
                                 std::to_string(how);
        const int64_t b0 = kernels::cuda_bytes_to_host(be);
        const GenerateResult r = e->generate_tokens(prompt, o);
        EXPECT_EQ(r.tokens, plain.tokens) << what;
        all_on_device(r, kernels::cuda_bytes_to_host(be) - b0, what);
        if (how > 0) {
          EXPECT_GT(r.speculative.device_drafted_tokens, 0) << what;
        }
        device_drafted += r.speculative.device_drafted_tokens;
      }
    }
  }
  for (uint64_t seed = 1; seed <= 2; ++seed) {
    GenerateOptions o = opts(36, DraftMode::Model, 1.0f, seed);
    o.speculative.verify = VerifyMode::Rejection;
    o.speculative.policy = "fixed";
    if (seed % 2 == 0) {
      o.speculative.tree_width = 3;
      o.speculative.tree_nodes = 9;
      o.speculative.lookup = false;
    }
    const int64_t b0 = kernels::cuda_bytes_to_host(be);
    const GenerateResult r = e->generate_tokens(test::random_prompt(9, 70 + static_cast<int>(seed), 3), o);
    expect_in_language(*g, r, "seed " + std::to_string(seed));
    all_on_device(r, kernels::cuda_bytes_to_host(be) - b0, "seed " + std::to_string(seed));
    EXPECT_GT(r.speculative.device_drafted_tokens, 0) << seed;
    EXPECT_GT(r.speculative.accepted_tokens, 0) << seed;
  }
  EXPECT_GT(device_drafted, 50);
}

// A grammar that allows only tokens the model never gives a possible logit (their rows of the
// output matrix are NaN): the request fails alone, with the sampler's words, on the CPU and on
// the CUDA backend (whose verdict is reached on the device), and a constrained request batched
// beside it gives its alone output.
TEST(Constrained, NoPossibleTokenFailsTheRequestAloneOnEveryBackend) {
  std::vector<int32_t> qx;  // the tokens spelled with q and x alone
  {
    const auto v = grammar_vocab(EngineAccess::parts(*load()).tokenizer);
    for (int32_t id = 0; id < v->size(); ++id)
      if (v->is_text(id) && !v->bytes(id).empty() && v->bytes(id).find_first_not_of("qx") == std::string::npos)
        qx.push_back(id);
  }
  ASSERT_FALSE(qx.empty());
  test::TinyModelSpec t;
  t.arch = "qwen2";
  t.tied_embeddings = false;
  t.seed = 5;
  t.nan_output_rows = qx;
  const std::string model = test::scratch_dir("constrained_nan") + "/target.gguf";
  test::write_tiny_model(model, t);
  const auto prompt = test::random_prompt(6, 3, 3);
  for (const std::string device : {"cpu", "cuda-emulated"}) {
    SCOPED_TRACE(device);
    LoadOptions o;
    o.model_path = model;
    o.threads = 1;
    o.context = 256;
    o.kv_mem_bytes = 4 << 20;
    o.device = device;
    auto e = Engine::load(o);
    GenerateOptions bad = opts(8, DraftMode::None);
    bad.grammar = "root ::= [qx]+";
    try {
      e->generate_tokens(prompt, bad);
      ADD_FAILURE() << "a request with no possible token produced one";
    } catch (const std::runtime_error& ex) {
      EXPECT_NE(std::string(ex.what()).find("logits are all NaN/-inf"), std::string::npos) << ex.what();
      // (On the device: its verdict, in the host sampler's words.)
      if (device != "cpu") {
        EXPECT_NE(std::string(ex.what()).find("where the grammar allows a token"), std::string::npos);
      }
    }
    const GenerateOptions good = opts(12, DraftMode::Ngram);
    const GenerateResult alone = e->generate_tokens(prompt, good);
    Scheduler s(*e, SchedulerOptions{});
    std::mutex mu;
    std::condition_variable cv;
    std::vector<std::string> errors(2);
    std::vector<GenerateResult> got(2);
    int done = 0;
    for (int i = 0; i < 2; ++i) {
      ServeRequest r;
      r.prompt = prompt;
      r.opts = i == 0 ? bad : good;
      r.on_done = [&, i](const GenerateResult& res, const std::string& err) {
        std::lock_guard<std::mutex> lk(mu);
        got[static_cast<size_t>(i)] = res;
        errors[static_cast<size_t>(i)] = err;
        ++done;
        cv.notify_all();
      };
      ASSERT_EQ(s.submit(std::move(r)).status, SubmitStatus::Ok);
    }
    {
      std::unique_lock<std::mutex> lk(mu);
      ASSERT_TRUE(cv.wait_for(lk, std::chrono::seconds(120), [&] { return done == 2; }));
    }
    s.shutdown(true);
    EXPECT_NE(errors[0].find("logits are all NaN/-inf"), std::string::npos) << errors[0];
    EXPECT_EQ(errors[1], "");
    EXPECT_EQ(got[1].tokens, alone.tokens);
  }
}

// A grammar with one sentence: it is produced, and the output ends there without an EOS.
TEST(Constrained, CompleteGrammarEndsTheOutput) {
  auto e = load();
  GenerateOptions o = opts(50, DraftMode::Model, 1.0f, 3);
  o.grammar = R"(root ::= "{\"ok\": true}")";
  o.ignore_eos = true;
  const GenerateResult r = e->generate_tokens(test::random_prompt(5, 1, 3), o);
  EXPECT_EQ(r.text, "{\"ok\": true}");
  EXPECT_EQ(r.finish, FinishReason::Stop);
  // The empty sentence: nothing at all.
  o.grammar = R"(root ::= "")";
  const GenerateResult none = e->generate_tokens(test::random_prompt(5, 1, 3), o);
  EXPECT_TRUE(none.tokens.empty());
  EXPECT_EQ(none.finish, FinishReason::Stop);
}

TEST(Constrained, BadGrammarsAreRefusedUpFront) {
  auto e = load();
  GenerateOptions o = opts(10, DraftMode::None);
  o.grammar = "root ::= \"a\" | undefined_rule";
  try {
    e->generate_tokens(test::random_prompt(5, 1, 3), o);
    ADD_FAILURE() << "a bad grammar was accepted";
  } catch (const std::invalid_argument& ex) {
    EXPECT_NE(std::string(ex.what()).find("'undefined_rule' is not defined"), std::string::npos) << ex.what();
  }
  Scheduler s(*e, SchedulerOptions{});
  ServeRequest r;
  r.prompt = test::random_prompt(5, 1, 3);
  r.opts = o;
  const SubmitResult sr = s.submit(std::move(r));
  EXPECT_EQ(sr.status, SubmitStatus::Invalid);
  EXPECT_NE(sr.message.find("grammar: 1:"), std::string::npos) << sr.message;
  s.shutdown(true);
}

// Batched with unconstrained requests, under preemption (a small KV budget), constrained
// requests give what they give alone, and the others are untouched by them.
TEST(Constrained, BatchingAndPreemptionChangeNothing) {
  // Both models' KV (2 x K,V x 2 layers x width 32 x f16) for 180 tokens: ten requests of
  // ~65 tokens each must take turns.
  auto e = load(2 * 2 * 2 * 32 * 2 * 180, 128);
  std::vector<std::pair<std::vector<int32_t>, GenerateOptions>> reqs;
  for (int i = 0; i < 10; ++i) {
    GenerateOptions o = opts(40, i % 3 == 0 ? DraftMode::None : i % 3 == 1 ? DraftMode::Ngram : DraftMode::Model,
                             i % 2 ? 0.0f : 0.9f, 100 + static_cast<uint64_t>(i));
    if (i % 4 == 3) o.grammar.clear();
    reqs.emplace_back(test::random_prompt(6 + i * 4, 200 + i, 3), o);
  }
  std::vector<GenerateResult> alone;
  for (auto& [p, o] : reqs) {
    GenerateOptions plain = o;
    plain.speculative.mode = o.sampling.greedy() ? DraftMode::None : o.speculative.mode;  // sampled: same proposer
    alone.push_back(e->generate_tokens(p, plain));
  }
  SchedulerOptions so;
  so.max_seqs = 10;
  Scheduler s(*e, so);
  std::mutex mu;
  std::condition_variable cv;
  size_t done = 0;
  bool all_in = false;  // no token before every request is in (see test_scheduler.cpp's run_all)
  std::vector<GenerateResult> got(reqs.size());
  std::vector<std::string> errors(reqs.size());
  for (size_t i = 0; i < reqs.size(); ++i) {
    ServeRequest r;
    r.prompt = reqs[i].first;
    r.opts = reqs[i].second;
    r.on_text = [&](const StreamEvent&) {
      std::unique_lock<std::mutex> lk(mu);
      cv.wait_for(lk, std::chrono::seconds(60), [&] { return all_in; });
      return true;
    };
    r.on_done = [&, i](const GenerateResult& res, const std::string& err) {
      std::lock_guard<std::mutex> lk(mu);
      got[i] = res;
      errors[i] = err;
      ++done;
      cv.notify_all();
    };
    ASSERT_EQ(s.submit(std::move(r)).status, SubmitStatus::Ok);
  }
  {
    std::unique_lock<std::mutex> lk(mu);
    all_in = true;
    cv.notify_all();
    ASSERT_TRUE(cv.wait_for(lk, std::chrono::seconds(120), [&] { return done == reqs.size(); }));
  }
  s.shutdown(true);
  auto g = Grammar::parse(kObject);
  for (size_t i = 0; i < reqs.size(); ++i) {
    EXPECT_EQ(errors[i], "") << i;
    EXPECT_EQ(got[i].tokens, alone[i].tokens) << "request " << i;
    if (!reqs[i].second.grammar.empty()) expect_in_language(*g, got[i], "request " + std::to_string(i));
  }
  EXPECT_GT(s.stats().preemptions, 0) << "the budget was meant to force preemption";
}

}  // namespace
}  // namespace tandem
