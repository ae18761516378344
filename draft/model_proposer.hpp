// Drafting with a small model: runs the draft autoregressively on its own paged cache.
// The cache keeps every context token the draft has already seen; on each call the draft
// rolls back to the longest common prefix with the new context (dropping its rejected
// drafts) and feeds only what is new — the corrected or bonus token included.
#pragma once
#include <memory>
#include <vector>

#include "draft/proposer.hpp"
#include "engine/forward.hpp"

namespace tandem {

class ModelProposer final : public Proposer {
 public:
  // The draft Transformer (weights, cache, scratch) is shared: each sequence being drafted
  // for has its own ModelProposer, i.e. its own block table in the draft's cache.
  explicit ModelProposer(Transformer& draft);
  std::string name() const override { return "draft-model"; }
  Proposal propose(std::span<const int32_t> context, const ProposeOptions& opts, Rng& rng) override;
  void reset() override;
  int64_t forward_passes() const override { return forwards_; }

 private:
  // Feeds tokens after what the cache holds; leaves the logits of the last in logits_.
  void feed(std::span<const int32_t> tokens);

  Transformer& tf_;
  SequenceKV seq_;
  std::vector<int32_t> cached_;  // tokens whose KV the draft cache holds, in order
  std::vector<float> logits_;
  int64_t forwards_ = 0;
};

}  // namespace tandem
