// Proposers: where draft tokens come from. A proposer sees the committed context (prompt +
// accepted output) and proposes up to max_tokens continuation tokens, with the draft's
// final distribution q for each when it is a sampling draft. Proposers are batch-first:
// a step's drafting is one call per kind of proposer over every sequence that drafts
// (propose_all), so the drivers never need to know which kind a sequence has. A proposal is
// a chain of tokens or, when the request asks for one (ProposeOptions::tree_width), a token
// tree (Proposal::parents; draft/token_tree.hpp).
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "engine/grammar/token_grammar.hpp"
#include "engine/sampling/gumbel.hpp"
#include "engine/sampling/rng.hpp"
#include "engine/sampling/sampler.hpp"

namespace tandem {

struct Proposal {
  std::vector<int32_t> tokens;
  // A token tree: parents[i] is token i's parent (-1: the root, the pending token), parents
  // listed first. Empty: a chain (token i's parent is i - 1).
  std::vector<int32_t> parents;
  // By row (0: the root, 1 + i: token i), the distribution q the row's children were drawn
  // from, when the draft sampled; empty when the tokens are deterministic (point masses:
  // n-gram lookup, greedy draft, top tokens). On a chain, row i's child is token i, so
  // dists[i] is token i's q. A tree's rows without children hold an empty distribution.
  std::vector<Distribution> dists;
  // Or, when the draft sampled on the device (ProposeOptions::on_device), q_i is row
  // q_rows[i] of the step's DraftProbs store (draft/draft_probs.hpp) and dists is empty.
  std::vector<int32_t> q_rows;
  bool on_device = false;  // the tokens were drawn on the device
  bool deterministic() const { return dists.empty() && q_rows.empty(); }
  bool tree() const { return !parents.empty(); }
  // Each token's depth (1: a child of the root): a chain's are 1..k.
  std::vector<int32_t> depths() const;
};

struct ProposeOptions {
  int32_t max_tokens = 4;   // k
  // Stop drafting when the draft's most likely token has probability below this, decided
  // before sampling (so the kept tokens are still plain draws from q).
  float p_min = 0.0f;
  const SamplingParams* sampling = nullptr;  // the request's sampling (q uses the same transforms as p)
  // Token ids the target accepts: [0, vocab). A draft with a larger (padded) vocabulary
  // never proposes ids outside it. 0 = no limit.
  int32_t vocab = 0;
  // Coupled verification: propose gumbel_argmax(q_i) with the target's noise at the token's
  // absolute position (context.size() + i) instead of sampling from the Rng.
  const PositionNoise* coupled = nullptr;
  // Constrained decoding: the draft proposes only tokens the grammar allows (its q is taken
  // over them, as the target's p is), starting from `grammar_state`, the state after the
  // context; it stops once the grammar is complete. Null: unconstrained.
  const TokenGrammar* grammar = nullptr;
  const GrammarState* grammar_state = nullptr;
  // The request is verified on the device: a draft model with a DraftProbs store samples
  // there too and leaves q on the device (Proposal::q_rows); a tree's children are chosen
  // there. A grammar's masks go to the device with each row (RowMasks).
  bool on_device = false;
  // A token tree instead of a chain (draft/token_tree.hpp) when tree_width > 1 and
  // tree_nodes > 1: up to tree_width children a node, tree_nodes nodes (at most
  // kMaxTreeNodes), max_tokens deep. Proposers that cannot draft trees draft the chain.
  int32_t tree_width = 1;
  int32_t tree_nodes = 0;
  // The target's cost of verifying n tree nodes relative to a plain step (index n: T(n+1) /
  // T(1), n = 0..tree_nodes), from the policy's cost model; empty: keep tree_nodes nodes.
  // With it a deterministic tree keeps the most probable nodes that maximise the expected
  // tokens per unit of that cost (its draft probabilities as the acceptance estimates).
  std::span<const double> tree_cost = {};
  bool tree() const { return tree_width > 1 && tree_nodes > 1 && max_tokens > 0; }
};

class Proposer;

// One sequence's drafting in a step: what its proposer reads and what it leaves. Proposers
// take them in batches (Proposer::propose), several sequences at once.
struct ProposeJob {
  Proposer* proposer = nullptr;       // the sequence's own
  std::span<const int32_t> context;   // every committed token so far (prompt and accepted output)
  ProposeOptions opts;
  Rng* rng = nullptr;                 // the sequence's random stream (sampled drafts)
  Proposal out = {};                  // the drafts
  bool kv_full = false;  // its proposer's cache had no room: it stopped there, keeping what it drafted
  int64_t forwards = 0;  // model passes this job took part in
  double ms = 0.0;       // its share of its batch's time (propose_all)
  std::string error = {};  // its batch failed (propose_all): no drafts this step
};

// Part of one sequence's context fed to its proposer before drafting: a draft model's
// prefill, in chunks (Proposer::prefill).
struct DraftPrefillJob {
  Proposer* proposer = nullptr;
  std::span<const int32_t> context;
  size_t max_tokens = 0;  // of its pending prefill to feed in this pass
  size_t fed = 0;         // set by prefill
  bool kv_full = false;   // set when its cache had no room for the chunk
};

class Proposer {
 public:
  virtual ~Proposer() = default;
  virtual std::string name() const = 0;
  // Proposers whose jobs can run in one batch give the same key (the draft-model proposers of
  // one draft model); every other proposer its own address.
  virtual const void* batch_key() const { return this; }
  // Drafts for every job; each job's proposer has this one's batch_key(). Each job's
  // proposal is exactly what it would have been alone (unless its cache ran out: kv_full).
  virtual void propose(std::span<ProposeJob> jobs) = 0;
  // One sequence alone: a batch of one.
  Proposal propose(std::span<const int32_t> context, const ProposeOptions& opts, Rng& rng);
  // Drops any per-sequence state (a new request starts).
  virtual void reset() {}
  // Context tokens still to be read before drafting, i.e. the prefill not yet done (0 for
  // model-free proposers, and once the prefill is complete). Steps stay plain meanwhile.
  virtual size_t prefill_pending(std::span<const int32_t> context) const {
    (void)context;
    return 0;
  }
  // Feeds each job up to max_tokens of its pending prefill; the jobs share this one's
  // batch_key(). A proposer with a model reads its context so, once the prompt is processed
  // (its first token sampled), so that drafting steps cost drafting only (and the
  // speculation policy and the cost metrics see that cost, not a prefill). Model-free
  // proposers have nothing to read.
  virtual void prefill(std::span<DraftPrefillJob> jobs) {
    for (DraftPrefillJob& j : jobs) j.fed = 0;
  }
  // The whole pending prefill of one sequence alone, chunk by chunk (stops early, leaving it
  // pending, when the cache runs out).
  void prefill(std::span<const int32_t> context);
  // Context tokens the next propose() feeds the model before its first draft (what it has
  // not read: the pending token at least). 0 for model-free proposers: they run no pass.
  virtual size_t catch_up_tokens(std::span<const int32_t> context) const {
    (void)context;
    return 0;
  }
  // Model forward passes run so far (0 for model-free proposers); for cost metrics.
  virtual int64_t forward_passes() const { return 0; }
  // Bytes of cache the proposer's next step may newly take (the caller's memory planning):
  // the next chunk of its prefill (at most `chunk` tokens) while one is pending, else room
  // for draft_max drafts after the context. 0 for model-free proposers.
  virtual size_t step_cache_bytes(std::span<const int32_t> context, int32_t chunk, int32_t draft_max) const {
    (void)context, (void)chunk, (void)draft_max;
    return 0;
  }
};

// A proposer that drafts one sequence at a time (model-free ones: nothing to batch).
class PerSequenceProposer : public Proposer {
 public:
  using Proposer::propose;
  void propose(std::span<ProposeJob> jobs) final;
  virtual Proposal propose_sequence(std::span<const int32_t> context, const ProposeOptions& opts, Rng& rng) = 0;
};

// Every job of a step, whatever their proposers: the jobs of proposers sharing a batch key
// run as one batch (one call of propose), in the order of their first job. Each batch is
// timed and its time shared equally among its jobs (ProposeJob::ms): batched drafting is
// what each sequence's policy then prices. A batch that throws fails only its own jobs
// (ProposeJob::error, no drafts; their proposers are reset).
void propose_all(std::span<ProposeJob> jobs);
// The same for prefill jobs (the proposers' own passes; no timing).
void prefill_all(std::span<DraftPrefillJob> jobs);

}  // namespace tandem
