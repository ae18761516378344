// Logprobs (GenerateOptions::logprobs): the values against a direct log-softmax of the
// target's logits, and their independence of speculation (none, n-gram, draft model), of
// batching, and of the backend (on the CUDA backend they are reached on the device, with the
// verdict). Also n > 1 through Scheduler::submit_group.
#include <gtest/gtest.h>

#include <cmath>
#include <condition_variable>
#include <limits>
#include <map>
#include <mutex>
#include <random>

#include "engine/runtime/scheduler.hpp"
#include "engine/sampling/logprobs.hpp"
#include "tandem/engine.hpp"
#include "tests/support/paths.hpp"
#include "tests/support/prompts.hpp"
#include "tests/support/tiny_model.hpp"

namespace tandem {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// A direct log-softmax in double: log p_i = z_i - log Σ exp z_j.
std::vector<double> log_softmax(std::span<const float> z, double temperature = 1.0) {
  double m = -INFINITY;
  for (float x : z) m = std::max(m, x / temperature);
  double s = 0;
  for (float x : z) s += std::exp(x / temperature - m);
  std::vector<double> out;
  for (float x : z) out.push_back(x / temperature - m - std::log(s));
  return out;
}

std::vector<float> random_logits(size_t n, uint32_t seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.0f, 3.0f);
  std::vector<float> v(n);
  for (float& x : v) x = d(g);
  return v;
}

TEST(TokenLogprobs, GreedyIsTheLogSoftmaxOfThePenalisedLogits) {
  const auto logits = random_logits(1000, 1);
  SamplingParams p;
  p.temperature = 0.0f;
  p.presence_penalty = 1.5f;
  const std::vector<int32_t> history = {3, 3, 500};
  const TokenLogprobs lp = token_logprobs(logits, p, history, nullptr, 500, 20);
  std::vector<float> pen = logits;
  pen[3] -= 1.5f, pen[500] -= 1.5f;
  const auto ref = log_softmax(pen);
  EXPECT_NEAR(lp.chosen.logprob, ref[500], 1e-4);
  EXPECT_EQ(lp.chosen.token, 500);
  ASSERT_EQ(lp.top.size(), 20u);
  std::vector<int32_t> order(1000);
  for (int i = 0; i < 1000; ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](int a, int b) { return ref[a] > ref[b]; });
  for (size_t j = 0; j < 20; ++j) {
    EXPECT_EQ(lp.top[j].token, order[j]) << j;
    EXPECT_NEAR(lp.top[j].logprob, ref[order[j]], 1e-4) << j;
  }
  EXPECT_TRUE(token_logprobs(logits, p, history, nullptr, 0, 0).top.empty());
  EXPECT_THROW(token_logprobs(logits, p, history, nullptr, 0, 21), std::invalid_argument);
  EXPECT_THROW(token_logprobs(logits, p, history, nullptr, 1000, 1), std::invalid_argument);
}

// Sampled: the final distribution after temperature and top-k, renormalised; what top-k cut
// continues the list at -inf, in logit order.
TEST(TokenLogprobs, SampledAreOfTheFinalDistribution) {
  const auto logits = random_logits(500, 2);
  SamplingParams p;
  p.temperature = 0.7f;
  p.top_k = 5;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  const Distribution d = make_distribution(logits, p, {});
  ASSERT_EQ(d.size(), 5u);
  const TokenLogprobs lp = token_logprobs(logits, p, {}, &d, d.ids[2], 8);
  // The reference: softmax(z / T) over the 5 largest logits.
  std::vector<int32_t> order(500);
  for (int i = 0; i < 500; ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](int a, int b) { return logits[a] > logits[b]; });
  std::vector<float> kept;
  for (int j = 0; j < 5; ++j) kept.push_back(logits[order[j]]);
  const auto ref = log_softmax(kept, 0.7);
  ASSERT_EQ(lp.top.size(), 8u);
  for (size_t j = 0; j < 8; ++j) {
    EXPECT_EQ(lp.top[j].token, order[j]) << j;
    if (j < 5) EXPECT_NEAR(lp.top[j].logprob, ref[j], 1e-5) << j;
    else EXPECT_EQ(lp.top[j].logprob, kNegInf) << j;
  }
  EXPECT_EQ(lp.chosen.token, order[2]);
  EXPECT_NEAR(lp.chosen.logprob, ref[2], 1e-5);
}

