// Drafting for a scheduler step: each decoding sequence's policy chooses k, then every
// sequence that drafts is one job of propose_all (draft/proposer.hpp: the sequences of one
// draft model draft together, one ragged draft pass per draft position); sequences whose
// draft is still reading their context feed it a chunk instead (they decode plainly
// meanwhile). A failure here costs drafts, never a request.
#include <spdlog/spdlog.h>

#include <algorithm>

#include "engine/runtime/scheduler_impl.hpp"

namespace tandem {

Scheduler::Impl::Drafted Scheduler::Impl::draft_for_step() {
  int32_t n_decode = 0;
  for (auto& r : running)
    if (!r->run()->prefilling()) ++n_decode;
  std::vector<ProposeJob> jobs;
  std::vector<Entry*> job_owner;
  std::vector<Entry*> catching_up;  // decoding plainly while their draft reads the context
  Drafted d;
  for (auto& r : running) {
    if (r->run()->prefilling()) continue;
    guarded(*r, [&] {
      SequenceRun& run = *r->run();
      const int32_t k = run.choose_k(n_decode);
      if (run.draft_prefill_pending() > 0) catching_up.push_back(r.get());
      if (k == 0) {
        run.no_proposal();
      } else if (!run.try_lookup(k)) {  // prompt lookup's drafts this step: no draft pass for it
        jobs.push_back(run.draft_job(k));
        job_owner.push_back(r.get());
      }
    });
    if (r->error.empty()) d.deciding.push_back(r.get());
  }
  propose(jobs, job_owner);
  const bool prompts_wait =
      std::any_of(running.begin(), running.end(), [](const auto& r) { return r->run()->prefilling(); });
  try {
    d.draft_prefill_ms = draft_prefill(catching_up, prompts_wait);
  } catch (const std::exception& ex) {
    drop_drafts(catching_up, "the draft's prefill pass", ex.what());
  }
  return d;
}

// Every sequence's drafts at once, whatever its proposer (draft/proposer.hpp: one batch per
// draft model). A failed batch costs its sequences their drafts for this step, not their
// requests.
void Scheduler::Impl::propose(std::vector<ProposeJob>& jobs, const std::vector<Entry*>& owners) {
  if (jobs.empty()) return;
  propose_all(jobs);
  std::vector<Entry*> failed;
  std::string why;
  int64_t full = 0;
  for (size_t i = 0; i < jobs.size(); ++i) {
    Entry& owner = *owners[i];
    if (!jobs[i].error.empty()) {
      failed.push_back(&owner);
      why = jobs[i].error;
      continue;
    }
    full += jobs[i].kv_full ? 1 : 0;
    guarded(owner, [&] { owner.run()->take_proposal(std::move(jobs[i])); });
  }
  if (!failed.empty()) drop_drafts(failed, "a batched draft pass", why);
  std::lock_guard<std::mutex> lk(mu);
  stats.draft_kv_full += full;
}

// The draft's prefill for the sequences whose draft is catching up (they decode plainly this
// step): one ragged draft pass, chunks cut like the target's prompt chunks (per sequence at
// most prefill_chunk; in all at most max_batch_tokens and what max_step_ms leaves, half of it
// when target prompts wait too). Returns the pass's time.
double Scheduler::Impl::draft_prefill(const std::vector<Entry*>& lanes, bool share) {
  if (lanes.empty()) return 0.0;
  const int32_t by_time = step_time.draft_prefill_budget(share);
  int32_t left = std::min(opts.max_batch_tokens, by_time);
  int64_t wanted = 0;
  std::vector<DraftPrefillJob> jobs;
  std::vector<Entry*> job_owner;  // the sequence of each job
  for (Entry* e : lanes) {
    const int32_t want =
        static_cast<int32_t>(std::min<size_t>(e->run()->draft_prefill_pending(), static_cast<size_t>(opts.prefill_chunk)));
    wanted += want;
    const int32_t n = std::min(want, left);
    if (n <= 0) continue;
    jobs.push_back({e->run()->proposer(), e->run()->committed(), static_cast<size_t>(n)});
    job_owner.push_back(e);
    left -= n;
  }
  const auto t0 = Clock::now();
  prefill_all(jobs);
  const double ms = ms_since(t0);
  int64_t fed = 0, full = 0;
  for (const auto& j : jobs) {
    fed += static_cast<int64_t>(j.fed);
    full += j.kv_full ? 1 : 0;
  }
  // Each sequence's share of the pass, by the tokens it fed.
  if (fed > 0)
    for (size_t i = 0; i < jobs.size(); ++i)
      job_owner[i]->run()->record_draft_prefill(static_cast<int64_t>(jobs[i].fed),
                                              ms * static_cast<double>(jobs[i].fed) / static_cast<double>(fed));
  if (fed > 0) step_time.observe_draft_prefill(ms, static_cast<int32_t>(fed));
  std::lock_guard<std::mutex> lk(mu);
  stats.draft_prefill_tokens_total += fed;
  stats.draft_prefill_max_step_tokens = std::max(stats.draft_prefill_max_step_tokens, fed);
  if (by_time < std::min<int64_t>(wanted, opts.max_batch_tokens)) ++stats.steps_draft_prefill_time_limited;
  stats.draft_kv_full += full;
  return ms;
}

void Scheduler::Impl::drop_drafts(const std::vector<Entry*>& owners, const char* what, const std::string& why) {
  spdlog::warn("scheduler: {} failed ({}); {} sequence(s) decode plainly this step", what, why, owners.size());
  for (Entry* e : owners) {
    if (e->run()->proposer()) e->run()->proposer()->reset();
    guarded(*e, [&] { e->run()->no_proposal(); });
  }
  std::lock_guard<std::mutex> lk(mu);
  ++stats.draft_failures;
}

// Draft cache bytes the next step of `e` may take: the next chunk of its draft's prefill,
// or room for k drafts (draft_max: the policy may choose fewer). 0 when it does not draft.
size_t Scheduler::Impl::draft_need(Entry& e) const {
  const SpeculativeOptions& so = e.req.opts.speculative;
  if (!e.run()->proposer() || so.draft_max <= 0 || e.run()->done() || e.run()->prefilling() ||
      e.run()->result().tokens.empty() ||  // its first step is plain
      e.run()->draft_deferred())           // its policy has not asked for a draft yet
    return 0;
  const int32_t chunk = std::min({opts.prefill_chunk, opts.max_batch_tokens, step_time.draft_prefill_budget(false)});
  return e.run()->proposer()->step_cache_bytes(e.run()->committed(), chunk, so.draft_max);
}

}  // namespace tandem
