// Drafting with a small model: runs the draft autoregressively on its own paged cache.
// The cache keeps every context token the draft has already seen; on each call the draft
// rolls back to the longest common prefix with the new context (dropping its rejected
// drafts) and feeds only what is new — the corrected or bonus token included.
//
// Several sequences draft together (the server): propose(jobs) runs them in lockstep, so
// each draft position costs ONE ragged draft pass for all of them instead of one per
// sequence. One sequence alone is a batch of one: both paths share every line. The same
// holds for the prefill: prefill(jobs) feeds chunks of several sequences' contexts in one
// pass (the scheduler's step budget decides how much).
//
// Memory: the draft's cache may run out (it shares one budget with the target's). Each
// sequence (lane) of a pass gets its blocks or not on its own: a lane that cannot stops
// there (keeping what it drafted) and says so (kv_full); the other lanes go on.
#pragma once
#include <memory>
#include <vector>

#include "draft/draft_probs.hpp"
#include "draft/proposer.hpp"
#include "draft/token_tree.hpp"
#include "engine/model/transformer.hpp"

namespace tandem {

class ModelProposer final : public Proposer {
 public:
  // The draft Transformer (weights, cache, scratch) is shared: each sequence being drafted
  // for has its own ModelProposer, i.e. its own block table in the draft's cache.
  // device_probs: where drafts sample on the device (null: on the host); shared by every
  // ModelProposer of `draft`.
  explicit ModelProposer(Transformer& draft, DraftProbs* device_probs = nullptr);
  std::string name() const override { return "draft-model"; }
  // Every proposer of one draft model batches with the others.
  const void* batch_key() const override { return &tf_; }
  using Proposer::propose;
  void propose(std::span<ProposeJob> jobs) override;
  void reset() override;
  using Proposer::prefill;
  // One draft pass feeding up to max_tokens of each job's pending prefill.
  void prefill(std::span<DraftPrefillJob> jobs) override;
  size_t prefill_pending(std::span<const int32_t> context) const override;
  size_t catch_up_tokens(std::span<const int32_t> context) const override;
  int64_t forward_passes() const override { return forwards_; }
  size_t step_cache_bytes(std::span<const int32_t> context, int32_t chunk, int32_t draft_max) const override;
  const SequenceKV& kv() const { return seq_; }
  // Tokens of accepted tree paths whose KV was kept rather than fed again (reclaim_tree).
  int64_t tree_tokens_kept() const { return tree_kept_; }

 private:
  class Drafting;  // one propose() call's lanes and passes (model_proposer.cpp)

  // How much of the draft's cache `context` can keep: the common prefix, less at least the
  // last context token (it is re-fed so its logits are fresh).
  size_t reusable_prefix(std::span<const int32_t> context) const;
  // Rolls the draft's cache back to reusable_prefix(context); returns the tokens kept. A
  // token tree's fed nodes that the context went on with are kept first (reclaim_tree).
  size_t keep_common_prefix(std::span<const int32_t> context);
  // The last tree's fed nodes along the context's continuation: their KV moved down into
  // chain order (Transformer::move_kv), so the draft does not read them again.
  void reclaim_tree(std::span<const int32_t> context);

  Transformer& tf_;
  DraftProbs* device_probs_;
  SequenceKV seq_;
  std::vector<int32_t> cached_;  // tokens whose KV the draft cache holds, in order
  // The last token tree's fed nodes (TreeBuilder::fed_nodes), whose KV follows cached_ in the
  // cache until the next call reclaims what the target accepted; empty: none.
  std::vector<TreeBuilder::FedNode> fed_tree_;
  int64_t tree_kept_ = 0;
  int64_t forwards_ = 0;
  // The prefill is complete (the draft has read all but the last token of some context).
  // Until then nothing is drafted, so cached_ is a prefix of every context it is given.
  // Later gaps (plain steps the policy chose) are fed by the drafting pass itself.
  bool prefilled_ = false;
};

}  // namespace tandem