const test::TinyPair& models() {
  static const test::TinyPair f = [] {
    test::TinyModelSpec t;
    t.arch = "qwen2";
    t.tied_embeddings = false;
    t.seed = 3;
    return test::write_tiny_pair(test::scratch_dir("logprobs"), t);
  }();
  return f;
}

std::unique_ptr<Engine> load(const std::string& device = "cpu", size_t kv_mem = 4 << 20) {
  LoadOptions o;
  o.model_path = models().target;
  o.draft_model_path = models().close_draft;
  o.threads = 1;
  o.context = 128;
  o.kv_mem_bytes = kv_mem;
  o.device = device;
  return Engine::load(o);
}

GenerateOptions options(DraftMode mode, bool sampled, int32_t n_top = 5) {
  GenerateOptions g;
  g.max_tokens = 16;
  g.ignore_eos = true;
  g.logprobs = n_top;
  g.speculative.mode = mode;
  g.speculative.draft_max = 3;
  g.speculative.verify = VerifyMode::Coupled;  // sampled: one text per seed, whatever drafts
  if (sampled) {
    g.sampling.temperature = 0.8f;
    g.sampling.top_k = 8;
    g.sampling.top_p = 1.0f;
    g.sampling.min_p = 0.0f;
    g.sampling.seed = 9;
  } else {
    g.sampling.temperature = 0.0f;
  }
  return g;
}

void expect_same(const std::vector<TokenLogprobs>& a, const std::vector<TokenLogprobs>& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].chosen.token, b[i].chosen.token) << what << " token " << i;
    EXPECT_EQ(a[i].chosen.logprob, b[i].chosen.logprob) << what << " token " << i;
    ASSERT_EQ(a[i].top.size(), b[i].top.size()) << what;
    for (size_t j = 0; j < a[i].top.size(); ++j) {
      EXPECT_EQ(a[i].top[j].token, b[i].top[j].token) << what << " token " << i << " alt " << j;
      EXPECT_EQ(a[i].top[j].logprob, b[i].top[j].logprob) << what << " token " << i << " alt " << j;
    }
  }
}

// A row's token ids, most likely first (ties: lower id first, as token_logprobs lists them).
std::vector<int32_t> by_logit(const std::vector<float>& row) {
  std::vector<int32_t> order(row.size());
  for (size_t j = 0; j < row.size(); ++j) order[j] = static_cast<int32_t>(j);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return row[a] > row[b]; });
  return order;
}

// Each token's logprobs against an independent computation from Engine::logits of the whole
// sequence: greedy → log-softmax at T = 1; sampled → log-softmax of the top-8 logits at T.
// presence: the request's presence penalty (each token already in the sequence loses it).
void expect_matches_logits(Engine& e, const std::vector<int32_t>& prompt, const GenerateResult& r, bool sampled,
                           float presence = 0.0f) {
  std::vector<int32_t> all = prompt;
  all.insert(all.end(), r.tokens.begin(), r.tokens.end());
  const auto logits = e.logits(all);
  const size_t vocab = static_cast<size_t>(e.info().n_vocab);
  ASSERT_EQ(r.logprobs.size(), r.tokens.size());
  for (size_t i = 0; i < r.tokens.size(); ++i) {
    std::vector<float> row(&logits[(prompt.size() - 1 + i) * vocab], &logits[(prompt.size() + i) * vocab]);
    if (presence != 0.0f) {
      std::vector<bool> seen(vocab, false);
      for (size_t j = 0; j < prompt.size() + i; ++j) seen[static_cast<size_t>(all[j])] = true;
      for (size_t t = 0; t < vocab; ++t)
        if (seen[t]) row[t] -= presence;
    }
    const std::vector<int32_t> order = by_logit(row);
    std::vector<double> ref(vocab, -INFINITY);
    if (sampled) {
      std::vector<float> kept;
      for (int j = 0; j < 8; ++j) kept.push_back(row[order[j]]);
      const auto ls = log_softmax(kept, 0.8);
      for (int j = 0; j < 8; ++j) ref[order[j]] = ls[j];
    } else {
      ref = log_softmax(row);
    }
    const TokenLogprobs& lp = r.logprobs[i];
    EXPECT_EQ(lp.chosen.token, r.tokens[i]);
    EXPECT_NEAR(lp.chosen.logprob, ref[r.tokens[i]], 1e-4) << "token " << i;
    ASSERT_EQ(lp.top.size(), 5u);
    for (size_t j = 0; j < 5; ++j) {
      EXPECT_EQ(lp.top[j].token, order[j]) << "token " << i << " alt " << j;
      EXPECT_NEAR(lp.top[j].logprob, ref[order[j]], 1e-4) << "token " << i << " alt " << j;
    }
    if (!sampled) {
      EXPECT_EQ(lp.top[0].token, r.tokens[i]) << "greedy picks the most likely";
    }
  }
}

