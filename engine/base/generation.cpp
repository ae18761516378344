// Out-of-line parts of the public values (tandem/generation.hpp, tandem/speculative.hpp).
#include "tandem/generation.hpp"

namespace tandem {

const char* to_string(FinishReason r) {
  switch (r) {
    case FinishReason::Stop: return "stop";
    case FinishReason::Length: return "length";
    case FinishReason::Cancelled: return "cancelled";
  }
  return "?";
}

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
  device_verified_steps += o.device_verified_steps;
  device_drafted_tokens += o.device_drafted_tokens;
  lookup_steps += o.lookup_steps;
  lookup_drafted_tokens += o.lookup_drafted_tokens;
  lookup_accepted_tokens += o.lookup_accepted_tokens;
  tree_steps += o.tree_steps;
  draft_forwards += o.draft_forwards;
  draft_ms += o.draft_ms;
  target_ms += o.target_ms;
  verify_ms += o.verify_ms;
  draft_prefill_tokens += o.draft_prefill_tokens;
  draft_prefill_ms += o.draft_prefill_ms;
  steps.insert(steps.end(), o.steps.begin(), o.steps.end());
}

}  // namespace tandem
