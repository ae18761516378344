// Continuous batching for the server: many requests share one target model and one draft.
// A dedicated thread runs steps; each step admits waiting requests (memory permitting),
// drafts for every speculating sequence, runs ONE ragged target pass over all sequences'
// pending+draft tokens plus chunks of new prompts, verifies each sequence, commits, streams
// text out and retires finished sequences at once. A draft model reads each sequence's
// context (its prefill) the same way: in chunks, one ragged draft pass per step for every
// sequence catching up, within the step budget; those sequences decode plainly meanwhile.
// Both models' caches draw from one byte budget (engine/kv/kv_budget.hpp). When it runs out,
// the youngest running sequence is preempted (its blocks freed, its request re-queued at
// the front; it is recomputed later from prompt + output so far, and its stream continues
// seamlessly).
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "engine/model/prefill.hpp"
#include "engine/runtime/scheduler_stats.hpp"
#include "tandem/engine.hpp"

namespace tandem {

struct SchedulerOptions {
  int32_t max_seqs = 16;          // running sequences at once
  int32_t max_queue = 256;        // waiting requests; beyond → QueueFull (HTTP 429)
  int32_t prefill_chunk = kPrefillChunk;  // prompt tokens per sequence per step
  int32_t max_batch_tokens = 1024;  // target tokens per step (decode tokens are always scheduled first)
  // While sequences are decoding, prompt chunks are cut so that a step is predicted to take at
  // most this long: it is their inter-token latency, and a CPU prefills only tens of tokens
  // per second on a 1.5B model (a 1024-token chunk would stall every stream for seconds).
  // The draft model's prefill chunks count too (at most half of the room while prompts wait).
  // At least min_prefill_tokens per step (of each kind) keep prompts moving. 0 = token
  // budgets only.
  double max_step_ms = 250.0;
  int32_t min_prefill_tokens = 16;
  // The step budget's latency rule (policies/step_budget.hpp): the drafts of a step may make
  // a stream's expected time per token at most this share longer than a plain step's (one
  // that drafts nothing: the step itself). < 0: throughput alone decides.
  double spec_latency_slack = 0.10;
  bool prefix_cache = true;       // share full KV blocks of identical prefixes between requests
};

struct ServeRequest {
  std::vector<int32_t> prompt;
  GenerateOptions opts;
  // Both are called on the scheduler thread and must return quickly (post work elsewhere).
  // on_text: newly completed text, the token that completed it and its logprobs (when
  // opts.logprobs >= 0); return false to cancel.
  std::function<bool(const StreamEvent& event)> on_text;
  // Exactly once per accepted request: finished, cancelled, or failed (error non-empty).
  std::function<void(const GenerateResult& result, const std::string& error)> on_done;
};

enum class SubmitStatus { Ok, QueueFull, PromptTooLong, ShuttingDown, Invalid };

struct SubmitResult {
  SubmitStatus status = SubmitStatus::Ok;
  uint64_t id = 0;          // request id when Ok
  std::string message;      // why, when not Ok
};

struct SubmitGroupResult {
  SubmitStatus status = SubmitStatus::Ok;
  std::vector<uint64_t> ids;  // one per request, in order, when Ok
  std::string message;
};

class Scheduler {
 public:
  // The engine must outlive the scheduler; while a scheduler runs, Engine::generate must not
  // be used (they share the caches).
  Scheduler(Engine& engine, const SchedulerOptions& opts);
  ~Scheduler();  // shutdown(false) if still running
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  SubmitResult submit(ServeRequest req);  // thread-safe
  // Several requests with one prompt (OpenAI's n choices), queued together or not at all
  // (the queue limit counts each). The first reads the prompt; the others are admitted once
  // it has, and take its KV blocks from the prefix cache instead of reading it again (all
  // but a last partial block). Each is a request of its own after that: its own sampling
  // stream (give each its own seed), cancel() and on_done. Thread-safe.
  SubmitGroupResult submit_group(std::vector<ServeRequest> reqs);
  void cancel(uint64_t id);               // thread-safe; on_done is still called (Cancelled)
  SchedulerStats stats() const;           // thread-safe snapshot
  // Stops accepting; drain=true finishes running and queued requests first, false cancels them.
  // Blocks until the scheduler thread has stopped.
  void shutdown(bool drain);

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace tandem