// On the CUDA backend every request is decoded on the device, logprobs and all: each
// result says its steps were verified there.
void expect_on_device(const std::string& device, const GenerateResult& r, const std::string& what) {
  if (device == "cuda-emulated") {
    EXPECT_GT(r.speculative.device_verified_steps, 0) << what << ": verified on the device";
  }
}

void logprobs_match_the_logits(const std::string& device, int32_t n_tokens) {
  auto opts = [&](DraftMode mode, bool sampled) {
    GenerateOptions g = options(mode, sampled);
    g.max_tokens = n_tokens;
    return g;
  };
  auto e = load(device);
  const auto prompt = test::random_prompt(12, 4, 7);
  for (bool sampled : {false, true}) {
    const GenerateResult plain = e->generate_tokens(prompt, opts(DraftMode::None, sampled));
    expect_matches_logits(*e, prompt, plain, sampled);
    expect_on_device(device, plain, "plain");
    for (DraftMode mode : {DraftMode::Ngram, DraftMode::Model}) {
      const GenerateResult spec = e->generate_tokens(prompt, opts(mode, sampled));
      const std::string what = std::string(sampled ? "sampled" : "greedy") + " mode " + std::to_string(int(mode));
      EXPECT_EQ(spec.tokens, plain.tokens) << what;
      expect_same(spec.logprobs, plain.logprobs, what);
      if (mode == DraftMode::Model) {
        EXPECT_GT(spec.speculative.accepted_tokens, 0) << what;
      }
    }
    // Rejection sampling gives other tokens with drafts (its text depends on k), but each
    // token's logprobs are still the target's at its position, drafted or not.
    for (DraftMode mode : {DraftMode::Ngram, DraftMode::Model}) {
      GenerateOptions rej = opts(mode, sampled);
      rej.speculative.verify = VerifyMode::Rejection;
      const GenerateResult r = e->generate_tokens(prompt, rej);
      expect_matches_logits(*e, prompt, r, sampled);
      expect_on_device(device, r, "rejection");
      if (mode == DraftMode::Model) {
        EXPECT_GT(r.speculative.accepted_tokens, 0);
      }
    }
    // The streamed logprobs are the result's, one event per token.
    std::vector<TokenLogprobs> streamed;
    const GenerateResult s = e->generate_tokens(prompt, opts(DraftMode::Model, sampled), [&](const StreamEvent& ev) {
      if (ev.logprobs) streamed.push_back(*ev.logprobs);
      return true;
    });
    expect_same(streamed, s.logprobs, "streamed");
  }
  // Penalties see the tokens accepted before each position: drafted or not, the same numbers,
  // those of the penalised logits.
  for (bool sampled : {false, true}) {
    GenerateOptions pen = opts(DraftMode::None, sampled);
    pen.sampling.presence_penalty = 0.7f;
    const GenerateResult alone = e->generate_tokens(prompt, pen);
    expect_matches_logits(*e, prompt, alone, sampled, 0.7f);
    pen.speculative.mode = DraftMode::Model;
    pen.speculative.verify = VerifyMode::Rejection;
    expect_matches_logits(*e, prompt, e->generate_tokens(prompt, pen), sampled, 0.7f);
    pen.speculative.mode = DraftMode::None;
    pen.speculative.verify = VerifyMode::Coupled;
    pen.sampling.repetition_penalty = 1.3f;
    const GenerateResult plain = e->generate_tokens(prompt, pen);
    for (DraftMode mode : {DraftMode::Ngram, DraftMode::Model}) {
      pen.speculative.mode = mode;
      const GenerateResult spec = e->generate_tokens(prompt, pen);
      EXPECT_EQ(spec.tokens, plain.tokens);
      expect_same(spec.logprobs, plain.logprobs, "penalties, mode " + std::to_string(int(mode)));
    }
  }
  // Without asking: none, and the output is unchanged.
  GenerateOptions none = opts(DraftMode::Model, true);
  none.logprobs = -1;
  const GenerateResult r = e->generate_tokens(prompt, none);
  EXPECT_TRUE(r.logprobs.empty());
  EXPECT_EQ(r.tokens, e->generate_tokens(prompt, opts(DraftMode::None, true)).tokens);
  none.logprobs = 21;
  EXPECT_THROW(e->generate_tokens(prompt, none), std::invalid_argument);
}

