// One scheduler step, in the order it runs: admit waiting requests while memory lasts, make
// room (preempting the youngest), take the target's blocks, draft, build ONE ragged target
// batch (decode steps first, then prompt chunks within the token and time budgets), run it,
// let each sequence verify and commit with its own rows, then retire the failed, publish
// full blocks to the prefix cache and retire the finished.
#include <spdlog/spdlog.h>

#include <algorithm>

#include "engine/runtime/scheduler_impl.hpp"

namespace tandem {

bool Scheduler::Impl::step() {
  admit_waiting();
  if (running.empty() || !make_room()) return false;
  reserve_target_blocks();
  const Drafted drafted = draft_for_step();
  int32_t prompt_tokens = 0;
  std::vector<Part> batch = build_batch(drafted, &prompt_tokens);
  std::vector<float> logits;
  const auto t0 = Clock::now();
  target_pass(batch, logits);
  const double ms = ms_since(t0);
  if (!batch.empty()) {
    step_time.observe_step(ms, prompt_tokens);
    int32_t tokens = 0;
    for (const Part& p : batch) tokens += static_cast<int32_t>(p.tokens.size());
    budget.observe_target(*cost_model(), tokens, ms);
  }
  verify_and_commit(batch, ms);
  retire_failed();
  publish_prefixes();
  retire_finished();
  {
    std::lock_guard<std::mutex> lk(mu);
    ++stats.steps;
  }
  update_kv_stats();
  return true;
}

// ---- memory accounting ------------------------------------------------------------------

int32_t Scheduler::Impl::target_positions(Entry& e) const {
  if (e.run()->prefilling()) {  // prompt chunks are bounded
    const int32_t chunk = std::min<int32_t>(opts.prefill_chunk, static_cast<int32_t>(e.run()->prefill_todo().size()));
    return e.run()->kv().length() + chunk;
  }
  return e.run()->next_step_positions();
}

size_t Scheduler::Impl::target_need(Entry& e) const {
  const SequenceKV& kv = e.run()->kv();
  const int32_t bs = kv.cache().block_size();
  const int32_t blocks = (target_positions(e) + bs - 1) / bs;
  const int32_t extra = std::max(0, blocks - static_cast<int32_t>(kv.block_table().size()));
  return static_cast<size_t>(extra) * kv.cache().block_bytes();
}

size_t Scheduler::Impl::running_need() const {
  size_t need = 0;
  for (auto& r : running) need += step_need(*r);
  return need;
}

bool Scheduler::Impl::fits(size_t need) {
  const KVBudget& budget = *parts.target.cache().blocks().budget();
  const size_t block = parts.target.cache().block_bytes();
  if (prefix && need > budget.available())
    prefix->evict(static_cast<int32_t>((need - budget.available() + block - 1) / block));
  return need <= budget.available();
}

// ---- admission and room -----------------------------------------------------------------

// Oldest first, while the pool can hold the newcomer's first chunk on top of the next step of
// everything already running. A newcomer reuses cached KV of its longest shared prefix.
void Scheduler::Impl::admit_waiting() {
  for (;;) {
    std::unique_ptr<Entry> e;
    {
      std::lock_guard<std::mutex> lk(mu);
      if (queue.empty() || static_cast<int32_t>(running.size()) >= opts.max_seqs) return;
      // A group's later choices wait (and, the queue being in order, so does what came
      // after them) until the leader's prompt blocks are in the prefix cache.
      if (waits_for_leader(*queue.front())) return;
      e = std::move(queue.front());
      queue.pop_front();
    }
    try {
      start(*e);
    } catch (const std::exception& ex) {
      retire(std::move(e), ex.what());
      continue;
    }
    if (prefix && e->run()->kv().length() == 0 && !e->run()->wants_prompt_rows()) {  // (a prompt to score is read)
      // The pending token is never cached.
      const auto& c = e->run()->committed();
      const auto todo = std::span<const int32_t>(c).first(c.size() - 1);
      const int32_t bs = parts.target.cache().block_size();
      auto blocks = prefix->lookup(todo, static_cast<int32_t>(todo.size()) / bs);
      if (!blocks.empty()) {
        std::lock_guard<std::mutex> lk(mu);
        stats.prefix_cache_hits_tokens += static_cast<int64_t>(blocks.size()) * bs;
      }
      e->published_blocks = static_cast<int32_t>(blocks.size());
      e->run()->kv().adopt_prefix(std::move(blocks));
    }
    if (!fits(step_need(*e) + running_need()) && !running.empty()) {
      // A waiting request holds no memory: the prefix blocks it adopted go back (it looks
      // them up again when admitted).
      e->run()->kv().clear();
      e->published_blocks = 0;
      std::lock_guard<std::mutex> lk(mu);
      queue.push_front(std::move(e));
      return;
    }
    running.push_back(std::move(e));
  }
}

// Preempts until this step fits, target and draft needs together. A lone sequence's target
// step must fit (its draft takes what is left, decoding plainly without room); if it does
// not, it has used up the whole KV budget and ends with finish reason "length", as at the
// context limit.
bool Scheduler::Impl::make_room() {
  for (;;) {
    if (fits(running_need())) return true;
    if (running.size() > 1) {
      preempt_youngest();
      continue;
    }
    if (fits(target_need(*running.front()))) return true;
    std::unique_ptr<Entry> e = std::move(running.front());
    running.clear();
    e->run()->finish(FinishReason::Length);
    retire(std::move(e), "");
    return false;
  }
}

// The target's blocks for this step are taken now, so that the draft passes can only use
// what is left (finish_step gives back what rejected drafts do not need).
void Scheduler::Impl::reserve_target_blocks() {
  for (auto& r : running) r->run()->kv().reserve(target_positions(*r));
}

// ---- the target pass ----------------------------------------------------------------------

// Decode steps first (their latency), then prompt chunks up to the token budget and, while
// streams decode, what the step's time budget leaves.
std::vector<Scheduler::Impl::Part> Scheduler::Impl::build_batch(const Drafted& d, int32_t* prompt_tokens) {
  std::vector<Part> batch;
  int32_t budget = opts.max_batch_tokens;
  for (Entry* e : d.deciding) {
    if (!e->error.empty()) continue;
    const auto tokens = e->run()->step_tokens();
    budget -= static_cast<int32_t>(tokens.size());
    batch.push_back({e, tokens, true, {}});
  }
  const bool prompts_wait =
      std::any_of(running.begin(), running.end(), [](const auto& r) { return r->run()->prefilling(); });
  const int32_t by_time = d.deciding.empty() ? INT32_MAX : step_time.prompt_budget(d.draft_prefill_ms);
  if (by_time < budget) {
    budget = by_time;
    if (prompts_wait) {
      std::lock_guard<std::mutex> lk(mu);
      ++stats.steps_prefill_time_limited;
    }
  }
  *prompt_tokens = 0;
  // Prompt chunks read with their logits (prompt logprobs) share one chunk's worth of rows
  // a step: the pass's logits hold n_vocab floats a row.
  int32_t score_rows = kPromptLogprobsChunk;
  for (auto& r : running) {
    if (!r->run()->prefilling() || budget <= 0) continue;
    const bool scored = r->run()->wants_prompt_rows();
    if (scored && score_rows <= 0) continue;
    const auto todo = r->run()->prefill_todo();
    size_t n = std::min<size_t>({todo.size(), static_cast<size_t>(opts.prefill_chunk), static_cast<size_t>(budget)});
    if (scored) n = std::min<size_t>(n, static_cast<size_t>(score_rows));
    const auto chunk = todo.first(n);
    batch.push_back({r.get(), chunk, false, {}});
    if (scored) {
      batch.back().prompt_rows_from = r->run()->kv().length();
      score_rows -= static_cast<int32_t>(n);
    }
    budget -= static_cast<int32_t>(chunk.size());
    *prompt_tokens += static_cast<int32_t>(chunk.size());
  }
  return batch;
}

// With a backend that decodes on the device, the logits stay there when some part can be
// verified there (verdicts_on_device). If the batched pass throws, each sequence's part is
// run alone (logits to the host) to find the one(s) that fail; those are marked failed, the
// others get their logits.
void Scheduler::Impl::target_pass(std::vector<Part>& ps, std::vector<float>& logits) {
  auto run = [&](std::span<Part> some, std::vector<float>& out, bool download) {
    Batch b;
    for (Part& p : some) {
      if (p.all_logits) p.e->run()->add_step(b);  // its step's tokens (a tree's with tree attention)
      else b.add(p.e->run()->kv(), p.tokens, std::vector<bool>(p.tokens.size(), p.prompt_rows_from >= 0));
    }
    if (!b.empty()) parts.target.forward(b, out, download);
    const size_t vocab = static_cast<size_t>(parts.target.model().config().n_vocab);
    size_t row = 0;
    for (Part& p : some) {
      if (!p.all_logits && p.prompt_rows_from < 0) continue;
      p.first_row = static_cast<int32_t>(row);
      if (download) p.logits = std::span<const float>(out).subspan(row * vocab, p.tokens.size() * vocab);
      row += p.tokens.size();
    }
  };
  const bool on_device = std::any_of(ps.begin(), ps.end(), [&](const Part& p) {
    return p.all_logits && verifier.on_device(p.e->run()->verdict_on_device());
  });
  bool ran = false;
  try {
    run(ps, logits, !on_device);
    ran = true;
  } catch (const KVCacheFull&) {
    throw;  // the step's blocks were reserved up front: a scheduler bug, not a request's
  } catch (const std::exception& ex) {
    spdlog::warn("scheduler: a batched target pass failed ({}); running its {} sequences one by one", ex.what(),
                 ps.size());
    for (Part& p : ps) guarded(*p.e, [&] { run(std::span<Part>(&p, 1), p.own, true); });
  }
  if (!ran || !on_device) return;
  // Prompt rows to score come to the host whatever else stays on the device.
  for (Part& p : ps)
    if (p.prompt_rows_from >= 0) guarded(*p.e, [&] { download_rows(p); });
  // The pass is done (its KV written): a failure from here on must not run it again.
  try {
    verdicts_on_device(ps);
  } catch (const std::exception& ex) {
    spdlog::warn("scheduler: verification on the device failed ({}); verifying on the host", ex.what());
    for (Part& p : ps) {
      if (!p.all_logits) continue;
      p.verdict.reset();
      guarded(*p.e, [&] { download_rows(p); });
    }
  }
}

void Scheduler::Impl::download_rows(Part& p) {
  const kernels::Tensor& all = parts.target.device_logits();
  kernels::Backend& be = parts.target.model().backend();
  p.own.resize(p.tokens.size() * static_cast<size_t>(all.cols()));
  be.download(p.own.data(), all.slice_rows(p.first_row, static_cast<int64_t>(p.tokens.size())),
              p.own.size() * sizeof(float));
  be.synchronize();
  p.logits = p.own;
}

void Scheduler::Impl::verdicts_on_device(std::vector<Part>& ps) {
  const kernels::Tensor& all = parts.target.device_logits();
  std::vector<DeviceVerifier::Sequence> seqs;
  std::vector<Part*> here;
  for (Part& p : ps) {
    if (!p.all_logits) continue;
    if (verifier.on_device(p.e->run()->verdict_on_device())) {
      seqs.push_back(p.e->run()->device_sequence(p.first_row));
      here.push_back(&p);
    } else {
      download_rows(p);  // q held on the host, or invalid sampling: its rows come to the host
    }
  }
  const kernels::Tensor q = parts.draft_probs ? parts.draft_probs->q() : kernels::Tensor{};
  const std::vector<VerifyResult> verdicts = verifier.verify_on_device(all, seqs, parts.draft_probs ? &q : nullptr);
  for (size_t i = 0; i < here.size(); ++i) here[i]->verdict = verdicts[i];
  std::lock_guard<std::mutex> lk(mu);
  stats.device_verified += static_cast<int64_t>(here.size());
}

// Each decoding sequence verifies and commits with its own rows.
void Scheduler::Impl::verify_and_commit(std::vector<Part>& batch, double target_ms) {
  for (Part& p : batch)
    if (p.all_logits)
      guarded(*p.e, [&] {
        if (p.verdict) p.e->run()->finish_step(*p.verdict, target_ms);
        else p.e->run()->finish_step(p.logits, target_ms);
      });
    else if (p.prompt_rows_from >= 0)
      guarded(*p.e, [&] { p.e->run()->record_prompt_rows(p.prompt_rows_from, p.logits); });
}

// ---- after the pass -------------------------------------------------------------------------

// A request that failed in this step leaves now, with its error; the others go on.
void Scheduler::Impl::retire_failed() {
  for (auto it = running.begin(); it != running.end();) {
    if ((*it)->error.empty()) {
      ++it;
      continue;
    }
    std::unique_ptr<Entry> e = std::move(*it);
    it = running.erase(it);
    const std::string why = e->error;
    spdlog::warn("scheduler: request {} failed: {}", e->id, why);
    e->run()->finish(FinishReason::Cancelled);
    retire(std::move(e), why);
  }
}

// Full blocks of committed tokens become shareable.
void Scheduler::Impl::publish_prefixes() {
  if (!prefix) return;
  for (auto& r : running)
    if (r->run()->result().finish != FinishReason::Cancelled)
      r->published_blocks =
          prefix->publish(r->run()->committed(), r->run()->kv().block_table(), r->run()->kv().length(), r->published_blocks);
}

// Finished sequences leave at once; their blocks are already back in the pool.
void Scheduler::Impl::retire_finished() {
  for (auto it = running.begin(); it != running.end();) {
    if (!(*it)->run()->done()) {
      ++it;
      continue;
    }
    std::unique_ptr<Entry> e = std::move(*it);
    it = running.erase(it);
    retire(std::move(e), "");
  }
}

}  // namespace tandem
