// One request's decoding state and its speculative step (draft → verify → commit), stepped
// from outside: by run_alone (one sequence, run_alone.hpp) or the Scheduler (many sequences
// sharing each target pass). Keeping every decision about drafting, verification, rollback
// and output with the run is what makes a request's output independent of how it was
// batched. Its parts: the output as the client sees it (SequenceOutput), the grammar of a
// constrained request (SequenceGrammar), how it speculates (Speculation: proposer, policy,
// prompt lookup ahead of the draft), and the step in flight (Step).
//
// Invariant: `committed` holds the prompt and every emitted token; the target cache holds
// KV for all of them except the newest ("pending") one. A step runs the target over
// [pending, d1..dk], verifies the drafts, truncates the cache to pending + the accepted
// drafts, and commits the accepted drafts plus the corrected/bonus token (the new pending).
// When the output ends inside the accepted drafts (EOS, a stop string, max_tokens) the cache
// is cut back to the committed tokens: it never holds KV of a token that was not committed
// (the scheduler publishes cache blocks to the prefix cache under the committed tokens).
// A token tree (SpeculativeOptions::tree_width) is verified the same way in one pass
// (add_step feeds its nodes with tree attention); its accepted path's KV is moved down to
// where the chain of those tokens would sit (Transformer::move_kv) and the rest dropped.
#pragma once
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "draft/proposer.hpp"
#include "engine/grammar/token_grammar.hpp"
#include "engine/base/clock.hpp"
#include "engine/kv/sequence_kv.hpp"
#include "engine/model/batch.hpp"
#include "engine/model/transformer.hpp"
#include "engine/runtime/sequence_grammar.hpp"
#include "engine/runtime/sequence_output.hpp"
#include "verify/device_verifier.hpp"
#include "engine/sampling/rng.hpp"
#include "engine/text/tokenizer.hpp"
#include "policies/lookup_choice.hpp"
#include "policies/output_lengths.hpp"
#include "policies/policy.hpp"
#include "policies/step_budget.hpp"
#include "tandem/generation.hpp"
#include "verify/tree_verifier.hpp"
#include "verify/verifier.hpp"

namespace tandem {

class SequenceRun {
 public:
  using Clock = tandem::Clock;

  // proposer/policy may be null when opts.speculative.mode is None. Throws
  // std::invalid_argument for an empty prompt or one that does not fit the context.
  // grammar: the compiled opts.grammar (GrammarCache), null when unconstrained; it must be
  // given when opts.grammar is set.
  SequenceRun(Transformer& target, const Tokenizer& tok, std::span<const int32_t> prompt, const GenerateOptions& opts,
              StreamEventCallback cb, int32_t context, int32_t n_vocab, Proposer* proposer, SpeculationPolicy* policy,
              Clock::time_point start = Clock::now(), std::shared_ptr<const TokenGrammar> grammar = nullptr);

  bool done() const { return done_; }
  GenerateResult& result() { return out_.result(); }
  // The engine's record of how long outputs run: this run's policy weighs starting its draft
  // against the tokens those lengths predict (expected_left), and adds its own length once it
  // finishes (not when cancelled). Unset: the policy takes max_tokens as the length.
  void set_output_lengths(std::shared_ptr<OutputLengths> lengths) { lengths_ = std::move(lengths); }
  SequenceKV& kv() { return kv_; }
  const std::vector<int32_t>& committed() const { return committed_; }

  // Prompt (or, after preemption, prompt + output) tokens still to be written to the cache
  // before decoding can start: everything committed except the pending token.
  std::span<const int32_t> prefill_todo() const;
  bool prefilling() const { return !done_ && !prefill_todo().empty(); }
  // Prompt logprobs (GenerateOptions::prompt_logprobs): whether prompt tokens are still to be
  // scored, so that the next prompt chunk must be read with its logits (at most
  // kPromptLogprobsChunk tokens of it) and not taken from a prefix cache.
  bool wants_prompt_rows() const;
  // The logits of a prompt chunk read from position first_pos (a row a token, in order): the
  // logprobs of the prompt tokens they predict. Rows of positions already scored (a prompt
  // read again after preemption) are passed over. With max_tokens 0 the run is done once the
  // last prompt token is scored.
  void record_prompt_rows(int32_t first_pos, std::span<const float> logits);

