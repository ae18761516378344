// What the scheduler counts (the server's /metrics reads a snapshot of it).
#pragma once
#include <cstdint>
#include <utility>
#include <vector>

#include "tandem/speculative.hpp"

namespace tandem {

// Histogram with fixed upper bounds (seconds), Prometheus-style cumulative on output.
struct Histogram {
  std::vector<double> bounds;
  std::vector<uint64_t> counts;  // per bucket (not cumulative), last = +Inf
  double sum = 0.0;
  uint64_t count = 0;
  explicit Histogram(std::vector<double> b = {}) : bounds(std::move(b)), counts(bounds.size() + 1, 0) {}
  void observe(double v);
};

struct SchedulerStats {
  int64_t requests_total = 0, requests_finished = 0, requests_cancelled = 0, requests_failed = 0;
  int64_t queue_length = 0, running = 0, preemptions = 0;
  // Target cache blocks in use, and the KV pool's blocks (both models draw on the same ones).
  int64_t kv_blocks_used = 0, kv_blocks_total = 0, prefix_cache_hits_tokens = 0;
  // The one KV budget of both models (--kv-mem): bytes in use and in all; draft blocks in use.
  int64_t kv_bytes_used = 0, kv_bytes_total = 0, draft_kv_blocks_used = 0;
  // Target blocks only the prefix cache holds (evictable on demand: free for admission),
  // their bytes, and the tokens per block.
  int64_t kv_prefix_idle_blocks = 0, kv_prefix_idle_bytes = 0, kv_block_size = 0;
  // Sequence-steps whose draft could not get cache blocks (that sequence decoded plainly).
  int64_t draft_kv_full = 0;
  // Passes that outgrew the scratch reserved at start (Transformer::reserve): each one
  // allocated in the step path (a step of more than kReservedDraftTokens drafts per sequence
  // in a full batch). 0 in the common case.
  int64_t scratch_growths = 0;
  int64_t draft_failures = 0;  // draft passes that threw: their sequences decoded plainly that step
  // Sequence-steps verified on the device (greedy requests on a backend that decodes there):
  // only their verdicts came back to the host, not their logits.
  int64_t device_verified = 0;
  int64_t prompt_tokens_total = 0, generated_tokens_total = 0, steps = 0;
  int64_t steps_prefill_time_limited = 0;  // steps whose prompt chunks max_step_ms cut short
  // The draft model's prefills: tokens fed, steps whose chunks max_step_ms cut short, and the
  // most tokens fed in one step.
  int64_t draft_prefill_tokens_total = 0, steps_draft_prefill_time_limited = 0, draft_prefill_max_step_tokens = 0;
  SpeculativeMetrics speculative;
  // The step budget (policies/step_budget.hpp): steps it planned, draft tokens the policies
  // asked for and it granted, granted tokens per step, and the last plan's predicted gain
  // over plain decoding.
  int64_t budget_steps = 0, budget_wished_tokens = 0, budget_granted_tokens = 0;
  Histogram budget_granted_per_step{{0, 1, 2, 4, 8, 16, 32, 64}};
  double budget_last_gain = 1.0;
  Histogram ttft{{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}};
  Histogram itl{{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5}};
};

}  // namespace tandem
