// Drafting for a scheduler step: each decoding sequence's policy chooses k; n-gram proposers
// draft alone, every draft-model sequence drafts together (one ragged draft pass per draft
// position); sequences whose draft is still reading their context feed it a chunk instead
// (they decode plainly meanwhile). A failure here costs drafts, never a request.
#include <spdlog/spdlog.h>

#include <algorithm>

#include "engine/runtime/scheduler_impl.hpp"

namespace tandem {
namespace {
int32_t blocks_for(int32_t positions, int32_t block_size) { return (positions + block_size - 1) / block_size; }
}  // namespace

Scheduler::Impl::Drafted Scheduler::Impl::draft_for_step() {
  int32_t n_decode = 0;
  for (auto& r : running)
    if (!r->run->prefilling()) ++n_decode;
  std::vector<ModelProposer::Job> jobs;
  std::vector<Entry*> job_owner;
  std::vector<Entry*> catching_up;  // decoding plainly while their draft reads the context
  Drafted d;
  for (auto& r : running) {
    if (r->run->prefilling()) continue;
    guarded(*r, [&] {
      const int32_t k = r->run->choose_k(n_decode);
      if (r->run->draft_prefill_pending() > 0) catching_up.push_back(r.get());
      propose(*r, k, jobs, job_owner);
    });
    if (r->error.empty()) d.deciding.push_back(r.get());
  }
  propose_with_draft_model(jobs, job_owner);
  const bool prompts_wait =
      std::any_of(running.begin(), running.end(), [](const auto& r) { return r->run->prefilling(); });
  try {
    d.draft_prefill_ms = draft_prefill(catching_up, prompts_wait);
  } catch (const std::exception& ex) {
    drop_drafts(catching_up, "the draft's prefill pass", ex);
  }
  return d;
}

// k drafts: at once for an n-gram proposer, as a job of the batched draft pass for a draft
// model (unless prompt lookup drafts for it this step), none for k = 0.
void Scheduler::Impl::propose(Entry& e, int32_t k, std::vector<ModelProposer::Job>& jobs,
                              std::vector<Entry*>& job_owner) {
  SequenceRun& run = *e.run;
  if (k == 0) {
    run.set_proposal(Proposal{}, 0.0, 0);
    return;
  }
  if (e.req.opts.speculative.mode == DraftMode::Model) {
    if (run.try_lookup(k)) return;  // prompt lookup's drafts this step: no draft pass for it
    jobs.push_back({static_cast<ModelProposer*>(run.proposer()), run.committed(), run.propose_options(k), &run.rng(), {}});
    job_owner.push_back(&e);
    return;
  }
  const auto td = Clock::now();
  Proposal p;
  try {
    p = run.proposer()->propose(run.committed(), run.propose_options(k), run.rng());
  } catch (const std::exception& ex) {
    drop_drafts({&e}, "prompt lookup", ex);
    return;
  }
  run.set_proposal(std::move(p), ms_since(td), 0);
}

void Scheduler::Impl::propose_with_draft_model(std::vector<ModelProposer::Job>& jobs,
                                               const std::vector<Entry*>& owners) {
  if (jobs.empty()) return;
  std::vector<int64_t> f0;
  for (auto& j : jobs) f0.push_back(j.proposer->forward_passes());
  const auto td = Clock::now();
  try {
    ModelProposer::propose_batch(*parts.draft, jobs);
  } catch (const std::exception& ex) {
    drop_drafts(owners, "the batched draft pass", ex);
    return;
  }
  // The batch's time is shared equally: each sequence's c then reflects batched drafting.
  const double each = ms_since(td) / double(jobs.size());
  for (size_t i = 0; i < jobs.size(); ++i) {
    Entry& owner = *owners[i];
    guarded(owner, [&] { owner.run->set_proposal(std::move(jobs[i].out), each, jobs[i].proposer->forward_passes() - f0[i]); });
  }
  const auto full = std::count_if(jobs.begin(), jobs.end(), [](const auto& j) { return j.kv_full; });
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
  std::vector<ModelProposer::PrefillJob> jobs;
  std::vector<Entry*> job_owner;  // the sequence of each job
  for (Entry* e : lanes) {
    const int32_t want =
        static_cast<int32_t>(std::min<size_t>(e->run->draft_prefill_pending(), static_cast<size_t>(opts.prefill_chunk)));
    wanted += want;
    const int32_t n = std::min(want, left);
    if (n <= 0) continue;
    jobs.push_back({static_cast<ModelProposer*>(e->run->proposer()), e->run->committed(), static_cast<size_t>(n)});
    job_owner.push_back(e);
    left -= n;
  }
  const auto t0 = Clock::now();
  ModelProposer::prefill_batch(*parts.draft, jobs);
  const double ms = ms_since(t0);
  int64_t fed = 0, full = 0;
  for (const auto& j : jobs) {
    fed += static_cast<int64_t>(j.fed);
    full += j.kv_full ? 1 : 0;
  }
  // Each sequence's share of the pass, by the tokens it fed.
  if (fed > 0)
    for (size_t i = 0; i < jobs.size(); ++i)
      job_owner[i]->run->record_draft_prefill(static_cast<int64_t>(jobs[i].fed),
                                              ms * static_cast<double>(jobs[i].fed) / static_cast<double>(fed));
  if (fed > 0) step_time.observe_draft_prefill(ms, static_cast<int32_t>(fed));
  std::lock_guard<std::mutex> lk(mu);
  stats.draft_prefill_tokens_total += fed;
  stats.draft_prefill_max_step_tokens = std::max(stats.draft_prefill_max_step_tokens, fed);
  if (by_time < std::min<int64_t>(wanted, opts.max_batch_tokens)) ++stats.steps_draft_prefill_time_limited;
  stats.draft_kv_full += full;
  return ms;
}

void Scheduler::Impl::drop_drafts(const std::vector<Entry*>& owners, const char* what, const std::exception& ex) {
  spdlog::warn("scheduler: {} failed ({}); {} sequence(s) decode plainly this step", what, ex.what(), owners.size());
  for (Entry* e : owners) {
    if (e->run->proposer()) e->run->proposer()->reset();
    guarded(*e, [&] { e->run->set_proposal(Proposal{}, 0.0, 0); });
  }
  std::lock_guard<std::mutex> lk(mu);
  ++stats.draft_failures;
}

// Draft cache bytes the next step of `e` may take: the next chunk of its draft's prefill,
// or room for k drafts (draft_max: the policy may choose fewer). 0 when it does not draft.
size_t Scheduler::Impl::draft_need(Entry& e) const {
  const SpeculativeOptions& so = e.req.opts.speculative;
  if (so.mode != DraftMode::Model || so.draft_max <= 0 || e.run->done() || e.run->prefilling() ||
      e.run->result().tokens.empty() ||  // its first step is plain
      e.run->draft_deferred())           // its policy has not asked for a draft yet
    return 0;
  const SequenceKV& kv = static_cast<const ModelProposer*>(e.run->proposer())->kv();
  const size_t pending = e.run->draft_prefill_pending();
  int32_t positions;
  if (pending > 0) {
    const int32_t chunk = std::min({opts.prefill_chunk, opts.max_batch_tokens, step_time.draft_prefill_budget(false)});
    positions = kv.length() + static_cast<int32_t>(std::min<size_t>(pending, static_cast<size_t>(chunk)));
  } else {
    // The catch-up feeds the whole context, then k - 1 drafts are fed for the next ones.
    positions = static_cast<int32_t>(e.run->committed().size()) + so.draft_max - 1;
  }
  const size_t extra = static_cast<size_t>(
      std::max(0, blocks_for(positions, kv.cache().block_size()) - static_cast<int32_t>(kv.block_table().size())));
  return extra * kv.cache().block_bytes();
}

}  // namespace tandem
