#include "engine/scheduler.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <unordered_set>

#include "draft/model_proposer.hpp"
#include "draft/ngram_proposer.hpp"
#include "engine/engine_access.hpp"
#include "engine/prefix_cache.hpp"
#include "engine/sequence_run.hpp"
#include "policies/factory.hpp"

namespace tandem {

using Clock = std::chrono::steady_clock;

void Histogram::observe(double v) {
  size_t i = 0;
  while (i < bounds.size() && v > bounds[i]) ++i;
  ++counts[i];
  sum += v;
  ++count;
}

namespace {

double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

int32_t blocks_for(int32_t positions, int32_t block_size) { return (positions + block_size - 1) / block_size; }

// Blocks a sequence's cache must add to hold `positions` positions.
size_t extra_blocks(const SequenceKV& kv, int32_t positions) {
  return static_cast<size_t>(
      std::max(0, blocks_for(positions, kv.cache().block_size()) - static_cast<int32_t>(kv.block_table().size())));
}

void moving_average(double& v, double x) {
  constexpr double kWeight = 0.2;  // of the newest step
  v = v == 0.0 ? x : (1 - kWeight) * v + kWeight * x;
}

}  // namespace

struct Scheduler::Impl {
  struct Entry {
    uint64_t id = 0;
    ServeRequest req;
    Clock::time_point arrival;
    std::shared_ptr<const CostModel> costs;  // the policy decides with it; declared first, destroyed last
    std::unique_ptr<Proposer> proposer;
    std::unique_ptr<SpeculationPolicy> policy;
    std::unique_ptr<SequenceRun> run;  // created at first admission; kept across preemption
    bool got_first = false;
    Clock::time_point last_token;
    int32_t published_blocks = 0;  // full blocks already offered to the prefix cache
    std::string error;  // set when this request failed in this step: it alone is retired
  };

  Engine& engine;
  EngineParts parts;
  SchedulerOptions opts;
  std::thread thread;

  mutable std::mutex mu;  // guards everything below up to `running`
  std::condition_variable cv;
  std::deque<std::unique_ptr<Entry>> queue;
  std::unordered_set<uint64_t> cancels;
  SchedulerStats stats;
  bool stopping = false, drain = false;
  uint64_t next_id = 1;

  std::vector<std::unique_ptr<Entry>> running;  // scheduler thread only
  std::unique_ptr<PrefixCache> prefix;           // scheduler thread only
  // Step time model for max_step_ms (scheduler thread only): a step of d decode tokens, p
  // prompt tokens and q draft prefill tokens takes about base_ms + p * prompt_ms +
  // q * draft_prompt_ms. Moving averages of what steps took (the draft's prefill is a pass of
  // its own, timed alone).
  double base_ms = 0.0, prompt_ms = 0.0, draft_prompt_ms = 0.0;
  void observe_step(double ms, int32_t prompt_tokens);
  void observe_draft_prefill(double ms, int32_t tokens);
  int32_t prompt_budget_by_time(double spent_ms) const;
  int32_t draft_prefill_budget_by_time(bool share) const;

  Impl(Engine& e, const SchedulerOptions& o) : engine(e), parts(EngineAccess::parts(e)), opts(o) {
    if (o.prefix_cache)
      prefix = std::make_unique<PrefixCache>(parts.target.cache().blocks(), parts.target.cache().block_size());
  }
  void update_kv_stats();
  size_t draft_need(Entry& e) const;
  double draft_prefill(const std::vector<Entry*>& lanes, bool share);

