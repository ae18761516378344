// Drafting for a scheduler step: each decoding sequence's policy chooses k, the step budget
// (policies/step_budget.hpp) cuts the choices of the policies that let it to what pays for
// the batch as a whole, then every sequence that drafts is one job of propose_all
// (draft/proposer.hpp: the sequences of one draft model draft together, one ragged draft
// pass per draft position); sequences whose draft is still reading their context feed it a
// chunk instead (they decode plainly meanwhile). A failure here costs drafts, never a
// request.
#include <spdlog/spdlog.h>

#include <algorithm>

#include "engine/runtime/scheduler_impl.hpp"

namespace tandem {

Scheduler::Impl::Drafted Scheduler::Impl::draft_for_step() {
  int32_t n_decode = 0;
  for (auto& r : running)
    if (!r->run()->prefilling()) ++n_decode;
  std::vector<Entry*> catching_up;  // decoding plainly while their draft reads the context
  Drafted d;
  std::vector<int32_t> ks;  // each deciding sequence's k: its policy's, then the budget's
  for (auto& r : running) {
    if (r->run()->prefilling()) continue;
    int32_t k = 0;
    const Entry& self = *r;
    const SequenceRun::StartGate may_start = [&](const BudgetWish& w, int32_t context, double left) {
      return drafts_pay(self, w, context, left);
    };
    guarded(*r, [&] {
      k = r->run()->choose_k(n_decode, may_start);
      if (r->run()->draft_prefill_pending() > 0) catching_up.push_back(r.get());
    });
    if (!r->error.empty()) continue;
    d.deciding.push_back(r.get());
    ks.push_back(k);
  }
  budget_drafts(d.deciding, ks, static_cast<int32_t>(catching_up.size()));
  std::vector<ProposeJob> jobs;
  std::vector<Entry*> job_owner;
  for (size_t i = 0; i < d.deciding.size(); ++i) {
    Entry& e = *d.deciding[i];
    guarded(e, [&] {
      SequenceRun& run = *e.run();
      if (ks[i] == 0) {
        run.no_proposal();
      } else if (!run.try_lookup(ks[i])) {  // prompt lookup's drafts this step: no draft pass for it
        jobs.push_back(run.draft_job(ks[i]));
        job_owner.push_back(&e);
      }
    });
  }
  std::vector<int32_t> catch_ups;  // what each job's first pass feeds
  for (const ProposeJob& j : jobs) catch_ups.push_back(static_cast<int32_t>(j.proposer->catch_up_tokens(j.context)));
  const auto t0 = Clock::now();
  propose(jobs, job_owner);
  observe_drafting(jobs, catch_ups, ms_since(t0));
  const bool prompts_wait =
      std::any_of(running.begin(), running.end(), [](const auto& r) { return r->run()->prefilling(); });
  try {
    d.draft_prefill_ms = draft_prefill(catching_up, prompts_wait);
  } catch (const std::exception& ex) {
    drop_drafts(catching_up, "the draft's prefill pass", ex.what());
  }
  return d;
}

std::shared_ptr<const CostModel> Scheduler::Impl::cost_model() const {
  if (auto m = EngineAccess::policy_costs(engine).model) return m;
  return {std::shared_ptr<const CostModel>(), &CostModel::assumed_default()};  // static: owns nothing
}

// The step budget: the sequences whose policy lets it (budget_wish) get the drafts that pay
// for the batch; the others keep their k. One sequence alone, with nothing else in the step,
// keeps its policy's choice (the budget would weigh the same costs).
void Scheduler::Impl::budget_drafts(const std::vector<Entry*>& deciding, std::vector<int32_t>& ks,
                                    int32_t catching_up) {
  std::vector<BudgetWish> wishes;
  std::vector<size_t> who;
  int32_t fixed_drafts = 0;
  for (size_t i = 0; i < deciding.size(); ++i) {
    if (ks[i] <= 0) continue;
    if (auto w = deciding[i]->run()->budget_wish(ks[i])) {
      wishes.push_back(*w);
      who.push_back(i);
    } else {
      fixed_drafts += ks[i];
    }
  }
  if (wishes.empty()) return;
  const int32_t n_decode = static_cast<int32_t>(deciding.size());
  const int32_t prompt = expected_prompt_tokens(n_decode);
  if (n_decode == 1 && prompt == 0) return;
  const auto model = cost_model();
  const CostModel& costs = *model;
  const StepPlan plan = budget.plan(costs, wishes, n_decode + fixed_drafts + prompt,
                                    n_decode - static_cast<int32_t>(wishes.size()), catching_up);
  for (size_t w = 0; w < who.size(); ++w) {
    Entry& e = *deciding[who[w]];
    const int32_t k = plan.k[w];
    guarded(e, [&] { e.run()->grant(ks[who[w]], k); });
    ks[who[w]] = k;
  }
  std::lock_guard<std::mutex> lk(mu);
  ++stats.budget_steps;
  stats.budget_wished_tokens += plan.wished;
  stats.budget_granted_tokens += plan.granted;
  stats.budget_granted_per_step.observe(plan.granted);
  stats.budget_last_gain = plan.gain;
}

// Whether starting the draft of `self` pays in the batch it decodes in, the step budget's
// plan of a decoding step with every running sequence as it stands: those drafting with
// their own wishes, those whose draft is catching up or that may still start (their policy
// has not declined for long; prompts still being read, requests waiting) drafting like
// `self`, the others (drafting nothing) as streams the latency rule protects. The draft
// starts when that plan grants `self` drafts and the time they save its stream over the tokens
// it has left covers its prompt pass, which delays every stream once. Not judged by this
// step's make-up: a prompt chunk that makes this step long makes drafts look cheap for one
// step only.
bool Scheduler::Impl::drafts_pay(const Entry& self, const BudgetWish& w, int32_t context, double tokens_left) const {
  // A deferred draft whose policy has declined this many steps is taken not to start: its
  // policy has seen enough of the target's confidence (AdaptivePolicy's confidence_tokens).
  constexpr int32_t kPatience = 8;
  std::vector<BudgetWish> wishes = {w};
  int32_t others = 0;
  for (const auto& r : running) {
    if (r.get() == &self || !r->run()) continue;
    const SequenceRun& run = *r->run();
    if (run.done()) continue;
    if (run.prefilling() || run.draft_prefill_pending() > 0 ||
        (!run.draft_started() && run.start_declines() < kPatience && run.proposer())) {
      wishes.push_back(w);
    } else if (run.draft_started() && run.last_wish() > 0) {
      wishes.push_back({run.last_wish(), run.expected_acceptance().value_or(w.alpha), 1, false});
    } else {
      ++others;
    }
  }
  size_t waiting = 0;
  {
    std::lock_guard<std::mutex> lk(mu);
    waiting = queue.size();
  }
  const size_t room = static_cast<size_t>(opts.max_seqs) - std::min(static_cast<size_t>(opts.max_seqs), running.size());
  for (size_t i = 0; i < std::min(waiting, room); ++i) wishes.push_back(w);
  const int32_t n = static_cast<int32_t>(wishes.size()) + others;
  if (n <= 1) return true;  // alone: the policy's own judgement (its start rules price the prompt pass)
  const auto model = cost_model();
  const CostModel& costs = *model;
  const StepPlan plan = budget.plan(costs, wishes, n, others);
  if (plan.k[0] == 0) return false;
  const double per_token = plan.step_ms / CostModel::expected_tokens(std::clamp(w.alpha, 0.0, 1.0), plan.k[0]);
  const double saved = tokens_left * std::max(0.0, plan.plain_ms - per_token);
  const int32_t prompt_pass[1] = {std::max(1, context)};
  return saved >= n * budget.draft_ms(costs, prompt_pass);
}

// Prompt tokens the coming target pass will carry, as build_batch will cut them (before the
// draft prefill's share of the step is known).
int32_t Scheduler::Impl::expected_prompt_tokens(int32_t decode_tokens) const {
  int32_t left = std::min(opts.max_batch_tokens - decode_tokens, step_time.prompt_budget(0.0));
  int32_t n = 0;
  for (auto& r : running) {
    if (!r->run()->prefilling() || left <= 0) continue;
    const int32_t c = static_cast<int32_t>(
        std::min<size_t>({r->run()->prefill_todo().size(), static_cast<size_t>(opts.prefill_chunk), static_cast<size_t>(left)}));
    n += c;
    left -= c;
  }
  return n;
}

// The draft passes' measured time against the cost model's prediction for them: the step
// budget's correction follows the machine.
void Scheduler::Impl::observe_drafting(const std::vector<ProposeJob>& jobs, const std::vector<int32_t>& catch_ups,
                                       double ms) {
  std::vector<BudgetWish> w;
  std::vector<int32_t> k;
  for (size_t i = 0; i < jobs.size(); ++i) {
    const ProposeJob& j = jobs[i];
    if (!j.error.empty() || j.kv_full || j.forwards == 0) return;  // not a regular step's passes
    w.push_back({0, 0.0, catch_ups[i], false});
    k.push_back(static_cast<int32_t>(j.forwards));
  }
  if (w.empty()) return;
  const auto model = cost_model();
  const CostModel& costs = *model;
  budget.observe_draft(costs, StepBudget::draft_passes(w, k), ms);
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
// or room for k drafts (draft_max: the policy may choose fewer; a token tree feeds fewer
// than its node budget). 0 when it does not draft.
size_t Scheduler::Impl::draft_need(Entry& e) const {
  const SpeculativeOptions& so = e.req.opts.speculative;
  if (!e.run()->proposer() || so.draft_max <= 0 || e.run()->done() || e.run()->prefilling() ||
      e.run()->result().tokens.empty() ||  // its first step is plain
      e.run()->draft_deferred())           // its policy has not asked for a draft yet
    return 0;
  const int32_t chunk = std::min({opts.prefill_chunk, opts.max_batch_tokens, step_time.draft_prefill_budget(false)});
  return e.run()->proposer()->step_cache_bytes(e.run()->committed(), chunk, std::max(so.draft_max, so.tree_budget()));
}

}  // namespace tandem
