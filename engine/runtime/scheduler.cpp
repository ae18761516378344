// The scheduler's public surface, its thread, and the lifetime of a request in it:
// submitted → queued → started (its SequenceRun) → stepped (scheduler_step.cpp) → retired.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>

#include "engine/runtime/pass_limits.hpp"
#include "engine/runtime/scheduler_impl.hpp"
#include "engine/runtime/sequence_setup.hpp"

namespace tandem {

Scheduler::Impl::Impl(Engine& e, const SchedulerOptions& o)
    : engine(e),
      parts(EngineAccess::parts(e)),
      opts(o),
      step_time(o.max_step_ms, o.min_prefill_tokens),
      budget(BudgetOptions{.latency_slack = o.spec_latency_slack, .max_step_ms = o.max_step_ms}),
      verifier(parts.target.model().backend()) {
  if (o.prefix_cache)
    prefix = std::make_unique<PrefixCache>(parts.target.cache().blocks(), parts.target.cache().block_size());
}

// ---- public surface ----------------------------------------------------------------------

Scheduler::Scheduler(Engine& engine, const SchedulerOptions& opts) : impl_(std::make_unique<Impl>(engine, opts)) {
  if (opts.max_seqs <= 0 || opts.max_queue < 0 || opts.prefill_chunk <= 0 || opts.max_batch_tokens <= 0 ||
      opts.max_step_ms < 0 || opts.min_prefill_tokens <= 0)
    throw std::invalid_argument("scheduler: limits must be positive");
  if (!std::isfinite(opts.spec_latency_slack))
    throw std::invalid_argument("scheduler: the speculation latency slack must be a number (< 0: no limit)");
  const BlockAllocator& blocks = impl_->parts.target.cache().blocks();
  if (!blocks.budget() || (impl_->parts.draft && impl_->parts.draft->cache().blocks().budget() != blocks.budget()))
    throw std::invalid_argument("scheduler: the KV caches must share one budget");
  {
    // Scratch for this scheduler's largest passes now, not in the per-step path.
    std::lock_guard<std::mutex> lk(impl_->parts.mu);
    reserve_pass_scratch(impl_->parts, opts.max_seqs, std::max(opts.max_batch_tokens, opts.prefill_chunk));
    impl_->scratch_growths_at_start = impl_->scratch_growths();
  }
  impl_->stats.kv_blocks_total = blocks.num_total();
  impl_->stats.kv_bytes_total = static_cast<int64_t>(blocks.budget()->total());
  impl_->stats.kv_block_size = impl_->parts.target.cache().block_size();
  impl_->thread = std::thread([this] { impl_->loop(); });
}

Scheduler::~Scheduler() { shutdown(false); }

SubmitResult Scheduler::Impl::check(const ServeRequest& req) const {
  if (req.prompt.empty()) return {SubmitStatus::Invalid, 0, "the prompt is empty"};
  if (static_cast<int32_t>(req.prompt.size()) >= parts.context)
    return {SubmitStatus::PromptTooLong, 0,
            "prompt of " + std::to_string(req.prompt.size()) + " tokens does not fit the context of " +
                std::to_string(parts.context) + " tokens"};
  const int32_t vocab = parts.target.model().config().n_vocab;
  for (int32_t t : req.prompt)
    if (t < 0 || t >= vocab) return {SubmitStatus::Invalid, 0, "prompt token " + std::to_string(t) + " is out of range"};
  if (req.opts.speculative.mode == DraftMode::Model && !parts.draft)
    return {SubmitStatus::Invalid, 0, "draft-model speculation requested but the server has no draft model"};
  if (req.opts.logprobs < -1 || req.opts.logprobs > kMaxTopLogprobs)
    return {SubmitStatus::Invalid, 0, "logprobs must be -1 (none) or in 0.." + std::to_string(kMaxTopLogprobs)};
  // A bad grammar is the client's error, told now rather than at admission (the compiled
  // grammar is cached: submit_group's get() below finds it).
  try {
    (void)parts.grammars.get(req.opts.grammar);
  } catch (const std::invalid_argument& ex) {
    return {SubmitStatus::Invalid, 0, std::string("grammar: ") + ex.what()};
  }
  return {};
}

SubmitResult Scheduler::submit(ServeRequest req) {
  std::vector<ServeRequest> one;
  one.push_back(std::move(req));
  SubmitGroupResult g = submit_group(std::move(one));
  return {g.status, g.ids.empty() ? 0 : g.ids[0], std::move(g.message)};
}

SubmitGroupResult Scheduler::submit_group(std::vector<ServeRequest> reqs) {
  Impl& m = *impl_;
  if (reqs.empty()) return {SubmitStatus::Invalid, {}, "no requests"};
  for (const ServeRequest& r : reqs) {
    if (r.prompt != reqs[0].prompt) return {SubmitStatus::Invalid, {}, "the requests of a group share one prompt"};
    SubmitResult c = m.check(r);
    if (c.status != SubmitStatus::Ok) return {c.status, {}, std::move(c.message)};
  }
  std::lock_guard<std::mutex> lk(m.mu);
  if (m.stopping) return {SubmitStatus::ShuttingDown, {}, "the server is shutting down"};
  if (m.queue.size() + reqs.size() > static_cast<size_t>(m.opts.max_queue))
    return {SubmitStatus::QueueFull, {}, "too many requests waiting (" + std::to_string(m.queue.size()) + ")"};
  SubmitGroupResult r;
  for (ServeRequest& req : reqs) {
    auto e = std::make_unique<Impl::Entry>();
    e->id = m.next_id++;
    e->grammar = m.parts.grammars.get(req.opts.grammar);
    e->req = std::move(req);
    e->arrival = Clock::now();
    e->leader = r.ids.empty() || !m.prefix ? 0 : r.ids[0];
    r.ids.push_back(e->id);
    m.queue.push_back(std::move(e));
    ++m.stats.requests_total;
  }
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
      step();
    } catch (const std::exception& ex) {
      // A failure inside the pass (not a request's own fault we could pin down): fail the
      // running requests rather than crash or hang; the server keeps serving new ones.
      std::vector<std::unique_ptr<Entry>> failed;
      failed.swap(running);
      for (auto& e : failed) {
        if (e->run()) e->run()->finish(FinishReason::Cancelled);
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
  stats.kv_prefix_idle_blocks = prefix ? prefix->idle_blocks() : 0;
  stats.kv_prefix_idle_bytes = stats.kv_prefix_idle_blocks * static_cast<int64_t>(blocks.block_bytes());
  stats.scratch_growths = static_cast<int64_t>(scratch_growths() - scratch_growths_at_start);
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
    if (e->run()) e->run()->finish(FinishReason::Cancelled);
    retire(std::move(e), "");
  }
}

// Builds the per-request objects on first admission. False (and the request is retired
// with an error) when the request cannot run at all.
bool Scheduler::Impl::start(Entry& e) {
  if (e.run()) return true;
  Entry* self = &e;
  auto on_token = [this, self](const StreamEvent& ev) {
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
    return !self->req.on_text || self->req.on_text(ev);
  };
  // The policy decides with the engine's cost model (as calibrated for `serve`).
  e.seq = prepare_sequence(parts, EngineAccess::policy_costs(engine), e.req.prompt, e.req.opts, on_token, e.arrival,
                           e.grammar);
  std::lock_guard<std::mutex> lk(mu);
  stats.prompt_tokens_total += static_cast<int64_t>(e.req.prompt.size());
  return true;
}

bool Scheduler::Impl::waits_for_leader(const Entry& e) const {
  if (e.leader == 0) return false;
  for (const auto& r : running)
    if (r->id == e.leader) return r->run()->prefilling();
  return false;  // the leader is gone (finished, failed) or waits itself: nothing to wait for
}

void Scheduler::Impl::retire(std::unique_ptr<Entry> e, const std::string& error) {
  GenerateResult result;
  if (e->run()) {
    e->run()->kv().clear();
    result = std::move(e->run()->result());
  }
  if (!e->run()) {
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
  e->run()->preempt();
  e->published_blocks = 0;
  std::lock_guard<std::mutex> lk(mu);
  ++stats.preemptions;
  queue.push_front(std::move(e));
}

}  // namespace tandem
