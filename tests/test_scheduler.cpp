// Continuous batching: outputs do not depend on batching, preemption loses nothing,
// cancellation and limits behave, shutdown drains or cancels.
#include <gtest/gtest.h>

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <future>
#include <map>
#include <mutex>

#include "draft/model_proposer.hpp"
#include "engine/runtime/engine_access.hpp"
#include "engine/runtime/pass_limits.hpp"
#include "engine/model/transformer.hpp"
#include "kernels/graph_capture.hpp"
#include "engine/runtime/scheduler.hpp"
#include "tests/support/paths.hpp"
#include "tests/support/prompts.hpp"
#include "tests/support/tiny_model.hpp"

namespace tandem {
namespace {

// Target (F32) and a close draft (the same weights in F16).
const test::TinyPair& models() {
  static const test::TinyPair f = [] {
    test::TinyModelSpec t;
    t.arch = "llama";
    t.seed = 11;
    return test::write_tiny_pair(test::scratch_dir("sched"), t);
  }();
  return f;
}

// A pair whose greedy output varies (the llama pair above repeats one token, so every draft
// is accepted and a wrong verdict could go unseen).
const test::TinyPair& varied_models() {
  static const test::TinyPair f = [] {
    test::TinyModelSpec t;
    t.arch = "qwen2";
    t.tied_embeddings = false;
    t.seed = 3;
    return test::write_tiny_pair(test::scratch_dir("sched_varied"), t);
  }();
  return f;
}

std::unique_ptr<Engine> load(size_t kv_mem = 0, const std::string& device = "cpu",
                             const test::TinyPair& pair = models()) {
  LoadOptions o;
  o.model_path = pair.target;
  o.draft_model_path = pair.close_draft;
  o.threads = 1;
  o.context = 128;
  o.kv_mem_bytes = kv_mem;
  o.device = device;
  return Engine::load(o);
}

std::vector<int32_t> prompt_of(int n, uint32_t seed) {
  return test::random_prompt(n, seed, 7);
}

GenerateOptions greedy(int n, DraftMode mode) { return test::greedy_options(n, mode, 3); }

struct Outcome {
  GenerateResult result;
  std::string error;
  std::string streamed;
};

// Each request alone with speculation off: the outputs batching and drafting must keep.
std::vector<GenerateResult> without_speculation(Engine& e,
                                                const std::vector<std::pair<std::vector<int32_t>, GenerateOptions>>& reqs) {
  std::vector<GenerateResult> out;
  for (const auto& [p, g] : reqs) {
    GenerateOptions o = g;
    o.speculative.mode = DraftMode::None;
    out.push_back(e.generate_tokens(p, o));
  }
  return out;
}

// Submits all requests at once and waits for every on_done; `each_token` (if set) runs on
// the scheduler thread at every streamed piece.
std::vector<Outcome> run_all(Scheduler& s, const std::vector<std::pair<std::vector<int32_t>, GenerateOptions>>& reqs,
                             const std::function<void()>& each_token = {}) {
  std::vector<Outcome> out(reqs.size());
  std::mutex mu;
  std::condition_variable cv;
  size_t done = 0;
  // "At once": no token goes out before every request is in, so a descheduled test thread
  // cannot let the first requests finish before the last arrive (the batching, memory
  // pressure and preemption the tests mean to cause would then not happen).
  bool all_in = false;
  for (size_t i = 0; i < reqs.size(); ++i) {
    ServeRequest r;
    r.prompt = reqs[i].first;
    r.opts = reqs[i].second;
    r.on_text = [&out, i, &each_token, &mu, &cv, &all_in](const StreamEvent& ev) {
      {
        std::unique_lock<std::mutex> lk(mu);
        cv.wait_for(lk, std::chrono::seconds(60), [&] { return all_in; });
      }
      out[i].streamed += ev.text;
      if (each_token) each_token();
      return true;
    };
    r.on_done = [&, i](const GenerateResult& res, const std::string& err) {
      std::lock_guard<std::mutex> lk(mu);
      out[i].result = res;
      out[i].error = err;
      ++done;
      cv.notify_all();
    };
    const SubmitResult sr = s.submit(std::move(r));
    EXPECT_EQ(sr.status, SubmitStatus::Ok) << sr.message;
  }
  std::unique_lock<std::mutex> lk(mu);
  all_in = true;
  cv.notify_all();
  EXPECT_TRUE(cv.wait_for(lk, std::chrono::seconds(120), [&] { return done == reqs.size(); }));
  // Never return while a callback can still run on this frame's mutex and outputs (a slow
  // run, e.g. under a sanitizer, past the limit above): wait them out; ctest's timeout ends
  // a real hang.
  cv.wait(lk, [&] { return done == reqs.size(); });
  return out;
}

TEST(Scheduler, GreedyOutputDoesNotDependOnBatching) {
  auto e = load(4 << 20);
  for (DraftMode mode : {DraftMode::None, DraftMode::Ngram, DraftMode::Model}) {
    std::vector<std::pair<std::vector<int32_t>, GenerateOptions>> reqs;
    for (int i = 0; i < 16; ++i) reqs.emplace_back(prompt_of(3 + i * 3, i), greedy(8 + i % 5 * 4, mode));
    // Alone (plain Engine::generate, no scheduler) ...
    std::vector<GenerateResult> alone;
    for (auto& [p, g] : reqs) alone.push_back(e->generate_tokens(p, greedy(g.max_tokens, DraftMode::None)));
    // ... and all 16 at once through the scheduler.
    Scheduler s(*e, SchedulerOptions{});
    const auto batched = run_all(s, reqs);
    for (size_t i = 0; i < reqs.size(); ++i) {
      EXPECT_EQ(batched[i].error, "");
      EXPECT_EQ(batched[i].result.tokens, alone[i].tokens) << "request " << i << " mode " << int(mode);
      EXPECT_EQ(batched[i].streamed, batched[i].result.text);
    }
    s.shutdown(true);
    const auto st = s.stats();
    EXPECT_EQ(st.requests_finished, 16);
    EXPECT_EQ(st.kv_blocks_used, 0);
    EXPECT_EQ(st.draft_kv_blocks_used, 0);
    EXPECT_EQ(st.kv_bytes_used, 0);
  }
}

// While a stream decodes, a long prompt that arrives is fed in small chunks (max_step_ms)
// instead of stalling the stream for a whole 256-token chunk; outputs are unchanged, and a
// limit of 0 cuts nothing.
// A policy means the same through the scheduler (the server, the C API's batched path) as
// through Engine::generate: "confidence" drafts under its default p_min (0.5) in both, so its
// drafts stop where the draft is unsure and are shorter than "fixed"'s. The outputs (greedy)
// are the same under both.
// A pair whose draft is sure of some tokens and unsure of others (larger weights: sharper
// distributions), so that a confidence threshold of 0.5 cuts some drafts, not all.
const test::TinyPair& confident_models() {
  static const test::TinyPair f = [] {
    test::TinyModelSpec t;
    t.arch = "qwen2";
    t.tied_embeddings = false;
    t.seed = 3;
    t.weight_scale = 1.0f;
    return test::write_tiny_pair(test::scratch_dir("sched_confident"), t);
  }();
  return f;
}

TEST(Scheduler, TheConfidencePolicyMeansWhatItMeansInGenerate) {
  auto e = load(4 << 20, "cpu", confident_models());
  const auto prompt = prompt_of(9, 4);
  GenerateOptions g = greedy(32, DraftMode::Model);
  g.speculative.draft_max = 4;
  g.speculative.lookup = false;
  auto mean_draft = [](const GenerateResult& r) {
    return r.speculative.drafts > 0 ? double(r.speculative.drafted_tokens) / double(r.speculative.drafts) : 0.0;
  };
  std::map<std::string, GenerateResult> alone, batched;
  for (const std::string policy : {"fixed", "confidence"}) {
    g.speculative.policy = policy;
    alone[policy] = e->generate_tokens(prompt, g);
    Scheduler s(*e, SchedulerOptions{});
    const auto out = run_all(s, {{prompt, g}, {prompt_of(7, 5), g}});
    ASSERT_TRUE(out[0].error.empty()) << out[0].error;
    batched[policy] = out[0].result;
    EXPECT_EQ(batched[policy].tokens, alone[policy].tokens) << policy;
    EXPECT_GT(batched[policy].speculative.drafts, 0) << policy;
  }
  EXPECT_EQ(alone["confidence"].tokens, alone["fixed"].tokens);
  EXPECT_LT(mean_draft(alone["confidence"]), mean_draft(alone["fixed"])) << "no draft was cut: nothing to compare";
  EXPECT_LT(mean_draft(batched["confidence"]), mean_draft(batched["fixed"]))
      << "the scheduler drafted under \"confidence\" as under \"fixed\"";
}

TEST(Scheduler, PromptChunksKeepDecodingStreamsWithinTheStepTime) {
  auto e = load(4 << 20);
  const auto short_prompt = prompt_of(6, 1), long_prompt = prompt_of(100, 77);
  const auto alone_short = e->generate_tokens(short_prompt, greedy(60, DraftMode::None));
  const auto alone_long = e->generate_tokens(long_prompt, greedy(4, DraftMode::None));
  for (double limit : {0.0, 1e-6}) {
    SchedulerOptions so;
    so.max_step_ms = limit;
    so.min_prefill_tokens = 4;
    // The callbacks' state is declared before the scheduler, so it outlives the scheduler's
    // thread even when an assertion below leaves early.
    std::mutex mu;
    std::condition_variable cv;
    bool short_started = false, long_submitted = false;
    int done = 0;
    GenerateResult got_short, got_long;
    Scheduler s(*e, so);
    ServeRequest a;
    a.prompt = short_prompt;
    a.opts = greedy(60, DraftMode::None);
    // The short stream holds its first piece until the long request is in: without this gate a
    // descheduled test thread could let the short stream finish before the long one arrives
    // (seen on CI), and nothing would be left decoding to limit the prompt's chunks.
    a.on_text = [&](const StreamEvent&) {
      std::unique_lock<std::mutex> lk(mu);
      short_started = true;
      cv.notify_all();
      cv.wait_for(lk, std::chrono::seconds(60), [&] { return long_submitted; });
      return true;
    };
    a.on_done = [&](const GenerateResult& r, const std::string&) {
      std::lock_guard<std::mutex> lk(mu);
      got_short = r;
      ++done;
      cv.notify_all();
    };
    ASSERT_EQ(s.submit(std::move(a)).status, SubmitStatus::Ok);
    {
      std::unique_lock<std::mutex> lk(mu);
      ASSERT_TRUE(cv.wait_for(lk, std::chrono::seconds(60), [&] { return short_started; }));
    }
    ServeRequest b;
    b.prompt = long_prompt;
    b.opts = greedy(4, DraftMode::None);
    b.on_text = [](const StreamEvent&) { return true; };
    b.on_done = [&](const GenerateResult& r, const std::string&) {
      std::lock_guard<std::mutex> lk(mu);
      got_long = r;
      ++done;
      cv.notify_all();
    };
    ASSERT_EQ(s.submit(std::move(b)).status, SubmitStatus::Ok);
    {
      std::unique_lock<std::mutex> lk(mu);
      long_submitted = true;
      cv.notify_all();
      ASSERT_TRUE(cv.wait_for(lk, std::chrono::seconds(120), [&] { return done == 2; }));
    }
    s.shutdown(true);
    EXPECT_EQ(got_short.tokens, alone_short.tokens);
    EXPECT_EQ(got_long.tokens, alone_long.tokens);
    const auto st = s.stats();
    if (limit == 0.0) {
      EXPECT_EQ(st.steps_prefill_time_limited, 0);
    } else {
      // 100 prompt tokens at 4 per step while the first stream decodes.
      EXPECT_GE(st.steps_prefill_time_limited, 10) << "steps " << st.steps;
    }
  }
}

TEST(Scheduler, PreemptionLosesNothing) {
  // Room for about two sequences' worth of blocks: the scheduler must preempt and recompute.
  auto probe = load();
  const size_t per_token = 2 * 2 * 2 * 32 * 2;  // 2 models x 2 (K,V) x 2 layers x kv width x f16
  (void)probe;
  auto e = load(per_token * 200);
  std::vector<std::pair<std::vector<int32_t>, GenerateOptions>> reqs;
  for (int i = 0; i < 8; ++i) reqs.emplace_back(prompt_of(20 + i, 100 + i), greedy(40, i % 2 ? DraftMode::Model : DraftMode::None));
  std::vector<GenerateResult> alone;
  for (auto& [p, g] : reqs) alone.push_back(e->generate_tokens(p, greedy(g.max_tokens, DraftMode::None)));
  SchedulerOptions so;
  so.max_seqs = 8;
  Scheduler s(*e, so);
  const auto out = run_all(s, reqs);
  for (size_t i = 0; i < reqs.size(); ++i) {
    EXPECT_EQ(out[i].error, "");
    EXPECT_EQ(out[i].result.tokens, alone[i].tokens) << i;
    EXPECT_EQ(out[i].streamed, out[i].result.text) << i;
  }
  const auto st = s.stats();
  EXPECT_GT(st.preemptions, 0);
  EXPECT_EQ(st.requests_finished, 8);
}

// The same on the CUDA backend (its kernels under the SIMT emulator, both models in its one
// arena): batching, preemption and the prefix cache change no greedy output there either.
// Token trees through the scheduler: several sequences' trees verified in one ragged pass
// (each node reading only its own ancestors), beside chains and plain streams, on the CPU
// and the emulated CUDA backend: greedy outputs are each request's alone, and a sampled
// coupled one is plain decoding's text for its seed.
void check_trees_batched(const std::string& device) {
  {
    auto e = load(0, device, varied_models());
    const bool emulated = device != "cpu";
    const int n = emulated ? 4 : 7;
    std::vector<std::pair<std::vector<int32_t>, GenerateOptions>> reqs;
    for (int i = 0; i < n; ++i) {
      GenerateOptions g = greedy(emulated ? 12 : 20, i == 1 ? DraftMode::None : DraftMode::Model);
      g.speculative.tree_width = i == 2 ? 1 : 2 + i % 3;  // one chain among the trees
      g.speculative.tree_nodes = 4 + 2 * i;
      g.speculative.lookup = false;
      if (i == n - 1) {
        g.sampling.temperature = 0.9f;
        g.sampling.top_k = 8;
        g.sampling.seed = 17;
        g.speculative.verify = VerifyMode::Coupled;
      }
      reqs.emplace_back(prompt_of(4 + i * 3, 40 + i), g);
    }
    if (emulated) {
      // Rejection mode, drawn and verified on the device: a tree and a chain, whose q rows
      // share the draft's store in the same passes. Their outputs are samples (when a
      // stream's first drafts come differs in a batch, so do its draws): each is checked
      // for being the device's, not for its tokens.
      for (int32_t width : {3, 1}) {
        GenerateOptions g = greedy(12, DraftMode::Model);
        g.sampling.temperature = 0.8f;
        g.sampling.top_k = 10;
        g.sampling.seed = 23 + width;
        g.speculative.verify = VerifyMode::Rejection;
        g.speculative.policy = "fixed";
        g.speculative.draft_max = 3;
        g.speculative.tree_width = width;
        g.speculative.tree_nodes = width > 1 ? 8 : 0;
        g.speculative.lookup = false;
        reqs.emplace_back(prompt_of(6 + width, 90 + width), g);
      }
    }
    const auto alone = without_speculation(*e, reqs);
    Scheduler s(*e, SchedulerOptions{});
    const auto batched = run_all(s, reqs);
    int64_t trees = 0;
    for (size_t i = 0; i < reqs.size(); ++i) {
      EXPECT_EQ(batched[i].error, "");
      if (reqs[i].second.speculative.verify == VerifyMode::Rejection) {
        const SpeculativeMetrics& m = batched[i].result.speculative;
        EXPECT_EQ(batched[i].result.tokens.size(), 12u) << "request " << i;
        EXPECT_GT(m.drafted_tokens, 0) << "request " << i;
        EXPECT_EQ(m.device_drafted_tokens, m.drafted_tokens) << "request " << i;
        EXPECT_EQ(m.device_verified_steps, m.target_passes) << "request " << i;
        continue;
      }
      EXPECT_EQ(batched[i].result.tokens, alone[i].tokens) << "request " << i;
      trees += batched[i].result.speculative.tree_steps;
    }
    EXPECT_GT(trees, 0);
    s.shutdown(true);
    EXPECT_EQ(s.stats().kv_blocks_used, 0);
    EXPECT_EQ(s.stats().draft_kv_blocks_used, 0);
  }
}

TEST(Scheduler, TokenTreesInOneRaggedPassChangeNoOutput) { check_trees_batched("cpu"); }
TEST(Scheduler, OnTheCudaBackendTokenTreesInOneRaggedPassChangeNoOutput) { check_trees_batched("cuda-emulated"); }

TEST(Scheduler, OnTheCudaBackendBatchingPreemptionAndThePrefixCacheChangeNothing) {
  const size_t per_token = 2 * 2 * 2 * 32 * 2;  // 2 models x 2 (K,V) x 2 layers x kv width x f16
  auto e = load(per_token * 144, "cuda-emulated", varied_models());  // one context (128 + 16 tokens): the least allowed
  ASSERT_NE(e->info().backend.find("cuda-emulated"), std::string::npos) << e->info().backend;
  const auto system = prompt_of(34, 55);  // two full 16-token blocks and a bit
  std::vector<std::pair<std::vector<int32_t>, GenerateOptions>> first, second;
  const DraftMode modes[] = {DraftMode::None, DraftMode::Model, DraftMode::Ngram};
  for (int i = 0; i < 6; ++i) {
    auto p = system;
    const auto tail = prompt_of(3 + i, 300 + i);
    p.insert(p.end(), tail.begin(), tail.end());
    (i == 0 ? first : second).emplace_back(p, greedy(24, modes[i % 3]));
  }
  // Sampled requests among them (coupled: the same text for a seed however it is drafted
  // and batched), verified on the device too (verify/device_verifier.hpp), the draft model's drafts
  // drawn there (draft_probs.hpp): with top-k, with penalties and top-p, with n-gram drafts.
  GenerateOptions sampled = greedy(24, DraftMode::Model);
  sampled.sampling.temperature = 0.9f;
  sampled.sampling.top_k = 6;
  sampled.sampling.seed = 5;
  sampled.speculative.verify = VerifyMode::Coupled;
  second.emplace_back(second.back().first, sampled);
  GenerateOptions penalised = sampled;
  penalised.sampling.top_k = 0;
  penalised.sampling.top_p = 0.9f;
  penalised.sampling.repetition_penalty = 1.2f;
  penalised.sampling.frequency_penalty = 0.3f;
  penalised.sampling.seed = 6;
  second.emplace_back(second[1].first, penalised);
  GenerateOptions ngram = sampled;
  ngram.speculative.mode = DraftMode::Ngram;
  ngram.sampling.seed = 7;
  second.emplace_back(second[2].first, ngram);
  // A greedy request with a logit bias: its verdict is no plain argmax, so the device makes
  // its rows with the bias (banned and favoured tokens) and verifies them there.
  GenerateOptions biased = greedy(24, DraftMode::Model);
  for (int32_t t = 0; t < 64; t += 3) biased.sampling.logit_bias[t] = t % 2 ? -100.0f : 2.0f;
  second.emplace_back(second[1].first, biased);
  // One that wants logprobs drafts and verifies on the device too, and its logprobs come
  // down with each verdict: those of the request alone.
  GenerateOptions with_logprobs = sampled;
  with_logprobs.logprobs = 2;
  with_logprobs.sampling.seed = 8;
  second.emplace_back(second[3].first, with_logprobs);
  std::vector<GenerateResult> alone;
  for (auto* set : {&first, &second})
    for (auto& [p, g] : *set) {
      GenerateOptions plain = g;
      plain.speculative.mode = DraftMode::None;
      alone.push_back(e->generate_tokens(p, plain));
    }
  // Engine::generate's passes fit the scratch reserved at load (pass_limits.hpp).
  EngineParts parts = EngineAccess::parts(*e);
  EXPECT_EQ(parts.target.scratch_growths(), 0u);
  SchedulerOptions so;
  so.max_seqs = 10;
  Scheduler s(*e, so);
  // ... and the scheduler's passes the scratch it reserved when it started: the backend's
  // scratch slots never move after that (no allocation in the step path).
  kernels::GraphCapture* gc = kernels::graph_capture(parts.target.model().backend());
  ASSERT_NE(gc, nullptr);
  const uint64_t epoch = gc->capture_epoch();
  const auto a = run_all(s, first);   // publishes the shared prefix's blocks
  const auto b = run_all(s, second);  // eight at once where about three fit: preemption
  EXPECT_EQ(a[0].error, "");
  EXPECT_EQ(a[0].result.tokens, alone[0].tokens);
  for (size_t i = 0; i < b.size(); ++i) {
    EXPECT_EQ(b[i].error, "") << i;
    EXPECT_EQ(b[i].result.tokens, alone[i + 1].tokens) << i;
    EXPECT_EQ(b[i].streamed, b[i].result.text) << i;
  }
  const auto st = s.stats();
  EXPECT_GT(st.preemptions, 0);
  EXPECT_GE(st.prefix_cache_hits_tokens, 2 * 16);
  EXPECT_GT(st.device_verified, 0) << "requests should have been verified on the device";
  for (size_t i = 5; i < b.size(); ++i) {
    EXPECT_EQ(b[i].result.speculative.device_verified_steps, b[i].result.speculative.target_passes) << i;
    if (second[i].second.speculative.mode == DraftMode::Model) {
      EXPECT_GT(b[i].result.speculative.device_drafted_tokens, 0) << i;
    }
  }
  const GenerateResult& lp = b.back().result;
  ASSERT_EQ(lp.logprobs.size(), lp.tokens.size());
  ASSERT_EQ(alone.back().logprobs.size(), lp.tokens.size());
  for (size_t i = 0; i < lp.tokens.size(); ++i) {
    EXPECT_EQ(lp.logprobs[i].chosen.logprob, alone.back().logprobs[i].chosen.logprob) << i;
    ASSERT_EQ(lp.logprobs[i].top.size(), 2u) << i;
    for (size_t j = 0; j < 2; ++j) {
      EXPECT_EQ(lp.logprobs[i].top[j].token, alone.back().logprobs[i].top[j].token) << i;
      EXPECT_EQ(lp.logprobs[i].top[j].logprob, alone.back().logprobs[i].top[j].logprob) << i;
    }
  }
  EXPECT_EQ(st.draft_failures, 0) << "a draft pass failed";
  EXPECT_EQ(st.scratch_growths, 0);
  EXPECT_EQ(gc->capture_epoch(), epoch) << "a backend scratch slot moved during the run";
  s.shutdown(true);
  // One request alone with its drafts (Engine::generate also verifies greedy requests on
  // the device): the plain tokens too.
  const auto spec_alone = e->generate_tokens(second[0].first, second[0].second);
  EXPECT_EQ(spec_alone.tokens, alone[1].tokens);
  EXPECT_GT(spec_alone.speculative.accepted_tokens, 0);
  EXPECT_LT(st.speculative.accepted_tokens, st.speculative.drafted_tokens) << "no rejections: a fixture too easy";
  s.shutdown(true);
  EXPECT_EQ(s.stats().kv_blocks_used, 0);
  EXPECT_EQ(s.stats().kv_bytes_used, 0);
}

// Steps beyond the scratch reserved at start (more than kReservedDraftTokens drafts for
// every sequence) still decode the same tokens; the scheduler counts the growth.
TEST(Scheduler, AStepBeyondTheReservedScratchGrowsItAndIsCounted) {
  auto e = load(size_t{8} << 20);
  std::vector<std::pair<std::vector<int32_t>, GenerateOptions>> reqs;
  // Engine::generate's reserve holds a prompt chunk of rows (256): nine sequences verifying
  // 33 positions each need more.
  for (int i = 0; i < 9; ++i) {
    GenerateOptions g = greedy(60, DraftMode::Model);
    g.speculative.draft_max = 32;
    reqs.emplace_back(prompt_of(10 + i, 700 + i), g);
  }
  std::vector<GenerateResult> alone;
  for (auto& [p, g] : reqs) alone.push_back(e->generate_tokens(p, greedy(g.max_tokens, DraftMode::None)));
  SchedulerOptions so;
  so.max_seqs = 9;
  Scheduler s(*e, so);
  const auto out = run_all(s, reqs);
  for (size_t i = 0; i < reqs.size(); ++i) EXPECT_EQ(out[i].result.tokens, alone[i].tokens) << i;
  EXPECT_GT(out[0].result.speculative.accepted_tokens, 2 * (kReservedDraftTokens + 1));
  const auto& per_k = out[0].result.speculative.steps_per_k;
  ASSERT_GT(per_k.size(), 32u);
  EXPECT_GE(per_k[32], 1);
  EXPECT_GT(s.stats().scratch_growths, 0);
}

// A lane drafting on the device next to one drafting on the host in the same draft pass
// (ModelProposer batches its jobs): the host lane's logits rows take rows of the device's q
// store too, which must be sized for them (a short store failed the whole pass). Every
// request the scheduler runs on the CUDA backend drafts on the device (those with logprobs
// too), so the proposer is driven here directly: together, each lane drafts exactly what it
// drafts alone, coupled, with chains and with trees.
TEST(Scheduler, OnTheCudaBackendDeviceAndHostDraftLanesShareADraftPass) {
  auto e = load(0, "cuda-emulated", varied_models());
  EngineParts parts = EngineAccess::parts(*e);
  ASSERT_NE(parts.draft, nullptr);
  ASSERT_NE(parts.draft_probs, nullptr);
  SamplingParams sp;
  sp.temperature = 0.8f;
  sp.top_k = 6;
  const PositionNoise noise(20);
  const std::vector<int32_t> ctx[2] = {prompt_of(12, 400), prompt_of(15, 401)};
  for (const int32_t width : {0, 3}) {
    auto opts = [&](bool on_device) {
      ProposeOptions po;
      po.max_tokens = 4;
      po.sampling = &sp;
      po.coupled = &noise;
      po.vocab = parts.draft->model().config().n_vocab;
      po.on_device = on_device;
      if (width > 0) {
        po.tree_width = width;
        po.tree_nodes = 10;
      }
      return po;
    };
    Proposal alone[2];
    for (int i = 0; i < 2; ++i) {
      ModelProposer p(*parts.draft, parts.draft_probs);
      Rng rng(1);
      alone[i] = p.propose(ctx[i], opts(i == 0), rng);
      ASSERT_FALSE(alone[i].tokens.empty()) << i;
    }
    ModelProposer a(*parts.draft, parts.draft_probs), b(*parts.draft, parts.draft_probs);
    Rng ra(1), rb(1);
    std::vector<ProposeJob> jobs = {{&a, ctx[0], opts(true), &ra}, {&b, ctx[1], opts(false), &rb}};
    propose_all(jobs);
    for (int i = 0; i < 2; ++i) {
      const std::string what = (i == 0 ? "device lane, width " : "host lane, width ") + std::to_string(width);
      EXPECT_EQ(jobs[static_cast<size_t>(i)].error, "") << what;
      EXPECT_EQ(jobs[static_cast<size_t>(i)].out.tokens, alone[i].tokens) << what;
      EXPECT_EQ(jobs[static_cast<size_t>(i)].out.parents, alone[i].parents) << what;
      EXPECT_EQ(jobs[static_cast<size_t>(i)].out.on_device, i == 0) << what;
    }
  }
}

// The step budget (policies/step_budget.hpp) on the emulated CUDA backend: with a cost model
// where a target pass costs the same up to 5 tokens and a whole step more for each token
// beyond, and a draft pass a twentieth of a step, four decoding streams (goodput) can pay for
// exactly one draft token per step (4 pending + 1); alone, a sequence drafts 4. The budget
// grants no more than that, grants it (not vacuous), and the outputs stay the target's.
TEST(Scheduler, OnTheCudaBackendTheStepBudgetGrantsOnlyWhatTheCostModelSaysPays) {
  auto e = load(0, "cuda-emulated", varied_models());
  std::vector<double> r;  // T(k+1) / T(1)
  for (int k = 0; k <= 32; ++k) r.push_back(k <= 4 ? 1.0 : 1.0 + (k - 4));
  e->set_cost_model(std::make_shared<CostModel>(CostModel::from_ratios(0.05, r)));
  std::vector<std::pair<std::vector<int32_t>, GenerateOptions>> reqs;
  for (int i = 0; i < 4; ++i) {
    GenerateOptions g = greedy(32, DraftMode::Model);
    g.speculative.draft_max = 4;
    g.speculative.policy = "goodput";
    g.speculative.start_budget = -1.0f;  // start at once: the budget is what is tested
    reqs.emplace_back(prompt_of(8, 700 + static_cast<uint32_t>(i)), g);
  }
  const std::vector<GenerateResult> plain = without_speculation(*e, reqs);
  const GenerateResult alone = e->generate_tokens(reqs[0].first, reqs[0].second);
  EXPECT_EQ(alone.tokens, plain[0].tokens);
  EXPECT_GT(alone.speculative.steps_per_k.at(4), 0) << "alone, a sequence drafts k = 4";

  SchedulerOptions so;
  so.max_seqs = 4;
  Scheduler s(*e, so);
  const auto out = run_all(s, reqs);
  s.shutdown(true);
  for (size_t i = 0; i < reqs.size(); ++i) {
    EXPECT_EQ(out[i].error, "") << i;
    EXPECT_EQ(out[i].result.tokens, plain[i].tokens) << i;
  }
  const SchedulerStats st = s.stats();
  EXPECT_GT(st.budget_steps, 0);
  EXPECT_GT(st.budget_granted_tokens, 0) << "the one draft that pays was never granted";
  EXPECT_LT(st.budget_granted_tokens, st.budget_wished_tokens);
  // Bucket 0: steps granting none, 1: one; beyond: more than pays while all four decode.
  // Steps with fewer streams (the last ones finishing) may be granted more, so count only
  // what the four-stream steps could have done: at most one draft token each.
  // Buckets (granted tokens per step): 0, 1, 2, 3-4, 5-8, ... With four streams a step pays
  // for one draft token; the last steps, once some sequences have finished, for up to three
  // (two streams: 2 pending + 3 drafts still cost one step). Never more.
  const auto& per_step = st.budget_granted_per_step.counts;
  uint64_t more = 0;
  for (size_t b = 2; b < per_step.size(); ++b) more += per_step[b];
  for (size_t b = 4; b < per_step.size(); ++b) EXPECT_EQ(per_step[b], 0u) << "bucket " << b;
  EXPECT_LE(more, st.budget_steps / 4) << "more than one draft token granted in too many steps";
}

// Batch invariance on the device with quantized weights, where the matmul kernels differ by
// a pass's size (__dp4a below 17 tokens, int8 tensor cores from 17 on) and so do the
// attention's query tiles: a greedy and a coupled-sampling stream give exactly their alone
// output (plain decoding, one token a pass), and a stream that asks for logprobs exactly its
// alone logprobs (the logits' bits), while a 300-token prompt is prefilled in chunks beside
// them, and among 15 other streams speculating k = 3 (64 tokens verified a step). With the
// opt-in GEMM path on weights in the file's layout (TANDEM_PACK=0
// TANDEM_CUDA_GEMM_MIN_TOKENS=64) the logprobs differ.
TEST(Scheduler, OnTheCudaBackendQuantizedStreamsKeepTheirAloneOutputUnderLoad) {
  static const test::TinyPair pair = [] {
    test::TinyModelSpec t;
    t.arch = "qwen2";
    t.tied_embeddings = false;
    t.weight_type = DType::Q8_0;
    t.seed = 5;
    return test::write_tiny_pair(test::scratch_dir("sched_q8_0_cuda"), t);
  }();
  LoadOptions o;
  o.model_path = pair.target;
  o.draft_model_path = pair.close_draft;
  o.threads = 1;
  o.context = 384;
  o.device = "cuda-emulated";
  auto e = Engine::load(o);
  GenerateOptions g = greedy(12, DraftMode::Model);
  g.speculative.policy = "fixed";
  g.speculative.draft_max = 3;
  g.speculative.start_budget = -1.0f;  // drafts from the first step, whatever the machine's speed
  GenerateOptions c = g;
  c.sampling.temperature = 0.9f;
  c.sampling.top_k = 6;
  c.sampling.seed = 9;
  c.speculative.verify = VerifyMode::Coupled;
  GenerateOptions lp = g;
  lp.logprobs = 2;
  const auto pg = prompt_of(9, 70), pc = prompt_of(11, 71), pl = prompt_of(7, 72);
  std::vector<GenerateResult> alone;
  for (const auto& [p, opts] : {std::pair{pg, g}, {pc, c}, {pl, lp}}) {
    GenerateOptions plain = opts;
    plain.speculative.mode = DraftMode::None;
    alone.push_back(e->generate_tokens(p, plain));
  }
  const auto check = [&](const std::vector<Outcome>& out, const char* what) {
    for (size_t i = 0; i < 3; ++i) {
      ASSERT_EQ(out[i].error, "") << what << ", stream " << i;
      EXPECT_EQ(out[i].result.tokens, alone[i].tokens) << what << ", stream " << i;
    }
    ASSERT_EQ(out[2].result.logprobs.size(), alone[2].logprobs.size()) << what;
    for (size_t j = 0; j < alone[2].logprobs.size(); ++j) {
      const TokenLogprobs &a = out[2].result.logprobs[j], &b = alone[2].logprobs[j];
      EXPECT_EQ(std::memcmp(&a.chosen.logprob, &b.chosen.logprob, sizeof(float)), 0) << what << ", token " << j;
      ASSERT_EQ(a.top.size(), b.top.size());
      for (size_t k = 0; k < a.top.size(); ++k)
        EXPECT_EQ(std::memcmp(&a.top[k].logprob, &b.top[k].logprob, sizeof(float)), 0) << what << ", token " << j;
    }
  };
  SchedulerOptions so;
  so.max_seqs = 18;
  so.prefill_chunk = 64;
  so.max_step_ms = 0.0;  // token budgets only: the same steps on a slow (sanitized) build
  Scheduler s(*e, so);
  {
    GenerateOptions long_one = greedy(2, DraftMode::None);
    const auto out = run_all(s, {{pg, g}, {pc, c}, {pl, lp}, {prompt_of(300, 73), long_one}});
    check(out, "beside a 300-token prompt");
    EXPECT_EQ(out[3].error, "");
    EXPECT_GT(s.stats().steps, 5) << "the prompt's chunks should share steps with the streams";
  }
  {
    std::vector<std::pair<std::vector<int32_t>, GenerateOptions>> reqs = {{pg, g}, {pc, c}, {pl, lp}};
    for (uint32_t i = 0; i < 13; ++i) {
      GenerateOptions other = i % 2 ? c : g;
      other.sampling.seed = 20 + i;
      reqs.emplace_back(prompt_of(5 + static_cast<int>(i), 80 + i), other);
    }
    const auto out = run_all(s, reqs);
    check(out, "among 15 other speculating streams");
    for (size_t i = 0; i < out.size(); ++i) EXPECT_GT(out[i].result.speculative.drafted_tokens, 0) << i;
  }
  s.shutdown(true);
}

TEST(Scheduler, SharedPrefixIsReusedAndChangesNothing) {
  auto e = load(4 << 20);
  const auto system = prompt_of(50, 77);  // three full 16-token blocks and a bit
  std::vector<std::pair<std::vector<int32_t>, GenerateOptions>> first, second;
  for (int i = 0; i < 4; ++i) {
    auto p = system;
    const auto tail = prompt_of(5 + i, 200 + i);
    p.insert(p.end(), tail.begin(), tail.end());
    (i == 0 ? first : second).emplace_back(p, greedy(12, DraftMode::None));
  }
  std::vector<GenerateResult> alone;
  for (auto* set : {&first, &second})
    for (auto& [p, g] : *set) alone.push_back(e->generate_tokens(p, g));
  Scheduler s(*e, SchedulerOptions{});
  const auto a = run_all(s, first);   // publishes the system prompt's blocks
  const auto b = run_all(s, second);  // reuses them
  EXPECT_EQ(a[0].result.tokens, alone[0].tokens);
  for (size_t i = 0; i < b.size(); ++i) EXPECT_EQ(b[i].result.tokens, alone[i + 1].tokens) << i;
  EXPECT_GE(s.stats().prefix_cache_hits_tokens, 3 * 3 * 16);
  s.shutdown(true);
  EXPECT_EQ(s.stats().kv_blocks_used, 0);
}

// A fixture whose EOS greedy decoding really emits (the vocabulary's own never comes from
// random weights, which is why the tests above ignore EOS): a token of `base`'s greedy
// continuation that it emits for the first time at position 13 or 14 of a 16-token KV
// block. Prompts base + the first r tokens of that continuation meet the EOS at every
// position within a step's drafts, and the close draft agrees with greedy decoding, so
// drafts past the EOS are accepted as well, some of them into the next block.
struct EosModels {
  test::TinyPair pair;
  int32_t eos = -1;
  std::vector<int32_t> base, continuation;
};

const EosModels& eos_models() {
  static const EosModels m = [] {
    test::TinyModelSpec t;
    t.arch = "qwen2";  // varied output (this llama fixture's greedy output repeats one token)
    t.tied_embeddings = false;
    t.seed = 3;
    EosModels m;
    m.base = prompt_of(8, 1);
    {
      LoadOptions o;
      o.model_path = test::write_tiny_pair(test::scratch_dir("sched-eos-base"), t).target;
      o.threads = 1;
      o.context = 128;
      m.continuation = Engine::load(o)->generate_tokens(m.base, greedy(40, DraftMode::None)).tokens;
    }
    const auto& out = m.continuation;
    auto j = out.begin() + 16;
    auto fits = [&](auto it) {
      const auto pos = m.base.size() + static_cast<size_t>(it - out.begin());
      return (pos % 16 == 13 || pos % 16 == 14) && std::find(out.begin(), it, *it) == it;
    };
    while (j != out.end() && !fits(j)) ++j;
    if (j == out.end()) throw std::runtime_error("eos_models: no new token before a block end after index 16");
    m.eos = *j;
    t.eos_id = m.eos;
    m.pair = test::write_tiny_pair(test::scratch_dir("sched-eos"), t);
    return m;
  }();
  return m;
}

// EOS and stop strings inside accepted drafts, greedy and sampled, with the prefix cache on:
// a sequence's published blocks must hold committed tokens only. Follow-up requests whose
// prompts extend the first ones (chat history: prompt + output + a new turn) adopt those
// blocks and must give the output of a run without the prefix cache.
TEST(Scheduler, StopsInsideAcceptedDraftsPublishOnlyCommittedTokens) {
  const EosModels& m = eos_models();
  LoadOptions o;
  o.model_path = m.pair.target;
  o.draft_model_path = m.pair.close_draft;
  o.threads = 1;
  o.context = 128;
  o.kv_mem_bytes = 4 << 20;
  auto e = Engine::load(o);
  const Tokenizer& tok = EngineAccess::parts(*e).tokenizer;
  const std::string stop = e->detokenize(std::span(m.continuation).subspan(8, 1));
  auto opts = [&](bool sampled, bool with_stop, uint64_t seed) {
    GenerateOptions g = greedy(40, DraftMode::Model);
    g.ignore_eos = false;
    g.speculative.draft_max = 4;
    if (with_stop) g.stop = {stop};
    if (sampled) {
      g.sampling.temperature = 0.2f;
      g.sampling.seed = seed;
    }
    return g;
  };
  std::vector<std::pair<std::vector<int32_t>, GenerateOptions>> first;
  for (size_t r = 0; r < 16; ++r) {
    auto p = m.base;
    p.insert(p.end(), m.continuation.begin(), m.continuation.begin() + static_cast<ptrdiff_t>(r));
    first.emplace_back(p, opts(false, false, 0));
    if (r % 4 == 0) first.emplace_back(p, opts(false, true, 0));
    if (r % 4 == 1) first.emplace_back(p, opts(true, r % 8 == 1, 7 + r));
  }
  // Target-only, no prefix cache: what greedy requests must give; follow-ups built from them.
  auto target_only = [&](const std::vector<int32_t>& p, GenerateOptions g) {
    g.speculative.mode = DraftMode::None;
    return e->generate_tokens(p, g);
  };
  std::vector<GenerateResult> alone;
  std::vector<std::pair<std::vector<int32_t>, GenerateOptions>> second;
  std::vector<GenerateResult> second_alone;
  for (auto& [p, g] : first) {
    alone.push_back(target_only(p, g));
    if (g.sampling.greedy()) {
      ASSERT_EQ(alone.back().finish, FinishReason::Stop);
      auto q = p;
      q.insert(q.end(), alone.back().tokens.begin(), alone.back().tokens.end());
      const auto turn = prompt_of(3, static_cast<uint32_t>(second.size()));
      q.insert(q.end(), turn.begin(), turn.end());
      second.emplace_back(q, opts(false, false, 0));
      second.back().second.max_tokens = 12;
      second_alone.push_back(target_only(q, second.back().second));
    }
  }

  Scheduler s(*e, SchedulerOptions{});
  const auto a = run_all(s, first);
  int eos_stops = 0;
  for (size_t i = 0; i < first.size(); ++i) {
    const GenerateOptions& g = first[i].second;
    EXPECT_EQ(a[i].error, "") << i;
    EXPECT_EQ(a[i].streamed, a[i].result.text) << i;
    if (g.sampling.greedy()) {
      EXPECT_EQ(a[i].result.tokens, alone[i].tokens) << i;
      EXPECT_EQ(a[i].result.finish, alone[i].finish) << i;
    } else if (a[i].result.finish == FinishReason::Stop) {  // the endings target-only decoding has
      const auto& t = a[i].result.tokens;
      EXPECT_TRUE(tok.is_eog(t.back()) || !g.stop.empty()) << i;
      for (const std::string& st : g.stop) EXPECT_EQ(a[i].result.text.find(st), std::string::npos) << i;
      for (size_t k = 0; k + 1 < t.size(); ++k) EXPECT_FALSE(tok.is_eog(t[k])) << i;
    } else {
      EXPECT_EQ(a[i].result.finish, FinishReason::Length) << i;
      EXPECT_EQ(static_cast<int32_t>(a[i].result.tokens.size()), g.max_tokens) << i;
    }
    if (a[i].result.tokens.back() == m.eos) ++eos_stops;
  }
  EXPECT_GT(eos_stops, 0);
  const int64_t hits_before = s.stats().prefix_cache_hits_tokens;
  const auto b = run_all(s, second);
  for (size_t i = 0; i < second.size(); ++i) {
    EXPECT_EQ(b[i].error, "") << i;
    EXPECT_EQ(b[i].result.tokens, second_alone[i].tokens) << i;
    EXPECT_EQ(b[i].result.finish, second_alone[i].finish) << i;
  }
  // Each follow-up adopts at least the first block its first request published.
  EXPECT_GE(s.stats().prefix_cache_hits_tokens - hits_before, static_cast<int64_t>(second.size()) * 16);
  s.shutdown(true);
  EXPECT_EQ(s.stats().kv_blocks_used, 0);
}

TEST(Scheduler, CancelFreesTheSequence) {
  auto e = load(4 << 20);
  Scheduler s(*e, SchedulerOptions{});
  std::promise<GenerateResult> done;
  std::atomic<int> pieces{0};
  std::atomic<bool> cancel_sent{false};
  ServeRequest r;
  r.prompt = prompt_of(10, 1);
  r.opts = greedy(100000, DraftMode::None);  // would run to the context end
  r.on_text = [&](const StreamEvent&) {
    // Hold the scheduler at the third token until the cancel is in, so the request cannot
    // finish on its own first.
    if (++pieces == 3)
      while (!cancel_sent) std::this_thread::yield();
    return true;
  };
  r.on_done = [&](const GenerateResult& res, const std::string&) { done.set_value(res); };
  const auto sr = s.submit(std::move(r));
  ASSERT_EQ(sr.status, SubmitStatus::Ok);
  while (pieces < 3) std::this_thread::yield();
  s.cancel(sr.id);
  cancel_sent = true;
  auto fut = done.get_future();
  ASSERT_EQ(fut.wait_for(std::chrono::seconds(30)), std::future_status::ready);
  EXPECT_EQ(fut.get().finish, FinishReason::Cancelled);
  s.shutdown(true);
  EXPECT_EQ(s.stats().kv_blocks_used, 0);
  EXPECT_EQ(s.stats().requests_cancelled, 1);
}

TEST(Scheduler, RejectsWhatCannotRun) {
  auto e = load(4 << 20);
  SchedulerOptions so;
  so.max_queue = 0;
  Scheduler s(*e, so);
  ServeRequest r;
  r.prompt = prompt_of(200, 1);  // longer than the context of 128
  EXPECT_EQ(s.submit(r).status, SubmitStatus::PromptTooLong);
  r.prompt = {};
  EXPECT_EQ(s.submit(r).status, SubmitStatus::Invalid);
  r.prompt = {5, 99999};
  EXPECT_EQ(s.submit(r).status, SubmitStatus::Invalid);
  r.prompt = prompt_of(5, 2);
  EXPECT_EQ(s.submit(r).status, SubmitStatus::QueueFull);
  s.shutdown(true);
  EXPECT_EQ(s.submit(r).status, SubmitStatus::ShuttingDown);
}

TEST(Scheduler, ShutdownWithoutDrainCancelsEverything) {
  auto e = load(4 << 20);
  std::atomic<int> cancelled{0}, finished{0};
  {
    Scheduler s(*e, SchedulerOptions{});
    for (int i = 0; i < 6; ++i) {
      ServeRequest r;
      r.prompt = prompt_of(8, i);
      r.opts = greedy(100000, DraftMode::None);
      r.on_done = [&](const GenerateResult& res, const std::string&) {
        (res.finish == FinishReason::Cancelled ? cancelled : finished)++;
      };
      ASSERT_EQ(s.submit(std::move(r)).status, SubmitStatus::Ok);
    }
    s.shutdown(false);
  }
  EXPECT_EQ(cancelled + finished, 6);
  EXPECT_GT(cancelled, 0);
}

// A draft-model request's draft reads its prompt the way the target does:
// in chunks spread over steps (one batched draft pass for every sequence catching up),
// within max_step_ms, while that sequence decodes plainly; not whole inside one step,
// stalling every stream. A limit of 0 cuts nothing. Outputs are unchanged.
TEST(Scheduler, DraftPrefillIsChunkedWithinTheStepTime) {
  auto e = load(4 << 20);
  const auto short_prompt = prompt_of(6, 1), long_prompt = prompt_of(60, 78);
  const auto alone_short = e->generate_tokens(short_prompt, greedy(60, DraftMode::None));
  const auto alone_long = e->generate_tokens(long_prompt, greedy(60, DraftMode::None));
  for (double limit : {0.0, 1e-6}) {
    SchedulerOptions so;
    so.max_step_ms = limit;
    so.min_prefill_tokens = 4;
    std::mutex mu;  // (declared before the scheduler: see the test above)
    std::condition_variable cv;
    int short_pieces = 0, done = 0;
    bool long_submitted = false;
    GenerateResult got_short, got_long;
    Scheduler s(*e, so);
    auto submit = [&](const std::vector<int32_t>& prompt, GenerateResult& into, bool count) {
      ServeRequest r;
      r.prompt = prompt;
      r.opts = greedy(60, DraftMode::Model);
      // The short stream's fourth piece waits for the long request (see the test above: else
      // the short stream may end before the long one arrives).
      r.on_text = [&, count](const StreamEvent&) {
        std::unique_lock<std::mutex> lk(mu);
        if (count) ++short_pieces;
        cv.notify_all();
        if (count && short_pieces == 4) cv.wait_for(lk, std::chrono::seconds(60), [&] { return long_submitted; });
        return true;
      };
      r.on_done = [&](const GenerateResult& res, const std::string&) {
        std::lock_guard<std::mutex> lk(mu);
        into = res;
        ++done;
        cv.notify_all();
      };
      ASSERT_EQ(s.submit(std::move(r)).status, SubmitStatus::Ok);
    };
    submit(short_prompt, got_short, true);
    {
      // The long request arrives while the short one is decoding (its draft has read its prompt).
      std::unique_lock<std::mutex> lk(mu);
      ASSERT_TRUE(cv.wait_for(lk, std::chrono::seconds(60), [&] { return short_pieces >= 4; }));
    }
    submit(long_prompt, got_long, false);
    {
      std::unique_lock<std::mutex> lk(mu);
      long_submitted = true;
      cv.notify_all();
      ASSERT_TRUE(cv.wait_for(lk, std::chrono::seconds(120), [&] { return done == 2; }));
    }
    s.shutdown(true);
    EXPECT_EQ(got_short.tokens, alone_short.tokens) << "limit " << limit;
    EXPECT_EQ(got_long.tokens, alone_long.tokens) << "limit " << limit;
    EXPECT_GT(got_long.speculative.drafted_tokens, 0) << "the long request's draft never caught up";
    const auto st = s.stats();
    // Each draft read its whole prompt (and what its sequence committed meanwhile).
    EXPECT_GE(st.draft_prefill_tokens_total, static_cast<int64_t>(short_prompt.size() + long_prompt.size()));
    if (limit == 0.0) {
      EXPECT_EQ(st.steps_draft_prefill_time_limited, 0);
      EXPECT_GE(st.draft_prefill_max_step_tokens, static_cast<int64_t>(long_prompt.size()));
    } else {
      // 60 prompt tokens at 4 per step (the minimum: the limit leaves no room).
      EXPECT_LE(st.draft_prefill_max_step_tokens, 4);
      EXPECT_GE(st.steps_draft_prefill_time_limited, 10) << "steps " << st.steps;
    }
  }
}

// Bytes of KV cache per token of the fixture models (K and V, 2 layers, kv width 32, f16),
// and the least budget a context of 128 tokens allows: 144 token slots of both models.
constexpr size_t kBytesPerToken = 2 * 2 * 32 * 2;
constexpr size_t kLeastBudget = 144 * 2 * kBytesPerToken;

// Both caches draw from one byte budget, so sequences without a draft
// may use all of it (the old fixed equal split held the target to half, preempting them
// while the draft's half stood idle).
TEST(Scheduler, SequencesWithoutADraftUseTheWholeBudget) {
  auto e = load(kLeastBudget);
  std::vector<std::pair<std::vector<int32_t>, GenerateOptions>> reqs;
  for (int i = 0; i < 4; ++i) reqs.emplace_back(prompt_of(30 + i, 300 + i), greedy(30, DraftMode::None));
  std::vector<GenerateResult> alone;
  for (auto& [p, g] : reqs) alone.push_back(e->generate_tokens(p, g));
  Scheduler s(*e, SchedulerOptions{});
  int64_t peak = 0;
  const auto out = run_all(s, reqs, [&] { peak = std::max(peak, s.stats().kv_bytes_used); });
  for (size_t i = 0; i < reqs.size(); ++i) EXPECT_EQ(out[i].result.tokens, alone[i].tokens) << i;
  // 4 sequences of up to 63 positions: 16 blocks of 16; the budget holds 18 target blocks.
  const auto st = s.stats();
  EXPECT_EQ(st.preemptions, 0);
  EXPECT_EQ(st.kv_bytes_total, static_cast<int64_t>(kLeastBudget));
  EXPECT_EQ(st.kv_blocks_total, 18);
  EXPECT_GT(peak, st.kv_bytes_total / 2);  // more than an equal split's half
  EXPECT_LE(peak, st.kv_bytes_total);
}

// A draft-model sequence's step needs target and draft blocks. When both
// do not fit (although the target's alone would), the youngest sequence is preempted and
// loses nothing; no draft is left short of memory (each drafts what it would alone).
TEST(Scheduler, DraftNeedsCountTowardPreemption) {
  auto e = load(kLeastBudget);
  std::vector<std::pair<std::vector<int32_t>, GenerateOptions>> reqs;
  for (int i = 0; i < 3; ++i) reqs.emplace_back(prompt_of(30 + i, 400 + i), greedy(30, DraftMode::Model));
  std::vector<GenerateResult> alone;
  for (auto& [p, g] : reqs) alone.push_back(e->generate_tokens(p, greedy(g.max_tokens, DraftMode::None)));
  Scheduler s(*e, SchedulerOptions{});
  int64_t peak = 0, peak_draft_blocks = 0;
  const auto out = run_all(s, reqs, [&] {
    const auto st = s.stats();
    peak = std::max(peak, st.kv_bytes_used);
    peak_draft_blocks = std::max(peak_draft_blocks, st.draft_kv_blocks_used);
  });
  for (size_t i = 0; i < reqs.size(); ++i) {
    EXPECT_EQ(out[i].error, "");
    EXPECT_EQ(out[i].result.tokens, alone[i].tokens) << i;
    EXPECT_GT(out[i].result.speculative.drafted_tokens, 0) << i;
  }
  s.shutdown(true);
  const auto st = s.stats();
  // Up to 65 target and 64 draft positions each: 3 x (5 + 4) blocks > 18; the target's 15 fit.
  EXPECT_GT(st.preemptions, 0);
  EXPECT_EQ(st.draft_kv_full, 0);
  EXPECT_LE(peak, st.kv_bytes_total);
  EXPECT_GT(peak_draft_blocks, 0);
  EXPECT_EQ(st.kv_bytes_used, 0);
  // A preempted sequence's draft read its context again, as a prefill, once it was back.
  size_t prompts = 0;
  for (auto& [p, g] : reqs) prompts += p.size();
  EXPECT_GT(st.draft_prefill_tokens_total, static_cast<int64_t>(prompts));
}

// A request that cannot be admitted yet waits holding no memory: the prefix-cache blocks
// it adopted on the way in (a preempted request finds its own published blocks) go back.
// Kept, they made the pool look full: needless preemptions, and a lone running sequence
// cut short with "length".
TEST(Scheduler, WaitingRequestsHoldNoPrefixBlocks) {
  auto e = load(kLeastBudget);
  std::vector<std::pair<std::vector<int32_t>, GenerateOptions>> reqs;
  for (int i = 0; i < 5; ++i) reqs.emplace_back(prompt_of(30 + i, 500 + i), greedy(60, DraftMode::None));
  std::vector<GenerateResult> alone;
  for (auto& [p, g] : reqs) alone.push_back(e->generate_tokens(p, g));
  Scheduler s(*e, SchedulerOptions{});
  const auto out = run_all(s, reqs);
  for (size_t i = 0; i < reqs.size(); ++i) EXPECT_EQ(out[i].result.tokens, alone[i].tokens) << i;
  EXPECT_GT(s.stats().preemptions, 0);  // 5 x 6 blocks > 18
}

}  // namespace
}  // namespace tandem
