// Draft and target whose vocabularies differ in size (padding rows, as Qwen2.5's 151,936 vs
// 152,064): the pair is accepted, so both directions must work. A draft with more rows
// must never propose an id the target has no row for; a target with more rows may emit
// ids the draft has no embedding for, and the draft must keep going. Greedy output stays
// the target's; and in the scheduler, nothing one sequence does fails the others (also: a
// request that fails inside a batched step fails alone).
#include <gtest/gtest.h>

#include <condition_variable>
#include <limits>
#include <mutex>

#include "engine/runtime/scheduler.hpp"
#include "tests/support/paths.hpp"
#include "tests/support/prompts.hpp"
#include "tests/support/tiny_model.hpp"

namespace tandem {
namespace {

struct Files {
  std::string plain, padded;  // the same tokenizer; padded has 64 more embedding/output rows
};

const Files& files() {
  static const Files f = [] {
    const std::string dir = test::scratch_dir("draft-vocab");
    test::TinyModelSpec t;
    t.arch = "llama";
    t.seed = 8;
    t.tied_embeddings = false;
    test::write_tiny_model(dir + "/plain.gguf", t);
    t.vocab_rows = t.n_vocab + 64;
    test::write_tiny_model(dir + "/padded.gguf", t);
    return Files{dir + "/plain.gguf", dir + "/padded.gguf"};
  }();
  return f;
}

std::unique_ptr<Engine> load(const std::string& target, const std::string& draft) {
  LoadOptions o;
  o.model_path = target;
  o.draft_model_path = draft;
  o.threads = 1;
  o.context = 128;
  return Engine::load(o);
}

std::vector<int32_t> prompt_of(int n, uint32_t seed) {
  return test::random_prompt(n, seed, 11);
}

GenerateOptions opts(float temperature, uint64_t seed, DraftMode mode) {
  GenerateOptions g;
  g.max_tokens = 40;
  g.ignore_eos = true;
  g.sampling.temperature = temperature;
  g.sampling.top_k = 0;
  g.sampling.top_p = 1.0f;
  g.sampling.min_p = 0.0f;
  g.sampling.seed = seed;
  g.speculative.mode = mode;
  g.speculative.draft_max = 4;
  return g;
}

// The padded draft's extra rows have random weights, so it predicts ids >= 320 (which the
// target does not have) about as often as any other: without masking, the target's forward
// throws on them.
TEST(DraftVocab, LargerDraftVocabularyNeverProposesIdsTheTargetLacks) {
  auto e = load(files().plain, files().padded);
  for (uint32_t s = 0; s < 6; ++s) {
    const auto prompt = prompt_of(6, s);
    const auto plain = e->generate_tokens(prompt, opts(0.0f, 0, DraftMode::None));
    const auto spec = e->generate_tokens(prompt, opts(0.0f, 0, DraftMode::Model));
    EXPECT_EQ(spec.tokens, plain.tokens) << "prompt " << s;
    EXPECT_GT(spec.speculative.drafted_tokens, 0);
    for (float t : {0.7f, 1.5f}) {
      const auto r = e->generate_tokens(prompt, opts(t, s + 1, DraftMode::Model));
      EXPECT_EQ(r.tokens.size(), 40u);
      for (int32_t id : r.tokens) EXPECT_LT(id, 320);
    }
  }
}

// The padded target emits ids >= 320 (its extra rows are as likely as any): the draft has
// no embedding for them and must still draft (not throw) — greedy output is the target's.
TEST(DraftVocab, LargerTargetVocabularyKeepsTheDraftDrafting) {
  auto e = load(files().padded, files().plain);
  int emitted_padding = 0;
  for (uint32_t s = 0; s < 6; ++s) {
    const auto prompt = prompt_of(6, s);
    const auto plain = e->generate_tokens(prompt, opts(0.0f, 0, DraftMode::None));
    const auto spec = e->generate_tokens(prompt, opts(0.0f, 0, DraftMode::Model));
    EXPECT_EQ(spec.tokens, plain.tokens) << "prompt " << s;
    for (int32_t id : plain.tokens) emitted_padding += id >= 320;
    const auto r = e->generate_tokens(prompt, opts(1.0f, s + 1, DraftMode::Model));
    EXPECT_EQ(r.tokens.size(), 40u);
    for (int32_t id : r.tokens) emitted_padding += id >= 320;
    EXPECT_GT(r.speculative.drafted_tokens, 0);
  }
  EXPECT_GT(emitted_padding, 0) << "the fixture should emit padding ids (else this tests nothing)";
}

// In the server's scheduler the same pairs run with other sequences in the batch: every
// request finishes without an error.
TEST(DraftVocab, SchedulerServesBothPairsWithoutFailingAnyone) {
  for (bool padded_target : {false, true}) {
    auto e = padded_target ? load(files().padded, files().plain) : load(files().plain, files().padded);
    SchedulerOptions so;
    so.max_seqs = 8;
    Scheduler sched(*e, so);
    std::mutex mu;
    std::condition_variable cv;
    int done = 0;
    std::vector<std::string> errors;
    const int n = 8;
    for (int i = 0; i < n; ++i) {
      ServeRequest r;
      r.prompt = prompt_of(5 + i, static_cast<uint32_t>(i));
      r.opts = opts(i % 2 ? 1.0f : 0.0f, static_cast<uint64_t>(i), i % 4 == 3 ? DraftMode::None : DraftMode::Model);
      r.on_done = [&](const GenerateResult& res, const std::string& err) {
        std::lock_guard<std::mutex> lk(mu);
        if (!err.empty() || res.tokens.size() != 40u) errors.push_back(err.empty() ? "short output" : err);
        ++done;
        cv.notify_all();
      };
      ASSERT_EQ(sched.submit(std::move(r)).status, SubmitStatus::Ok);
    }
    std::unique_lock<std::mutex> lk(mu);
    cv.wait(lk, [&] { return done == n; });
    EXPECT_TRUE(errors.empty()) << (padded_target ? "padded target: " : "padded draft: ") << errors.front();
  }
}

// A request whose sampling parameters are invalid fails when its distribution is first made,
// inside the batched step: it alone gets the error; the requests sharing its steps finish
// with the output they would have had alone.
TEST(SchedulerIsolation, OneFailingSequenceDoesNotFailTheBatch) {
  auto e = load(files().plain, files().padded);
  std::vector<std::vector<int32_t>> alone;
  for (int i = 0; i < 4; ++i) alone.push_back(e->generate_tokens(prompt_of(6, i), opts(0.0f, 0, DraftMode::Model)).tokens);
  SchedulerOptions so;
  Scheduler sched(*e, so);
  std::mutex mu;
  std::condition_variable cv;
  int done = 0;
  std::vector<std::string> errors(5);
  std::vector<std::vector<int32_t>> got(5);
  for (int i = 0; i < 5; ++i) {
    ServeRequest r;
    r.prompt = prompt_of(6, static_cast<uint32_t>(i % 4));
    r.opts = opts(0.0f, 0, DraftMode::Model);
    if (i == 4) {
      r.opts.sampling.temperature = 1.0f;
      r.opts.sampling.top_p = std::numeric_limits<float>::quiet_NaN();  // the sampler refuses it
    }
    r.on_done = [&, i](const GenerateResult& res, const std::string& err) {
      std::lock_guard<std::mutex> lk(mu);
      errors[static_cast<size_t>(i)] = err;
      got[static_cast<size_t>(i)] = res.tokens;
      ++done;
      cv.notify_all();
    };
    ASSERT_EQ(sched.submit(std::move(r)).status, SubmitStatus::Ok);
  }
  std::unique_lock<std::mutex> lk(mu);
  cv.wait(lk, [&] { return done == 5; });
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(errors[static_cast<size_t>(i)], "") << i;
    EXPECT_EQ(got[static_cast<size_t>(i)], alone[static_cast<size_t>(i)]) << i;
  }
  EXPECT_NE(errors[4].find("top_p"), std::string::npos) << errors[4];
  EXPECT_EQ(sched.stats().requests_failed, 1);
}

}  // namespace
}  // namespace tandem
