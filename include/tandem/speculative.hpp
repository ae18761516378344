// Speculative decoding options and metrics: part of the public API.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "tandem/export.h"

namespace tandem {

enum class DraftMode {
  None,   // plain autoregressive decoding
  Model,  // a draft model (LoadOptions::draft_model_path)
  Ngram,  // prompt lookup: continue an earlier occurrence of the last n tokens
};

// How sampled output (temperature > 0) is drawn and drafts are verified. Both are exact:
// the output follows the target's distribution at every position. Coupled is the default:
// on the Qwen2.5-Coder 0.5B → 1.5B pair it accepted as often as rejection sampling (T = 0.7:
// 0.773 vs 0.747; T = 1.0: 0.705 vs 0.691; bench/compare_verify.py), and it makes `seed` mean
// one text. Rejection accepts more when the distributions are flat (tiny random models:
// 0.55 vs 0.43), and is the choice when reproducibility does not matter.
enum class VerifyMode {
  // Rejection sampling (Leviathan et al., Chen et al.) with the request's random stream:
  // the highest acceptance a single draft can have (sum of min(p, q)), but the stream is
  // consumed step by step, so the text for a seed depends on k, the policy and the batch.
  Rejection,
  // Gumbel-max with counter-based noise keyed by (seed, position): every token, drafted or
  // not, is argmax(log p + g). The text for a seed is the same with or without speculation,
  // for any k, policy, proposer or batch; acceptance is somewhat lower.
  Coupled,
};

// "rejection" / "coupled"; parse_verify_mode throws std::invalid_argument for anything else.
TANDEM_API const char* to_string(VerifyMode m);
TANDEM_API VerifyMode parse_verify_mode(const std::string& name);

struct SpeculativeOptions {
  DraftMode mode = DraftMode::None;
  VerifyMode verify = VerifyMode::Coupled;  // applies to plain decoding too (see VerifyMode)
  int32_t draft_max = 4;   // k: tokens drafted per step
  // Fewer drafted tokens than this → verify none (a plain step). Applies only where the
  // draft is a function of the context (n-gram, greedy) or in coupled mode: dropping a
  // SAMPLED draft because of what was sampled would bias the output, so those are verified.
  int32_t draft_min = 0;
  // Stop drafting when the draft's most likely next token has probability below this. The
  // decision is taken from the draft's distribution BEFORE its token is sampled (deciding
  // from the sampled token's probability would bias sampled output).
  float draft_p_min = 0.0f;
  int32_t ngram_min = 1, ngram_max = 4;
  // How many tokens to draft at each step (policies/factory.hpp):
  //  "fixed"      always draft_max;
  //  "confidence" draft_max, drafting stops below draft_p_min (0.5 when left at 0);
  //  "adaptive"   a per-sequence acceptance estimate and the engine's cost model pick k in
  //               0..draft_max, turning speculation off (k = 0) when it would be slower;
  //  "goodput"    adaptive, and k shrinks as the batch grows (verification gets dearer).
  std::string policy = "fixed";
  float alpha_prior = 0.0f;  // adaptive/goodput: acceptance expected before any evidence (0 → 0.6)
  // adaptive/goodput: the share of the output still to come (max_tokens left) that a
  // sequence's first draft may risk: its catch-up over the prompt plus one step, were nothing
  // accepted (0 → 0.02; < 0: no limit, the prior alone decides). Keeps short outputs where
  // the draft disagrees within a few percent of plain decoding.
  float start_budget = 0.0f;
  // Draft-model speculation: prompt lookup ahead of the draft. Where the committed text's last
  // lookup_min (or more, up to ngram_max) tokens occurred earlier in the prompt or output, what
  // followed them is a free draft of up to draft_max tokens; each sequence verifies it instead
  // of running the draft model while such drafts commit tokens at least as fast per millisecond
  // as the model's (policies/lookup_choice.hpp). Outputs that copy their input gain most.
  bool lookup = true;
  int32_t lookup_min = 3;  // 1..kMaxLookupMin
  // Token trees (draft-model speculation): with tree_width > 1 the draft proposes a tree
  // instead of a chain each step: up to tree_width children a node (the most likely
  // continuations, expanded best path first), up to tree_nodes nodes (0: tree_width x
  // draft_max, at most kMaxTreeNodes) and draft_max deep, all verified in one target pass.
  // The output is the target's as with a chain (greedy: the same tokens; sampled: the same
  // distribution). Requests with a grammar draft chains. 1: chains.
  int32_t tree_width = 1;
  int32_t tree_nodes = 0;
  // The most nodes a step's tree may hold under these options (0: chains).
  int32_t tree_budget() const;
};
inline constexpr int32_t kMaxLookupMin = 64;
inline constexpr int32_t kMaxTreeNodes = 64;  // tree_nodes and tree_width at most

// One decoding step of a sequence: draft tokens verified (0: a plain step) and how many of
// them the target accepted.
struct SpeculativeStep {
  int32_t drafted = 0;
  int32_t accepted = 0;
};

// Counters in the form users compare across engines (vLLM's spec_decode_* counters).
struct SpeculativeMetrics {
  int64_t drafts = 0;           // verification steps that carried at least one draft token
  int64_t drafted_tokens = 0;
  int64_t accepted_tokens = 0;
  std::vector<int64_t> drafted_per_position;   // index i: steps that drafted a token at position i
  std::vector<int64_t> accepted_per_position;  // index i: steps whose draft token i was accepted
  int64_t target_passes = 0;    // target forward passes during decoding (verification or plain)
  int64_t draft_forwards = 0;   // draft model forward passes (one token each while drafting)
  double draft_ms = 0.0;        // time spent proposing
  double target_ms = 0.0;       // time in target forward passes during decoding
  double verify_ms = 0.0;       // time spent in the verifier (sampling, acceptance)
  std::vector<int64_t> steps_per_k;  // index k: decoding steps the policy drafted k for (k = 0: speculation off)
  // On a backend that decodes on the device (CUDA): decoding steps whose verdict was reached
  // there, and draft tokens the draft model drew there (its logits never left the device).
  int64_t device_verified_steps = 0;
  int64_t device_drafted_tokens = 0;
  // Steps whose drafts came from prompt lookup instead of the draft model
  // (SpeculativeOptions::lookup), their drafted and accepted tokens (also counted above).
  int64_t lookup_steps = 0;
  int64_t lookup_drafted_tokens = 0;
  int64_t lookup_accepted_tokens = 0;
  // Steps that verified a token tree (SpeculativeOptions::tree_width; also counted above:
  // drafted_tokens counts its nodes, the per-position counts are by depth).
  int64_t tree_steps = 0;
  // The draft model's prompt passes (after the first token, and again after preemption):
  // context tokens it read, and their time. Not in draft_ms or draft_forwards.
  int64_t draft_prefill_tokens = 0;
  double draft_prefill_ms = 0.0;
  // Every decoding step in order, only when the request asked (GenerateOptions::record_steps):
  // the trace `bench_policies replay` plays policies against.
  std::vector<SpeculativeStep> steps;

  double acceptance_rate() const { return drafted_tokens ? double(accepted_tokens) / drafted_tokens : 0.0; }
  // Tokens produced per draft step, counting the corrected/bonus token.
  double mean_accepted_length() const { return drafts ? 1.0 + double(accepted_tokens) / drafts : 0.0; }
  // Measured cost ratio c: time of one draft step over time of one target pass.
  double cost_ratio() const {
    if (!draft_forwards || !target_passes || target_ms <= 0) return 0.0;
    return (draft_ms / draft_forwards) / (target_ms / target_passes);
  }
  TANDEM_API void merge(const SpeculativeMetrics& o);
};

}  // namespace tandem