TEST(Logprobs, MatchTheTargetsLogitsAndDoNotDependOnSpeculation) { logprobs_match_the_logits("cpu", 16); }

// The same on the CUDA backend (under the emulator), where they are reached on the device
// with each verdict (logprob_rows) and checked against the backend's own logits (fewer
// tokens: the emulator is slow).
TEST(Logprobs, OnTheCudaBackendTheyAreReachedOnTheDeviceAndMatchTheLogits) {
  logprobs_match_the_logits("cuda-emulated", 10);
}

struct Done {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<GenerateResult> results;
  std::vector<std::vector<TokenLogprobs>> streamed;
  // Per request: its calls, and the prompt's logprobs its first call brought (written on the
  // scheduler's thread, read after wait()).
  std::map<size_t, int> calls;
  std::map<size_t, std::vector<TokenLogprobs>> streamed_prompt;
  size_t n = 0;
};

ServeRequest request(const std::vector<int32_t>& prompt, const GenerateOptions& o, Done& d, size_t i) {
  ServeRequest r;
  r.prompt = prompt;
  r.opts = o;
  r.on_text = [&d, i](const StreamEvent& ev) {
    if (ev.logprobs) d.streamed[i].push_back(*ev.logprobs);
    if (ev.prompt_logprobs) {
      EXPECT_EQ(d.calls[i], 0) << "request " << i << ": the prompt's logprobs come with the first call";
      d.streamed_prompt[i] = *ev.prompt_logprobs;
    }
    ++d.calls[i];
    return true;
  };
  r.on_done = [&d, i](const GenerateResult& res, const std::string& err) {
    EXPECT_EQ(err, "");
    std::lock_guard<std::mutex> lk(d.mu);
    d.results[i] = res;
    ++d.n;
    d.cv.notify_all();
  };
  return r;
}

void wait(Done& d, size_t n) {
  std::unique_lock<std::mutex> lk(d.mu);
  ASSERT_TRUE(d.cv.wait_for(lk, std::chrono::seconds(300), [&] { return d.n == n; }));
}