  void loop();
  bool admit_and_step();
  bool start(Entry& e);
  void retire(std::unique_ptr<Entry> e, const std::string& error);
  void preempt_youngest();
  void apply_cancels();
  // Runs f; an exception fails this request only (it is retired at the end of the step).
  template <class F>
  void guarded(Entry& e, F&& f) {
    if (!e.error.empty()) return;
    try {
      f();
    } catch (const std::exception& ex) {
      e.error = ex.what();
      if (e.error.empty()) e.error = "unknown error";
    }
  }
  // A failed draft pass costs its sequences their drafts for this step, not their requests:
  // the target decides alone (plain steps), and the draft state starts over.
  void drop_drafts(const std::vector<Entry*>& owners, const char* what, const std::exception& ex);
  // The target pass over a ragged batch. If it throws, each sequence's part is run alone to
  // find the one(s) that fail; those are marked failed, the others get their logits.
  struct Part {
    Entry* e;
    std::span<const int32_t> tokens;
    bool all_logits;                 // a decode step (logits for every token) or a prompt chunk (none)
    std::span<const float> logits;   // its rows, in `logits` of target_pass (or in `own`)
    std::vector<float> own = {};     // only when the part had to run alone
  };
  void target_pass(std::vector<Part>& parts_in_step, std::vector<float>& logits);
};

void Scheduler::Impl::drop_drafts(const std::vector<Entry*>& owners, const char* what, const std::exception& ex) {
  spdlog::warn("scheduler: {} failed ({}); {} sequence(s) decode plainly this step", what, ex.what(), owners.size());
  for (Entry* e : owners) {
    if (e->run->proposer()) e->run->proposer()->reset();
    guarded(*e, [&] { e->run->set_proposal(Proposal{}, 0.0, 0); });
  }
  std::lock_guard<std::mutex> lk(mu);
  ++stats.draft_failures;
}

void Scheduler::Impl::target_pass(std::vector<Part>& ps, std::vector<float>& logits) {
  auto run = [&](std::span<Part> some, std::vector<float>& out) {
    Batch b;
    for (Part& p : some) {
      if (p.all_logits) b.add_all_logits(p.e->run->kv(), p.tokens);
      else b.add(p.e->run->kv(), p.tokens, std::vector<bool>(p.tokens.size(), false));
    }
    if (!b.empty()) parts.target.forward(b, out);
    const size_t vocab = static_cast<size_t>(parts.target.model().config().n_vocab);
    size_t row = 0;
    for (Part& p : some) {
      if (!p.all_logits) continue;
      p.logits = std::span<const float>(out).subspan(row * vocab, p.tokens.size() * vocab);
      row += p.tokens.size();
    }
  };
  try {
    run(ps, logits);
  } catch (const KVCacheFull&) {
    throw;  // the step's blocks were reserved up front: a scheduler bug, not a request's
  } catch (const std::exception& ex) {
    spdlog::warn("scheduler: a batched target pass failed ({}); running its {} sequences one by one", ex.what(),
                 ps.size());
    for (Part& p : ps) guarded(*p.e, [&] { run(std::span<Part>(&p, 1), p.own); });
  }
}

// ---- step time model ------------------------------------------------------------------------

void Scheduler::Impl::observe_step(double ms, int32_t prompt_tokens) {
  if (prompt_tokens == 0) {
    moving_average(base_ms, ms);
  } else if (prompt_tokens >= 4) {  // a few tokens say little about the per-token cost
    moving_average(prompt_ms, std::max(0.0, ms - base_ms) / prompt_tokens);
  }
}

void Scheduler::Impl::observe_draft_prefill(double ms, int32_t tokens) {
  // The pass's fixed cost is shared out over its tokens: small chunks look dearer per
  // token, which errs on the side of short steps.
  if (tokens >= 4) moving_average(draft_prompt_ms, ms / tokens);
}

// Target prompt tokens that fit this step's time, after `spent_ms` of draft prefill.
int32_t Scheduler::Impl::prompt_budget_by_time(double spent_ms) const {
  if (opts.max_step_ms <= 0 || prompt_ms <= 0.0) return INT32_MAX;  // no limit, or nothing measured yet
  const double tokens = (opts.max_step_ms - base_ms - spent_ms) / prompt_ms;
  return std::max(opts.min_prefill_tokens, static_cast<int32_t>(std::min<double>(tokens, INT32_MAX / 2)));
}

// Draft prefill tokens that fit this step's time: all the room, or half of it when target
// prompts wait too (share). Until a draft pass has been timed, the target's per-token cost
// stands in (a draft is the smaller model).
int32_t Scheduler::Impl::draft_prefill_budget_by_time(bool share) const {
  const double per_token = draft_prompt_ms > 0.0 ? draft_prompt_ms : prompt_ms;
  if (opts.max_step_ms <= 0 || per_token <= 0.0) return INT32_MAX;
  const double room = (opts.max_step_ms - base_ms) * (share ? 0.5 : 1.0);
  return std::max(opts.min_prefill_tokens, static_cast<int32_t>(std::min<double>(room / per_token, INT32_MAX / 2)));
}

// ---- public surface ----------------------------------------------------------------------

Scheduler::Scheduler(Engine& engine, const SchedulerOptions& opts) : impl_(std::make_unique<Impl>(engine, opts)) {
  if (opts.max_seqs <= 0 || opts.max_queue < 0 || opts.prefill_chunk <= 0 || opts.max_batch_tokens <= 0 ||
      opts.max_step_ms < 0 || opts.min_prefill_tokens <= 0)
    throw std::invalid_argument("scheduler: limits must be positive");
  const BlockAllocator& blocks = impl_->parts.target.cache().blocks();
  if (!blocks.budget() || (impl_->parts.draft && impl_->parts.draft->cache().blocks().budget() != blocks.budget()))
    throw std::invalid_argument("scheduler: the KV caches must share one budget");
  impl_->stats.kv_blocks_total = blocks.num_total();
  impl_->stats.kv_bytes_total = static_cast<int64_t>(blocks.budget()->total());
  impl_->thread = std::thread([this] { impl_->loop(); });
}

Scheduler::~Scheduler() { shutdown(false); }

SubmitResult Scheduler::submit(ServeRequest req) {
  SubmitResult r;
  Impl& m = *impl_;
  if (req.prompt.empty()) return {SubmitStatus::Invalid, 0, "the prompt is empty"};
  if (static_cast<int32_t>(req.prompt.size()) >= m.parts.context)
    return {SubmitStatus::PromptTooLong, 0,
            "prompt of " + std::to_string(req.prompt.size()) + " tokens does not fit the context of " +
                std::to_string(m.parts.context) + " tokens"};
  const int32_t vocab = m.parts.target.model().config().n_vocab;
  for (int32_t t : req.prompt)
    if (t < 0 || t >= vocab) return {SubmitStatus::Invalid, 0, "prompt token " + std::to_string(t) + " is out of range"};
  if (req.opts.speculative.mode == DraftMode::Model && !m.parts.draft)
    return {SubmitStatus::Invalid, 0, "draft-model speculation requested but the server has no draft model"};
  std::lock_guard<std::mutex> lk(m.mu);
  if (m.stopping) return {SubmitStatus::ShuttingDown, 0, "the server is shutting down"};
  if (static_cast<int32_t>(m.queue.size()) >= m.opts.max_queue)
    return {SubmitStatus::QueueFull, 0, "too many requests waiting (" + std::to_string(m.queue.size()) + ")"};
  auto e = std::make_unique<Impl::Entry>();
  e->id = m.next_id++;
  e->req = std::move(req);
  e->arrival = Clock::now();
  r.id = e->id;
  m.queue.push_back(std::move(e));
  ++m.stats.requests_total;
  m.cv.notify_all();
  return r;
}

void Scheduler::cancel(uint64_t id) {
  std::lock_guard<std::mutex> lk(impl_->mu);
  impl_->cancels.insert(id);
  impl_->cv.notify_all();
}

SchedulerStats Scheduler::stats() const {
  std::lock_guard<std::mutex> lk(impl_->mu);
  SchedulerStats s = impl_->stats;
  s.queue_length = static_cast<int64_t>(impl_->queue.size());
  return s;
}

void Scheduler::shutdown(bool drain) {
  {
    std::lock_guard<std::mutex> lk(impl_->mu);
    if (!impl_->stopping) {
      impl_->stopping = true;
      impl_->drain = drain;
    }
    impl_->cv.notify_all();
  }
  if (impl_->thread.joinable()) impl_->thread.join();
}

// ---- the scheduler thread ----------------------------------------------------------------

void Scheduler::Impl::loop() {
  std::unique_lock<std::mutex> model_lock(parts.mu);  // the models are ours while we run
  for (;;) {
    {
      std::unique_lock<std::mutex> lk(mu);
      cv.wait(lk, [&] { return stopping || !queue.empty() || !running.empty() || !cancels.empty(); });
      if (stopping && !drain) {
        for (auto& e : queue) cancels.insert(e->id);
        for (auto& e : running) cancels.insert(e->id);
      }
      if (stopping && queue.empty() && running.empty() && cancels.empty()) break;
    }
    apply_cancels();
    try {
      admit_and_step();
    } catch (const std::exception& ex) {
      // A failure inside the pass (not a request's own fault we could pin down): fail the
      // running requests rather than crash or hang; the server keeps serving new ones.
      std::vector<std::unique_ptr<Entry>> failed;
      failed.swap(running);
      for (auto& e : failed) {
        if (e->run) e->run->finish(FinishReason::Cancelled);
        retire(std::move(e), std::string("internal error: ") + ex.what());
      }
    }
  }
  prefix.reset();  // gives the cached blocks back to the pool
  update_kv_stats();
}

void Scheduler::Impl::update_kv_stats() {
  const BlockAllocator& blocks = parts.target.cache().blocks();
  std::lock_guard<std::mutex> lk(mu);
  stats.kv_blocks_used = blocks.num_used();
  stats.draft_kv_blocks_used = parts.draft ? parts.draft->cache().blocks().num_used() : 0;
  stats.kv_bytes_used = static_cast<int64_t>(blocks.budget()->used());
  stats.running = static_cast<int64_t>(running.size());
}

void Scheduler::Impl::apply_cancels() {
  std::unordered_set<uint64_t> ids;
  std::vector<std::unique_ptr<Entry>> dropped;
  {
    std::lock_guard<std::mutex> lk(mu);
    if (cancels.empty()) return;
    ids.swap(cancels);
    for (auto it = queue.begin(); it != queue.end();) {
      if (ids.count((*it)->id)) {
        dropped.push_back(std::move(*it));
        it = queue.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (auto it = running.begin(); it != running.end();) {
    if (ids.count((*it)->id)) {
      dropped.push_back(std::move(*it));
      it = running.erase(it);
    } else {
      ++it;
    }
  }
  for (auto& e : dropped) {
    if (e->run) e->run->finish(FinishReason::Cancelled);
    retire(std::move(e), "");
  }
}

// Builds the per-request objects on first admission. False (and the request is retired
// with an error) when the request cannot run at all.
bool Scheduler::Impl::start(Entry& e) {
  if (e.run) return true;
  const SpeculativeOptions& so = e.req.opts.speculative;
  switch (so.mode) {
    case DraftMode::None:
      break;
    case DraftMode::Model:
      e.proposer = std::make_unique<ModelProposer>(*parts.draft);
      break;
    case DraftMode::Ngram:
      e.proposer = std::make_unique<NgramProposer>(so.ngram_min, so.ngram_max);
      break;
  }
  // The engine's cost model (as calibrated for `serve`), kept alive with the entry.
  PolicyCosts costs = EngineAccess::policy_costs(engine);
  e.costs = costs.model;
  e.policy = make_policy(so, costs.model.get(), std::move(costs.overhead));
  Entry* self = &e;
  auto on_token = [this, self](std::string_view text, int32_t token) {
    const auto now = Clock::now();
    {
      std::lock_guard<std::mutex> lk(mu);
      if (!self->got_first) {
        stats.ttft.observe(seconds_between(self->arrival, now));
      } else {
        stats.itl.observe(seconds_between(self->last_token, now));
      }
      ++stats.generated_tokens_total;
    }
    self->got_first = true;
    self->last_token = now;
    return !self->req.on_text || self->req.on_text(text, token);
  };
  e.run = std::make_unique<SequenceRun>(parts.target.cache(), parts.tokenizer, e.req.prompt, e.req.opts, on_token,
                                        parts.context, parts.target.model().config().n_vocab, e.proposer.get(),
                                        e.policy.get(), e.arrival);
  std::lock_guard<std::mutex> lk(mu);
  stats.prompt_tokens_total += static_cast<int64_t>(e.req.prompt.size());
  return true;
}

void Scheduler::Impl::retire(std::unique_ptr<Entry> e, const std::string& error) {
  GenerateResult result;
  if (e->run) {
    e->run->kv().clear();
    result = std::move(e->run->result());
  }
  if (!e->run) {
    result.prompt_tokens = e->req.prompt;
    result.timings.n_prompt = static_cast<int32_t>(e->req.prompt.size());
    result.finish = FinishReason::Cancelled;
  }
  {
    std::lock_guard<std::mutex> lk(mu);
    if (!error.empty()) {
      ++stats.requests_failed;
    } else if (result.finish == FinishReason::Cancelled) {
      ++stats.requests_cancelled;
    } else {
      ++stats.requests_finished;
    }
    stats.speculative.merge(result.speculative);
  }
  update_kv_stats();
  if (e->req.on_done) e->req.on_done(result, error);
}

void Scheduler::Impl::preempt_youngest() {
  // The most recently admitted sequence loses its blocks and waits at the head of the queue:
  // the oldest requests keep making progress, so nothing starves.
  auto it = std::max_element(running.begin(), running.end(),
                             [](const auto& a, const auto& b) { return a->arrival < b->arrival; });
  std::unique_ptr<Entry> e = std::move(*it);
  running.erase(it);
  e->run->preempt();
  e->published_blocks = 0;
  std::lock_guard<std::mutex> lk(mu);
  ++stats.preemptions;
  queue.push_front(std::move(e));
}

// Draft cache bytes the next step of `e` may take: the next chunk of its draft's prefill,
// or room for k drafts (draft_max: the policy may choose fewer). 0 when it does not draft.
size_t Scheduler::Impl::draft_need(Entry& e) const {
  const SpeculativeOptions& so = e.req.opts.speculative;
  if (so.mode != DraftMode::Model || so.draft_max <= 0 || e.run->done() || e.run->prefilling() ||
      e.run->result().tokens.empty())  // its first step is plain
    return 0;
  const SequenceKV& kv = static_cast<const ModelProposer*>(e.run->proposer())->kv();
  const size_t pending = e.run->draft_prefill_pending();
  int32_t positions;
  if (pending > 0) {
    const int32_t chunk = std::min({opts.prefill_chunk, opts.max_batch_tokens, draft_prefill_budget_by_time(false)});
    positions = kv.length() + static_cast<int32_t>(std::min<size_t>(pending, static_cast<size_t>(chunk)));
  } else {
    // The catch-up feeds the whole context, then k - 1 drafts are fed for the next ones.
    positions = static_cast<int32_t>(e.run->committed().size()) + so.draft_max - 1;
  }
  return extra_blocks(kv, positions) * kv.cache().block_bytes();
}

// The draft's prefill for the sequences whose draft is catching up (they decode plainly this
// step): one ragged draft pass, chunks cut like the target's prompt chunks (per sequence at
// most prefill_chunk; in all at most max_batch_tokens and what max_step_ms leaves, half of it
// when target prompts wait too). Returns the pass's time.
double Scheduler::Impl::draft_prefill(const std::vector<Entry*>& lanes, bool share) {
  if (lanes.empty()) return 0.0;
  const int32_t by_time = draft_prefill_budget_by_time(share);
  int32_t left = std::min(opts.max_batch_tokens, by_time);
  int64_t wanted = 0;
  std::vector<ModelProposer::PrefillJob> jobs;
  for (Entry* e : lanes) {
    const int32_t want =
        static_cast<int32_t>(std::min<size_t>(e->run->draft_prefill_pending(), static_cast<size_t>(opts.prefill_chunk)));
    wanted += want;
    const int32_t n = std::min(want, left);
    if (n <= 0) continue;
    jobs.push_back({static_cast<ModelProposer*>(e->run->proposer()), e->run->committed(), static_cast<size_t>(n)});
    left -= n;
  }
  const auto t0 = Clock::now();
  ModelProposer::prefill_batch(*parts.draft, jobs);
  const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  int64_t fed = 0, full = 0;
  for (const auto& j : jobs) {
    fed += static_cast<int64_t>(j.fed);
    full += j.kv_full ? 1 : 0;
  }
  if (fed > 0) observe_draft_prefill(ms, static_cast<int32_t>(fed));
  std::lock_guard<std::mutex> lk(mu);
  stats.draft_prefill_tokens_total += fed;
  stats.draft_prefill_max_step_tokens = std::max(stats.draft_prefill_max_step_tokens, fed);
  if (by_time < std::min<int64_t>(wanted, opts.max_batch_tokens)) ++stats.steps_draft_prefill_time_limited;
  stats.draft_kv_full += full;
  return ms;
}

bool Scheduler::Impl::admit_and_step() {
  KVCache& cache = parts.target.cache();
  const KVBudget& kv_budget = *cache.blocks().budget();
  const size_t target_block = cache.block_bytes();
  // Target positions the next step of a sequence needs (prefill chunks bounded).
  auto target_positions = [&](Entry& e) {
    if (e.run->prefilling()) {
      const int32_t chunk = std::min<int32_t>(opts.prefill_chunk, static_cast<int32_t>(e.run->prefill_todo().size()));
      return e.run->kv().length() + chunk;
    }
    return e.run->next_step_positions();
  };
  auto target_need = [&](Entry& e) { return extra_blocks(e.run->kv(), target_positions(e)) * target_block; };
  // What a running sequence's next step needs of the one budget: target and draft blocks.
  auto step_need = [&](Entry& e) { return target_need(e) + draft_need(e); };
  // Whether `need` bytes are free, once prefix-cache blocks nobody uses are evicted for it.
  auto fits = [&](size_t need) {
    if (prefix && need > kv_budget.available())
      prefix->evict(static_cast<int32_t>((need - kv_budget.available() + target_block - 1) / target_block));
    return need <= kv_budget.available();
  };

  // Admission: oldest first, while the pool can hold the newcomer's first chunk on top of
  // the next step of everything already running.
  for (;;) {
    std::unique_ptr<Entry> e;
    {
      std::lock_guard<std::mutex> lk(mu);
      if (queue.empty() || static_cast<int32_t>(running.size()) >= opts.max_seqs) break;
      e = std::move(queue.front());
      queue.pop_front();
    }
    try {
      start(*e);
    } catch (const std::exception& ex) {
      retire(std::move(e), ex.what());
      continue;
    }
    if (prefix && e->run->kv().length() == 0) {
      // Reuse cached KV of the longest shared prefix; the pending token is never cached.
      const auto& c = e->run->committed();
      const auto todo = std::span<const int32_t>(c).first(c.size() - 1);
      const int32_t bs = cache.block_size();
      auto blocks = prefix->lookup(todo, static_cast<int32_t>(todo.size()) / bs);
      if (!blocks.empty()) {
        std::lock_guard<std::mutex> lk(mu);
        stats.prefix_cache_hits_tokens += static_cast<int64_t>(blocks.size()) * bs;
      }
      e->published_blocks = static_cast<int32_t>(blocks.size());
      e->run->kv().adopt_prefix(std::move(blocks));
    }
    size_t need = step_need(*e);
    for (auto& r : running) need += step_need(*r);
    if (!fits(need) && !running.empty()) {
      // A waiting request holds no memory: the prefix blocks it adopted go back (it looks
      // them up again when admitted).
      e->run->kv().clear();
      e->published_blocks = 0;
      std::lock_guard<std::mutex> lk(mu);
      queue.push_front(std::move(e));
      break;
    }
    running.push_back(std::move(e));
  }
  if (running.empty()) return false;

  // Preempt until this step fits, target and draft needs together. A lone sequence's target
  // step must fit (its draft takes what is left, decoding plainly without room); if it does
  // not, it has used up the whole KV budget and ends with finish reason "length", as at the
  // context limit.
  for (;;) {
    size_t need = 0;
    for (auto& r : running) need += step_need(*r);
    if (fits(need)) break;
    if (running.size() > 1) {
      preempt_youngest();
      continue;
    }
    if (fits(target_need(*running.front()))) break;
    std::unique_ptr<Entry> e = std::move(running.front());
    running.clear();
    e->run->finish(FinishReason::Length);
    retire(std::move(e), "");
    return false;
  }
  // The target's blocks for this step are taken now, so that the draft passes below can only
  // use what is left (finish_step gives back what rejected drafts do not need).
  for (auto& r : running) r->run->kv().reserve(target_positions(*r));

  // One ragged target pass: decode steps first (latency), then prompt chunks up to the
  // token budget.
  int32_t n_decode = 0;
  for (auto& r : running)
    if (!r->run->prefilling()) ++n_decode;
  int32_t budget = opts.max_batch_tokens;
  // Drafts: n-gram proposers run per sequence; every draft-model sequence drafts together,
  // one ragged draft pass per draft position.
  std::vector<ModelProposer::Job> jobs;
  std::vector<Entry*> job_owner;
  std::vector<Entry*> deciding;
  std::vector<Entry*> draft_catching_up;  // decoding plainly while their draft reads the context
  for (auto& r : running) {
    if (r->run->prefilling()) continue;
    guarded(*r, [&] {
      const int32_t k = r->run->choose_k(n_decode);
      if (r->run->draft_prefill_pending() > 0) draft_catching_up.push_back(r.get());
      if (k > 0 && r->req.opts.speculative.mode == DraftMode::Model) {
        jobs.push_back({static_cast<ModelProposer*>(r->run->proposer()), r->run->committed(),
                        r->run->propose_options(k), &r->run->rng(), {}});
        job_owner.push_back(r.get());
      } else if (k > 0) {
        const auto td = Clock::now();
        Proposal p;
        try {
          p = r->run->proposer()->propose(r->run->committed(), r->run->propose_options(k), r->run->rng());
        } catch (const std::exception& ex) {
          drop_drafts({r.get()}, "prompt lookup", ex);
          return;
        }
        r->run->set_proposal(std::move(p), std::chrono::duration<double, std::milli>(Clock::now() - td).count(), 0);
      } else {
        r->run->set_proposal(Proposal{}, 0.0, 0);
      }
    });
    if (r->error.empty()) deciding.push_back(r.get());
  }
  if (!jobs.empty()) {
    std::vector<int64_t> f0;
    for (auto& j : jobs) f0.push_back(j.proposer->forward_passes());
    const auto td = Clock::now();
    try {
      ModelProposer::propose_batch(*parts.draft, jobs);
      // The batch's time is shared equally: each sequence's c then reflects batched drafting.
      const double each = std::chrono::duration<double, std::milli>(Clock::now() - td).count() / double(jobs.size());
      for (size_t i = 0; i < jobs.size(); ++i) {
        Entry& owner = *job_owner[i];
        guarded(owner, [&] {
          owner.run->set_proposal(std::move(jobs[i].out), each, jobs[i].proposer->forward_passes() - f0[i]);
        });
      }
      const auto full = std::count_if(jobs.begin(), jobs.end(), [](const auto& j) { return j.kv_full; });
      std::lock_guard<std::mutex> lk(mu);
      stats.draft_kv_full += full;
    } catch (const std::exception& ex) {
      drop_drafts(job_owner, "the batched draft pass", ex);
    }
  }
  const bool prompts_wait = std::any_of(running.begin(), running.end(), [](const auto& r) { return r->run->prefilling(); });
  double draft_prefill_ms = 0.0;
  try {
    draft_prefill_ms = draft_prefill(draft_catching_up, prompts_wait);
  } catch (const std::exception& ex) {
    drop_drafts(draft_catching_up, "the draft's prefill pass", ex);
  }
  std::vector<Part> step_parts;
  for (Entry* e : deciding) {
    if (!e->error.empty()) continue;
    const auto tokens = e->run->step_tokens();
    budget -= static_cast<int32_t>(tokens.size());
    step_parts.push_back({e, tokens, true, {}});
  }
  // With streams decoding, their latency bounds the prompt work of the step.
  const int32_t by_time = deciding.empty() ? INT32_MAX : prompt_budget_by_time(draft_prefill_ms);
  if (by_time < budget) {
    budget = by_time;
    if (prompts_wait) {
      std::lock_guard<std::mutex> lk(mu);
      ++stats.steps_prefill_time_limited;
    }
  }
  int32_t prompt_tokens = 0;
  for (auto& r : running) {
    if (!r->run->prefilling() || budget <= 0) continue;
    const auto todo = r->run->prefill_todo();
    const auto chunk = todo.first(std::min<size_t>({todo.size(), static_cast<size_t>(opts.prefill_chunk),
                                                    static_cast<size_t>(budget)}));
    step_parts.push_back({r.get(), chunk, false, {}});
    budget -= static_cast<int32_t>(chunk.size());
    prompt_tokens += static_cast<int32_t>(chunk.size());
  }

  std::vector<float> logits;
  const auto t0 = Clock::now();
  target_pass(step_parts, logits);
  const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  if (!step_parts.empty()) observe_step(ms, prompt_tokens);

  // Each decoding sequence verifies and commits with its own rows.
  for (Part& p : step_parts)
    if (p.all_logits) guarded(*p.e, [&] { p.e->run->finish_step(p.logits, ms); });

  // A request that failed in this step leaves now, with its error; the others go on.
  for (auto it = running.begin(); it != running.end();) {
    if (!(*it)->error.empty()) {
      std::unique_ptr<Entry> e = std::move(*it);
      it = running.erase(it);
      const std::string why = e->error;
      spdlog::warn("scheduler: request {} failed: {}", e->id, why);
      e->run->finish(FinishReason::Cancelled);
      retire(std::move(e), why);
    } else {
      ++it;
    }
  }

  // Full blocks of committed tokens become shareable.
  if (prefix)
    for (auto& r : running)
      if (r->run->result().finish != FinishReason::Cancelled)
        r->published_blocks = prefix->publish(r->run->committed(), r->run->kv().block_table(), r->run->kv().length(),
                                              r->published_blocks);

  // Finished sequences leave at once; their blocks are already back in the pool.
  for (auto it = running.begin(); it != running.end();) {
    if ((*it)->run->done()) {
      std::unique_ptr<Entry> e = std::move(*it);
      it = running.erase(it);
      retire(std::move(e), "");
    } else {
      ++it;
    }
  }
  {
    std::lock_guard<std::mutex> lk(mu);
    ++stats.steps;
  }
  update_kv_stats();
  return true;
}

}  // namespace tandem