  // Decode step, part 1: asks the policy for k and the proposer for drafts; returns the
  // tokens of this step's target pass ([pending, drafts...]; logits needed for all).
  std::span<const int32_t> plan_step(int32_t batch_size);
  // The same in parts, for a caller that drafts for many sequences at once: choose_k, then
  // for k > 0 (unless try_lookup drafts) this step's job for its proposer (draft_job), run
  // with the other sequences' jobs (propose_all), and its result back (take_proposal); for
  // k = 0, or drafts that failed, no_proposal.
  // may_start (optional): asked before a sequence whose policy lets the step budget judge
  // (budget_wish) starts its draft, with its steady wish, its context (what the draft must
  // read first) and the tokens it is expected to generate still (expected_left): whether
  // starting pays in this batch. If not, the draft stays unfed (no prompt pass for drafts
  // that would not run).
  using StartGate = std::function<bool(const BudgetWish& wish, int32_t context, double tokens_left)>;
  int32_t choose_k(int32_t batch_size, const StartGate& may_start = {});
  // Between choose_k (k > 0) and drafting, for the scheduler's step budget: this step's
  // wish (nullopt when its policy keeps its k), then what the budget granted (≤ k), which
  // the policy and the metrics take as the step's choice.
  std::optional<BudgetWish> budget_wish(int32_t k) const;
  void grant(int32_t chosen, int32_t k);
  // For judging a start in a batch (StartGate): whether this sequence's draft has started
  // (read its context), the k its policy last wished for, the acceptance that policy last
  // expected (nullopt: its k is not the budget's to cut), and how many steps its policy has
  // kept a deferred draft unstarted.
  bool draft_started() const { return spec_.on && spec_.proposer && !spec_.deferred; }
  int32_t last_wish() const { return spec_.last_wish; }
  std::optional<double> expected_acceptance() const {
    return spec_.policy ? spec_.policy->budget_alpha() : std::nullopt;
  }
  int32_t start_declines() const { return spec_.declines; }
  ProposeJob draft_job(int32_t k);
  std::span<const int32_t> take_proposal(ProposeJob&& job);
  std::span<const int32_t> no_proposal() { return set_proposal(Proposal{}, 0.0, 0); }
  Proposer* proposer() const { return spec_.proposer; }
  // After choose_k gave k > 0 to a draft-model request with lookup on: proposes this step's
  // drafts by prompt lookup instead, when there are any and LookupChoice prefers them (then
  // the step is planned, as by take_proposal, and the draft model is not run). False otherwise.
  bool try_lookup(int32_t k);
  std::span<const int32_t> step_tokens() const { return step_.tokens; }
  // This step's target pass into a batch: its tokens with logits for all (a token tree's
  // nodes at the positions of their depths, each reading its ancestors: Batch::add_tree).
  void add_step(Batch& b);
  // Part 2: the logits of those tokens ([n, n_vocab]); verifies, rolls back, commits, streams.
  void finish_step(std::span<const float> logits, double target_ms);
  // Whether this request's verdict is the target's argmax alone (greedy, no penalties or bias; under
  // a grammar, of the masked rows), so a backend can reach it without the logits leaving the
  // device (kernels/device_decode.hpp).
  bool verdict_is_argmax() const { return opts_.sampling.greedy() && !opts_.sampling.adjusts_logits(); }
  // Whether a backend may reach this step's verdict on the device whatever the sampling
  // (verify/device_verifier.hpp): no draft distributions held on the host. Token trees too,
  // in every mode; a grammar's masks go to the device with the step, and logprobs are
  // reached there too.
  bool verdict_on_device() const { return device_eligible() && step_.prop.dists.empty(); }
  // This step as the device verifier takes it (first_row: the pending token's row); a
  // constrained step's masks are held with the step until it is finished.
  DeviceVerifier::Sequence device_sequence(int32_t first_row);
  // Part 2 with that verdict reached elsewhere: the accepted drafts and the target's next
  // token. Only for verdict_on_device() requests.
  void finish_step(const VerifyResult& verdict, double target_ms);

  // Frees the target cache (and the draft's state); later steps re-prefill from committed.
  void preempt();
  // Ends the request now with the given reason (Cancelled for cancellation).
  void finish(FinishReason r);
  // KV positions the next step needs in total (for admission and preemption decisions).
  int32_t next_step_positions() const;
  // Context tokens the draft has still to read, once the first token is out (and again after
  // preemption): its prefill, which the caller feeds (Proposer::prefill alone, or the
  // scheduler's batched chunks through prefill_all). Decode steps are plain (k = 0) until it is 0. With a policy that may
  // start off (SpeculationPolicy::may_start_off) it stays 0 until the policy first asks
  // for a draft (draft_deferred): a sequence that never speculates never feeds the draft.
  size_t draft_prefill_pending() const;
  bool draft_deferred() const { return spec_.deferred; }
  // Ends the deferral if the policy asks for a draft this step (its k is then used by the
  // step's choose_k, not asked again); returns draft_prefill_pending(). Callers that feed
  // the draft right before the step (run_to_end) call it instead of draft_prefill_pending.
  size_t resolve_draft(int32_t batch_size, const StartGate& may_start = {});
  // The caller fed the draft `tokens` of its context (the prefill above), taking `ms`.
  void record_draft_prefill(int64_t tokens, double ms) {
    result().speculative.draft_prefill_tokens += tokens;
    result().speculative.draft_prefill_ms += ms;
  }