// Batched in the scheduler beside each other (and beside a greedy request without
// logprobs), the logprobs are those of the request alone; on the CUDA backend every request
// is verified on the device.
void scheduler_keeps_logprobs(const std::string& device, int32_t max_tokens) {
  auto e = load(device);
  const auto prompt = test::random_prompt(10, 8, 7);
  std::vector<GenerateOptions> opts;
  for (DraftMode mode : {DraftMode::None, DraftMode::Ngram, DraftMode::Model})
    for (bool sampled : {false, true}) opts.push_back(options(mode, sampled));
  GenerateOptions device_greedy = options(DraftMode::Model, false);
  device_greedy.logprobs = -1;
  opts.push_back(device_greedy);
  for (auto& o : opts) o.max_tokens = max_tokens;
  std::vector<GenerateResult> alone;
  for (const auto& o : opts) alone.push_back(e->generate_tokens(prompt, o));
  Done d;
  d.results.resize(opts.size());
  d.streamed.resize(opts.size());
  {
    Scheduler s(*e, SchedulerOptions{});
    for (size_t i = 0; i < opts.size(); ++i) ASSERT_EQ(s.submit(request(prompt, opts[i], d, i)).status, SubmitStatus::Ok);
    wait(d, opts.size());
    if (device == "cuda-emulated") {
      EXPECT_GT(s.stats().device_verified, 0) << "verified on the device";
    }
    s.shutdown(true);
  }
  for (size_t i = 0; i < opts.size(); ++i) {
    expect_on_device(device, d.results[i], "batched " + std::to_string(i));
    expect_on_device(device, alone[i], "alone " + std::to_string(i));
    EXPECT_EQ(d.results[i].tokens, alone[i].tokens) << i;
    expect_same(d.results[i].logprobs, alone[i].logprobs, "batched " + std::to_string(i));
    expect_same(d.streamed[i], alone[i].logprobs, "streamed " + std::to_string(i));
    // Across speculation modes too (pairs of greedy/sampled per mode).
    if (i >= 2 && i < 6) expect_same(d.results[i].logprobs, d.results[i % 2].logprobs, "mode " + std::to_string(i));
  }
  EXPECT_TRUE(d.results.back().logprobs.empty());
}

TEST(Logprobs, SchedulerBatchingChangesNothing) { scheduler_keeps_logprobs("cpu", 16); }

// The CUDA backend (under the emulator: slow, so few tokens) verifies every request on the
// device, those asking for logprobs too.
TEST(Logprobs, OnTheCudaBackendBatchingChangesNothing) { scheduler_keeps_logprobs("cuda-emulated", 6); }

// n > 1: a group shares the prompt's blocks through the prefix cache; each choice is its own
// request, so a choice with the seed of a lone request reproduces it.
TEST(SubmitGroup, ChoicesShareThePromptAndKeepTheirOwnStreams) {
  auto e = load();
  const auto prompt = test::random_prompt(40, 12, 7);  // two full 16-token blocks and a bit
  std::vector<GenerateOptions> opts;
  for (uint64_t seed : {1u, 2u, 3u}) {
    GenerateOptions o = options(DraftMode::Model, true);
    o.sampling.seed = seed;
    o.max_tokens = 12;
    opts.push_back(o);
  }
  std::vector<GenerateResult> alone;
  for (const auto& o : opts) alone.push_back(e->generate_tokens(prompt, o));
  Done d;
  d.results.resize(opts.size());
  d.streamed.resize(opts.size());
  Scheduler s(*e, SchedulerOptions{});
  std::vector<ServeRequest> group;
  for (size_t i = 0; i < opts.size(); ++i) group.push_back(request(prompt, opts[i], d, i));
  const SubmitGroupResult g = s.submit_group(std::move(group));
  ASSERT_EQ(g.status, SubmitStatus::Ok) << g.message;
  ASSERT_EQ(g.ids.size(), 3u);
  wait(d, 3);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(d.results[i].tokens, alone[i].tokens) << i;
    expect_same(d.results[i].logprobs, alone[i].logprobs, "choice " + std::to_string(i));
  }
  EXPECT_NE(d.results[0].tokens, d.results[1].tokens) << "different seeds, different choices";
  const SchedulerStats st = s.stats();
  EXPECT_EQ(st.prefix_cache_hits_tokens, 2 * 2 * 16) << "choices 1 and 2 reuse the prompt's two full blocks";
  EXPECT_EQ(st.prompt_tokens_total, 3 * 40);
  // A leader cancelled while it reads the prompt does not hold its group back.
  {
    Done c;
    c.results.resize(2);
    c.streamed.resize(2);
    std::vector<ServeRequest> pair;
    for (size_t i = 0; i < 2; ++i) pair.push_back(request(test::random_prompt(100, 13, 7), opts[i], c, i));
    pair[0].on_done = [&c](const GenerateResult& res, const std::string&) {
      std::lock_guard<std::mutex> lk(c.mu);
      c.results[0] = res;
      ++c.n;
      c.cv.notify_all();
    };
    const SubmitGroupResult cg = s.submit_group(std::move(pair));
    ASSERT_EQ(cg.status, SubmitStatus::Ok);
    s.cancel(cg.ids[0]);
    wait(c, 2);
    EXPECT_EQ(c.results[0].finish, FinishReason::Cancelled);
    EXPECT_EQ(c.results[1].tokens.size(), 12u);
  }
  // All or nothing: a group larger than the queue is refused whole; mixed prompts are invalid.
  SchedulerOptions small;
  small.max_queue = 2;
  s.shutdown(true);
  Scheduler t(*e, small);
  std::vector<ServeRequest> big(3);
  for (auto& r : big) r.prompt = prompt;
  EXPECT_EQ(t.submit_group(std::move(big)).status, SubmitStatus::QueueFull);
  std::vector<ServeRequest> mixed(2);
  mixed[0].prompt = prompt;
  mixed[1].prompt = {1, 2};
  EXPECT_EQ(t.submit_group(std::move(mixed)).status, SubmitStatus::Invalid);
  EXPECT_EQ(t.stats().requests_total, 0);
}

