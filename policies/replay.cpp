#include "policies/replay.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace tandem {

AgreementTrace AgreementTrace::from_steps(std::span<const SpeculativeStep> steps, int32_t n_generated,
                                          int32_t prompt_tokens) {
  if (n_generated < 1) throw std::invalid_argument("replay: a trace needs at least one generated token");
  AgreementTrace t;
  t.prompt_tokens = prompt_tokens;
  t.agree.assign(static_cast<size_t>(n_generated), 0);
  t.exact.assign(static_cast<size_t>(n_generated), 0);
  int32_t g = 1;  // the first token comes from the prompt's pass
  for (const SpeculativeStep& s : steps) {
    if (s.drafted < 0 || s.accepted < 0 || s.accepted > s.drafted)
      throw std::invalid_argument("replay: a step accepted " + std::to_string(s.accepted) + " of " +
                                  std::to_string(s.drafted) + " drafted tokens");
    if (g >= n_generated)
      throw std::invalid_argument("replay: more steps than the " + std::to_string(n_generated) + " tokens generated");
    // The run [g, g + accepted]: the draft disagrees at g + accepted (or was not asked further).
    const bool stopped = s.accepted < s.drafted;
    for (int32_t j = 0; j <= s.accepted && g + j < n_generated; ++j) {
      t.agree[static_cast<size_t>(g + j)] = s.accepted - j;
      t.exact[static_cast<size_t>(g + j)] = stopped;
    }
    g += s.accepted + 1;
  }
  // The last step may reach past the end: an end-of-generation token or a stop string in it
  // ended the output there.
  const int32_t last = steps.empty() ? 0 : steps.back().accepted + 1;
  if (g < n_generated || g - last >= n_generated)
    throw std::invalid_argument("replay: the steps cover " + std::to_string(g) + " tokens, the run generated " +
                                std::to_string(n_generated));
  return t;
}

void ReplayResult::add(const ReplayResult& o) {
  tokens += o.tokens;
  cost += o.cost;
  unknown += o.unknown;
  if (steps_per_k.size() < o.steps_per_k.size()) steps_per_k.resize(o.steps_per_k.size(), 0);
  for (size_t k = 0; k < o.steps_per_k.size(); ++k) steps_per_k[k] += o.steps_per_k[k];
}

ReplayResult replay(SpeculationPolicy& policy, const AgreementTrace& trace, const CostModel& costs, int32_t k_max,
                    int32_t max_tokens) {
  ReplayResult r;
  r.steps_per_k.assign(static_cast<size_t>(std::max(k_max, 0)) + 1, 0);
  const int32_t end = std::min(max_tokens, trace.generated());
  policy.reset();
  int32_t g = 1;
  int32_t seen = 0;  // context tokens the draft has read (its cache): none before its first pass
  while (g < end) {
    const int32_t position = trace.prompt_tokens + g;  // committed tokens, prompt included
    PolicyInput in;
    in.k_max = std::min(k_max, end - g - 1);  // accepted + the target's token must fit
    in.position = position;
    in.tokens_left = end - g;
    // No room to draft: a plain step the policy is not asked about (as the engine does).
    const bool asked = in.k_max > 0;
    const int32_t k = asked ? std::clamp(policy.choose_k(in), 0, in.k_max) : 0;
    ++r.steps_per_k[static_cast<size_t>(k)];
    StepOutcome o;
    o.target_tokens = k + 1;
    if (k == 0) {
      r.cost += 1.0;
      if (asked) policy.observe(o);
      g += 1;
      continue;
    }
    const size_t at = static_cast<size_t>(g);
    if (!trace.exact[at] && trace.agree[at] < k) ++r.unknown;
    const int32_t accepted = std::min(trace.agree[at], k);
    // The first draft pass reads what the draft has not seen (1-2 tokens while speculation
    // runs on, the whole context after a pause or at the start), the other k - 1 one each.
    r.cost += costs.catch_up(std::max(1, position - seen)) + (k - 1) * costs.c() + costs.r(k);
    seen = position + std::min(accepted, k - 1);
    o.drafted = k;
    o.accepted = accepted;
    policy.observe(o);
    g += accepted + 1;
  }
  r.tokens = std::max(0, end - 1);
  return r;
}

}  // namespace tandem
