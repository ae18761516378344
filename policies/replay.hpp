// Replaying speculation policies on recorded acceptance, without timing noise
// (`bench_policies replay`).
//
// Greedy speculation is deterministic: from a committed prefix the draft proposes its own
// greedy continuation, and a step that drafts k tokens there gets min(L, k) of them
// accepted, L being how far that continuation agrees with the target's output. A run that
// drafts far ahead (fixed k = 16, `tandem generate --json` lists its steps) gives L at each
// step's start g, and L between two starts follows from it: at g + j (j <= L) the draft
// continues with the same tokens, so it disagrees at the same place, L(g + j) = L(g) - j.
// That is exact when the step stopped at a rejection and a lower bound when all k were
// accepted. (It takes the draft's outputs to be the same whatever tokens its passes carried
// together: the CPU kernels' results are, bit for bit.) So one recorded run says what any
// policy would have got at every position, and replay turns that into the policy's choices
// and their cost under a cost model: the same trace for every policy, no timing noise,
// where measured runs on a 2-core machine differ by several percent from run to run.
//
// What it leaves out: the target's confidence before the start (no data; pass start_budget
// < 0 to start at once, or the policy waits for probes), sampled outputs, and whatever a
// step costs beyond the cost model's passes (the overhead tracker is not fed).
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "policies/cost_model.hpp"
#include "policies/policy.hpp"

namespace tandem {

struct AgreementTrace {
  // agree[g]: draft tokens a step starting after g generated tokens would get accepted;
  // exact[g] false where that is only a lower bound (all drafted tokens were accepted, or no
  // step started inside a run that covers g: then 0).
  std::vector<int32_t> agree;
  std::vector<uint8_t> exact;
  int32_t prompt_tokens = 0;
  int32_t generated() const { return static_cast<int32_t>(agree.size()); }

  // From the steps of one recorded run that generated n_generated tokens (the first from the
  // prompt's pass; the last step may reach past them, cut by an end-of-generation token).
  // Throws std::invalid_argument when the steps do not add up to that.
  static AgreementTrace from_steps(std::span<const SpeculativeStep> steps, int32_t n_generated,
                                   int32_t prompt_tokens);
};

struct ReplayResult {
  int32_t tokens = 0;   // decoded (after the first token)
  double cost = 0.0;    // in one-token target passes: plain decoding costs `tokens`
  int32_t unknown = 0;  // steps whose acceptance was only bounded (taken at the bound)
  std::vector<int64_t> steps_per_k;
  double speedup() const { return cost > 0.0 ? tokens / cost : 0.0; }
  void add(const ReplayResult& o);  // several traces' totals
};

// Plays `policy` (reset first) over the trace up to max_tokens generated tokens, k at most
// k_max. A speculative step costs its draft passes (the first one a catch-up over every token
// the draft has not seen: the whole context the first time) and the target pass over k + 1
// tokens; a plain step one target pass.
ReplayResult replay(SpeculationPolicy& policy, const AgreementTrace& trace, const CostModel& costs, int32_t k_max,
                    int32_t max_tokens);

}  // namespace tandem
