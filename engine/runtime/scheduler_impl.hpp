// Scheduler::Impl: the scheduler's state and the named parts of its step. Private to
// engine/runtime/: scheduler.cpp (the public surface, the thread, admission bookkeeping),
// scheduler_step.cpp (one step, in order), scheduler_drafts.cpp (drafting for a step).
#pragma once
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <unordered_set>
#include <vector>

#include "draft/proposer.hpp"
#include "engine/base/clock.hpp"
#include "engine/kv/prefix_cache.hpp"
#include "verify/step_verifier.hpp"
#include "engine/runtime/engine_access.hpp"
#include "engine/runtime/scheduler.hpp"
#include "engine/runtime/sequence_run.hpp"
#include "engine/runtime/sequence_setup.hpp"
#include "engine/runtime/step_time_model.hpp"
#include "policies/step_budget.hpp"

namespace tandem {

struct Scheduler::Impl {
  struct Entry {
    uint64_t id = 0;
    ServeRequest req;
    Clock::time_point arrival;
    std::shared_ptr<const TokenGrammar> grammar;  // compiled at submit; null when unconstrained
    // Its run, proposer and policy (prepare_sequence), made at first admission and kept
    // across preemption.
    PreparedSequence seq;
    SequenceRun* run() const { return seq.run.get(); }  // null until admitted
    bool got_first = false;
    Clock::time_point last_token;
    int32_t published_blocks = 0;  // full blocks already offered to the prefix cache
    std::string error;  // set when this request failed in this step: it alone is retired
    // A later choice of a group (submit_group): waits in the queue while its first
    // request, `leader`, is still reading the shared prompt. 0: none.
    uint64_t leader = 0;
  };

  // One sequence's share of the step's target pass.
  struct Part {
    Entry* e;
    std::span<const int32_t> tokens;
    bool all_logits;                 // a decode step (logits for every token) or a prompt chunk (none)
    std::span<const float> logits;   // its rows, in the pass's logits (or in `own`)
    std::vector<float> own = {};     // when the part ran alone, or its rows were downloaded alone
    int32_t first_row = -1;          // its first logits row in the pass
    // A prompt chunk read with its logits (SequenceRun::wants_prompt_rows): the position of
    // its first token; -1 for a chunk without (and a decode step).
    int32_t prompt_rows_from = -1;
    std::optional<VerifyResult> verdict = {};  // reached on the device (verify/device_verifier.hpp)
  };

  // What drafting leaves for the target pass.
  struct Drafted {
    std::vector<Entry*> deciding;  // decoding sequences with their step tokens set
    double draft_prefill_ms = 0.0;
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
  // Both models' scratch growths (Transformer::scratch_growths), and their count when this
  // scheduler started (Engine::generate passes before it are not its own).
  uint64_t scratch_growths() const {
    return parts.target.scratch_growths() + (parts.draft ? parts.draft->scratch_growths() : 0);
  }
  uint64_t scratch_growths_at_start = 0;
  bool stopping = false, drain = false;
  uint64_t next_id = 1;

  std::vector<std::unique_ptr<Entry>> running;  // scheduler thread only
  std::unique_ptr<PrefixCache> prefix;           // scheduler thread only
  StepTimeModel step_time;                       // scheduler thread only
  StepBudget budget;                             // scheduler thread only
  StepVerifier verifier;  // host or device verdicts

  Impl(Engine& e, const SchedulerOptions& o);

  // ---- the thread and request lifetime (scheduler.cpp)
  void loop();
  void apply_cancels();
  // Why a submission cannot be queued ("" when it can); mu not held.
  SubmitResult check(const ServeRequest& req) const;
  // Whether e must wait for its group's leader to finish reading the prompt.
  bool waits_for_leader(const Entry& e) const;
  bool start(Entry& e);
  void retire(std::unique_ptr<Entry> e, const std::string& error);
  void preempt_youngest();
  void update_kv_stats();

  // ---- one step (scheduler_step.cpp), in the order it runs
  bool step();
  void admit_waiting();
  bool make_room();  // false when the lone sequence could not fit and was retired
  void reserve_target_blocks();
  Drafted draft_for_step();
  std::vector<Part> build_batch(const Drafted& d, int32_t* prompt_tokens);
  void target_pass(std::vector<Part>& parts_in_step, std::vector<float>& logits);
  // After a pass whose logits stayed on the backend: greedy parts get their verdicts there,
  // the others their rows downloaded.
  void verdicts_on_device(std::vector<Part>& parts_in_step);
  void download_rows(Part& p);  // a part's logits rows from the backend to p.own
  void verify_and_commit(std::vector<Part>& parts_in_step, double target_ms);
  void retire_failed();
  void publish_prefixes();
  void retire_finished();

  // ---- memory accounting of a step (scheduler_step.cpp)
  int32_t target_positions(Entry& e) const;  // target positions the next step needs
  size_t target_need(Entry& e) const;        // bytes of new target blocks for it
  size_t draft_need(Entry& e) const;         // bytes of new draft blocks for it
  size_t step_need(Entry& e) const { return target_need(e) + draft_need(e); }
  size_t running_need() const;
  // Whether `need` bytes are free, once prefix-cache blocks nobody uses are evicted for it.
  bool fits(size_t need);

  // ---- drafting (scheduler_drafts.cpp)
  // The engine's cost model, or the policies' assumed default when none was calibrated.
  std::shared_ptr<const CostModel> cost_model() const;
  // Cuts the ks (one per deciding sequence) of the policies that let the step budget judge.
  void budget_drafts(const std::vector<Entry*>& deciding, std::vector<int32_t>& ks, int32_t catching_up);
  int32_t expected_prompt_tokens(int32_t decode_tokens) const;
  bool drafts_pay(const Entry& self, const BudgetWish& w, int32_t context, double tokens_left) const;
  void observe_drafting(const std::vector<ProposeJob>& jobs, const std::vector<int32_t>& catch_ups, double ms);
  void propose(std::vector<ProposeJob>& jobs, const std::vector<Entry*>& owners);
  double draft_prefill(const std::vector<Entry*>& lanes, bool share);
  // A failed draft pass costs its sequences their drafts for this step, not their requests:
  // the target decides alone (plain steps), and the draft state starts over.
  void drop_drafts(const std::vector<Entry*>& owners, const char* what, const std::string& why);

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
};

}  // namespace tandem