// ---- prompt logprobs ------------------------------------------------------------------------

// Each prompt token's logprobs against an independent log-softmax of Engine::logits over the
// prompt (the raw logits at temperature 1, whatever the request samples with).
void expect_prompt_matches_logits(Engine& e, const std::vector<int32_t>& prompt, const GenerateResult& r,
                                  int32_t n_top) {
  const auto logits = e.logits(prompt);
  const size_t vocab = static_cast<size_t>(e.info().n_vocab);
  ASSERT_EQ(r.prompt_logprobs.size(), prompt.size() - 1);
  for (size_t i = 0; i + 1 < prompt.size(); ++i) {
    const std::vector<float> row(&logits[i * vocab], &logits[(i + 1) * vocab]);
    const std::vector<int32_t> order = by_logit(row);
    const auto ref = log_softmax(row);
    const TokenLogprobs& lp = r.prompt_logprobs[i];
    EXPECT_EQ(lp.chosen.token, prompt[i + 1]) << "prompt token " << i + 1;
    EXPECT_NEAR(lp.chosen.logprob, ref[static_cast<size_t>(prompt[i + 1])], 1e-4) << "prompt token " << i + 1;
    ASSERT_EQ(lp.top.size(), static_cast<size_t>(n_top));
    for (size_t j = 0; j < lp.top.size(); ++j) {
      EXPECT_EQ(lp.top[j].token, order[j]) << "prompt token " << i + 1 << " alt " << j;
      EXPECT_NEAR(lp.top[j].logprob, ref[static_cast<size_t>(order[j])], 1e-4) << "prompt token " << i + 1;
    }
  }
}

