#include "engine/coordinator.hpp"

#include <algorithm>
#include <chrono>
#include <stdexcept>

#include "engine/sequence_run.hpp"

namespace tandem {
namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

constexpr size_t kPrefillChunk = 256;  // bounds activation memory; wide enough for efficient matmuls

}  // namespace

void SpeculativeMetrics::merge(const SpeculativeMetrics& o) {
  drafts += o.drafts;
  drafted_tokens += o.drafted_tokens;
  accepted_tokens += o.accepted_tokens;
  auto add = [](std::vector<int64_t>& a, const std::vector<int64_t>& b) {
    if (a.size() < b.size()) a.resize(b.size(), 0);
    for (size_t i = 0; i < b.size(); ++i) a[i] += b[i];
  };
  add(drafted_per_position, o.drafted_per_position);
  add(accepted_per_position, o.accepted_per_position);
  add(steps_per_k, o.steps_per_k);
  target_passes += o.target_passes;
  draft_forwards += o.draft_forwards;
  draft_ms += o.draft_ms;
  target_ms += o.target_ms;
  verify_ms += o.verify_ms;
}

Coordinator::Coordinator(Transformer& target, const Tokenizer& tokenizer, Proposer* proposer, int32_t context,
                         SpeculationPolicy* policy)
    : target_(target), tok_(tokenizer), proposer_(proposer), context_(context), policy_(policy ? policy : &fixed_) {}

GenerateResult Coordinator::run(std::span<const int32_t> prompt, const GenerateOptions& opts,
                                const StreamCallback& cb) {
  SequenceRun run(target_.cache(), tok_, prompt, opts, cb, context_, target_.model().config().n_vocab, proposer_,
                  policy_);
  std::vector<float> logits;
  // Prefill everything but the last prompt token; it is the first step's pending token.
  for (auto todo = run.prefill_todo(); !todo.empty(); todo = run.prefill_todo()) {
    const auto chunk = todo.first(std::min(kPrefillChunk, todo.size()));
    Batch b;
    b.add(run.kv(), chunk, std::vector<bool>(chunk.size(), false));
    target_.forward(b, logits);
  }
  while (!run.done()) {
    // Nobody else waits here: the draft reads its context in one go, right after the first
    // token (and again should its cache have run short).
    if (run.draft_prefill_pending() > 0) proposer_->prefill(run.committed());
    const auto tokens = run.plan_step(1);
    Batch b;
    b.add_all_logits(run.kv(), tokens);
    const auto t0 = Clock::now();
    target_.forward(b, logits);
    run.finish_step(logits, ms_since(t0));
  }
  return std::move(run.result());
}

}  // namespace tandem