 private:
  // max_tokens 0 with a prompt to score: done once it is scored.
  bool score_only() const { return opts_.max_tokens <= 0 && opts_.prompt_logprobs >= 0 && n_prompt_ > 1; }
  // How the run speculates.
  struct Speculation {
    Proposer* proposer = nullptr;
    SpeculationPolicy* policy = nullptr;
    bool on = false;          // a proposer and draft_max > 0
    bool deferred = false;    // the draft has not been asked for yet: its prompt pass waits
    int32_t decided_k = -1;   // the policy's k for this step, asked by resolve_draft (-1: not asked)
    int32_t declines = 0;     // steps its policy kept a deferred draft unstarted
    int32_t last_wish = 0;    // the policy's k at the last decoding step (before any budget)
    // Prompt lookup ahead of the draft model (SpeculativeOptions::lookup): null when off,
    // and which of the two drafts pays more so far.
    std::unique_ptr<Proposer> lookup;
    LookupChoice lookup_choice;
  };
  // The step in flight, between planning (set_proposal) and finishing it.
  struct Step {
    Proposal prop;
    std::vector<int32_t> tokens;  // the target pass's: [pending, drafts...]
    int32_t base_len = 0;         // the cache's length when it was planned
    int32_t k_max = 0;            // the most drafts the policy could choose (0: a plain step)
    double draft_ms = 0.0;
    bool lookup = false;          // its drafts came from prompt lookup
    bool tree = false;            // a token tree is drafted this step (choose_k: tree_choice)
    // The target distributions verification computed, by row (logprobs reuse them).
    std::vector<std::optional<Distribution>> dists;
    // A tree step's rows of p for its committed tokens in order (the root's, then each
    // accepted node's), for their logprobs; empty for a chain (row i).
    std::vector<int32_t> accepted_rows;
    // A constrained step verified on the device: its rows' grammar masks (device_sequence).
    std::vector<std::shared_ptr<const TokenMask>> masks;
    std::vector<std::span<const uint64_t>> mask_words;
  };

  ProposeOptions propose_options(int32_t k) const;
  // The tree this step may draft: its node budget within the context (< 2: a chain).
  int32_t tree_nodes() const;
  // ProposeOptions::tree_cost for this step (batch: the step's batch size): empty without a
  // policy that decides from measured costs.
  void price_tree(int32_t batch_size);
  // A tree step's verification: the walk's verdict (verify/tree_verifier.hpp).
  TreeVerdict verify_tree(std::span<const float> logits);
  // Keeps the accepted path of a verified tree: its KV moved into chain order, the proposal
  // rewritten as the chain of its tokens; returns the chain's verdict.
  VerifyResult keep_path(const TreeVerdict& tv);
  std::span<const int32_t> set_proposal(Proposal p, double draft_ms, int64_t draft_forwards);
  VerifyResult verify(std::span<const float> logits);
  // Invalid sampling parameters (or a vocabulary too large for the device's sums) take the
  // host path, which reports them as make_distribution does.
  bool device_eligible() const {
    return sampling_valid_ && n_vocab_ <= kernels::kMaxDeviceSampleVocab;
  }
  int32_t k_limit() const;      // draft_max within the context and token budget
  int32_t tokens_left() const;  // what max_tokens still allows
  double expected_left() const;  // of that, what the lengths of finished outputs predict (the policy's horizon)
  void record_step(const VerifyResult& v, double target_ms, double verify_ms);
  // logits: the step's rows, for logprobs (empty for an outside verdict: its logprobs come
  // with it).
  void commit_step(const VerifyResult& v, std::span<const float> logits);
  bool commit(int32_t token, const TokenLogprobs* lp);  // false once the output is over
  // The logprobs of `token` at step row i (opts_.logprobs >= 0), history = committed_.
  TokenLogprobs logprobs_at(std::span<const float> logits, int32_t i, int32_t token);
  void close_output();

  Transformer* target_;
  std::vector<double> tree_cost_;  // this step's ProposeOptions::tree_cost
  SequenceKV kv_;
  GenerateOptions opts_;  // the seed settled
  int32_t context_, n_vocab_;
  bool coupled_;                // VerifyMode::Coupled with sampling: tokens come from noise_, not rng_
  bool sampling_valid_ = true;  // validate_sampling(opts_.sampling) passed
  Rng rng_;
  PositionNoise noise_;
  std::vector<int32_t> committed_;
  int32_t n_prompt_;             // of committed_, the prompt
  bool done_ = false;
  SequenceOutput out_;
  SequenceGrammar grammar_;
  Speculation spec_;
  Step step_;
  std::shared_ptr<OutputLengths> lengths_;
};

}  // namespace tandem