// Alone: a prompt of one and a half scoring chunks (kPromptLogprobsChunk), sampled with
// speculation (its prompt logprobs are the raw logits' all the same) and greedy; the output
// is what it is without them; with max_tokens 0 only the prompt is scored, to the same bits.
// In the scheduler, beside requests that read the same prompt without scoring it (whose
// blocks the prefix cache then holds) and with a KV budget that preempts: the same bits as
// alone.
void prompt_logprobs_match_the_logits(const std::string& device, int32_t n_tokens) {
  auto e = load(device);
  const auto prompt = test::random_prompt(kPromptLogprobsChunk + 30, 5, 3);
  auto opts = [&](bool sampled, int32_t n_top) {
    GenerateOptions g = options(DraftMode::Model, sampled, -1);
    g.max_tokens = n_tokens;
    g.prompt_logprobs = n_top;
    return g;
  };
  std::vector<GenerateResult> alone;
  for (bool sampled : {false, true}) {
    // The stream's first call brings the prompt's logprobs, complete; no other call does.
    std::vector<TokenLogprobs> first_call;
    int calls = 0, with_prompt = 0;
    const GenerateResult r = e->generate_tokens(prompt, opts(sampled, 4), [&](const StreamEvent& ev) {
      if (ev.prompt_logprobs) {
        ++with_prompt;
        if (calls == 0) first_call = *ev.prompt_logprobs;
      }
      ++calls;
      return true;
    });
    EXPECT_EQ(with_prompt, 1);
    expect_same(first_call, r.prompt_logprobs, "the stream's first call");
    expect_prompt_matches_logits(*e, prompt, r, 4);
    expect_on_device(device, r, sampled ? "sampled" : "greedy");
    EXPECT_TRUE(r.logprobs.empty());
    EXPECT_EQ(r.tokens, e->generate_tokens(prompt, opts(sampled, -1)).tokens) << "the output changed";
    EXPECT_TRUE(e->generate_tokens(prompt, opts(sampled, -1)).prompt_logprobs.empty());
    alone.push_back(r);
  }
  expect_same(alone[0].prompt_logprobs, alone[1].prompt_logprobs, "greedy against sampled");
  GenerateOptions score = opts(false, 4);
  score.max_tokens = 0;
  const GenerateResult scored = e->generate_tokens(prompt, score);
  EXPECT_TRUE(scored.tokens.empty());
  expect_same(scored.prompt_logprobs, alone[0].prompt_logprobs, "scoring only");
  const std::vector<int32_t> one = {prompt[0]};
  EXPECT_TRUE(e->generate_tokens(one, score).prompt_logprobs.empty()) << "one token: nothing to score";
  GenerateOptions bad = opts(false, 21);
  EXPECT_THROW(e->generate_tokens(prompt, bad), std::invalid_argument);

  // Room for about two of these sequences (target and draft, f16, 2 layers, 32 wide).
  auto small = load(device, 2 * 2 * 2 * 32 * 2 * 2 * (prompt.size() + 24));
  std::vector<GenerateOptions> reqs = {opts(false, -1), opts(false, 4), opts(true, 4), score, opts(true, -1),
                                       opts(false, 4)};
  Done d;
  d.results.resize(reqs.size());
  d.streamed.resize(reqs.size());
  {
    SchedulerOptions so;
    so.max_seqs = 4;
    Scheduler s(*small, so);
    // The first reads (and caches) the prompt before the others arrive.
    ASSERT_EQ(s.submit(request(prompt, reqs[0], d, 0)).status, SubmitStatus::Ok);
    wait(d, 1);
    for (size_t i = 1; i < reqs.size(); ++i) ASSERT_EQ(s.submit(request(prompt, reqs[i], d, i)).status, SubmitStatus::Ok);
    wait(d, reqs.size());
    EXPECT_GT(s.stats().preemptions, 0) << "the KV budget was meant to preempt";
    s.shutdown(true);
  }
  for (size_t i : {size_t{1}, size_t{5}}) expect_same(d.results[i].prompt_logprobs, alone[0].prompt_logprobs, "batched greedy");
  expect_same(d.results[2].prompt_logprobs, alone[1].prompt_logprobs, "batched sampled");
  expect_same(d.results[3].prompt_logprobs, alone[0].prompt_logprobs, "batched scoring only");
  EXPECT_TRUE(d.results[3].tokens.empty());
  EXPECT_TRUE(d.results[0].prompt_logprobs.empty());
  EXPECT_TRUE(d.results[4].prompt_logprobs.empty());
  EXPECT_EQ(d.results[1].tokens, alone[0].tokens);
  EXPECT_EQ(d.results[2].tokens, alone[1].tokens);
  // Streamed: the first call of each request that scored and generated brought them whole.
  for (size_t i : {size_t{1}, size_t{2}, size_t{5}}) {
    ASSERT_EQ(d.streamed_prompt.count(i), 1u) << "request " << i;
    expect_same(d.streamed_prompt[i], d.results[i].prompt_logprobs, "streamed in the scheduler");
  }
  for (size_t i : {size_t{0}, size_t{3}, size_t{4}}) EXPECT_EQ(d.streamed_prompt.count(i), 0u) << "request " << i;
}

TEST(PromptLogprobs, AreTheTargetsLogitsAloneAndInTheScheduler) { prompt_logprobs_match_the_logits("cpu", 12); }

// On the CUDA backend the scored rows come to the host from the device's logits, beside
// sequences verified on the device.
TEST(PromptLogprobs, OnTheCudaBackendTheyAreTheTargetsLogits) { prompt_logprobs_match_the_logits("cuda-emulated", 4); }

}  // namespace
}  // namespace tandem
