#include "engine/runtime/run_alone.hpp"

#include <algorithm>
#include <vector>

#include "engine/base/clock.hpp"
#include "engine/model/prefill.hpp"
#include "verify/step_verifier.hpp"
#include "engine/runtime/sequence_run.hpp"

namespace tandem {

void run_to_end(SequenceRun& run, Transformer& target, DraftProbs* draft_probs) {
  std::vector<float> logits;
  // Everything but the last prompt token; it is the first step's pending token. A prompt to
  // score is read with its logits, a chunk at a time.
  while (run.wants_prompt_rows() && !run.prefill_todo().empty()) {
    const auto todo = run.prefill_todo();
    const auto chunk = todo.first(std::min<size_t>(todo.size(), kPromptLogprobsChunk));
    const int32_t first = run.kv().length();
    Batch b;
    b.add_all_logits(run.kv(), chunk);
    target.forward(b, logits);
    run.record_prompt_rows(first, logits);
  }
  if (run.done()) return;
  prefill(target, run.kv(), run.prefill_todo(), PrefillLogits::None, logits);
  // On a backend that decodes on the device, the request is verified there (a grammar's
  // masks going up, logprobs coming down): the logits stay on the device
  // (verify/step_verifier.hpp).
  StepVerifier verifier(target.model().backend());
  while (!run.done()) {
    // Nobody else waits here: the draft reads its context in one go, right after the first
    // token (and again should its cache have run short).
    if (const size_t pending = run.resolve_draft(1); pending > 0) {
      const auto tp = Clock::now();
      run.proposer()->prefill(run.committed());
      run.record_draft_prefill(static_cast<int64_t>(pending), ms_since(tp));
    }
    Batch b;
    run.plan_step(1);
    run.add_step(b);
    const auto t0 = Clock::now();
    const bool on_device = verifier.on_device(run.verdict_on_device());
    target.forward(b, logits, !on_device);
    const double target_ms = ms_since(t0);
    if (on_device) {
      const DeviceVerifier::Sequence seq = run.device_sequence(0);
      const kernels::Tensor q = draft_probs ? draft_probs->q() : kernels::Tensor{};
      run.finish_step(
          verifier.verify_on_device(target.device_logits(), std::span(&seq, 1), draft_probs ? &q : nullptr).front(),
          target_ms);
    } else {
      run.finish_step(logits, target_ms);
    }
  }
}

}  // namespace tandem
