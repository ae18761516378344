// The plain values of the C++ API (tandem/engine.hpp): how to load, what to generate, and
// what came out. No shared state: copy them freely between threads.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "tandem/export.h"
#include "tandem/sampling.hpp"
#include "tandem/speculative.hpp"

namespace tandem {

struct LoadOptions {
  std::string model_path;
  std::string draft_model_path;  // optional draft model; must share the target's vocabulary
  int threads = 0;            // 0 → one per available core
  bool pin_threads = false;   // bind each CPU worker thread to one core
  int32_t context = 0;        // max tokens per sequence; 0 → min(model's training context, 4096)
  std::string kv_type = "f16";  // "f16" | "f32"
  // KV cache memory for target and draft together; 0 → one context's worth (single-stream use).
  // A server sets it to hold many sequences; it must hold at least one full context.
  size_t kv_mem_bytes = 0;
  // "auto": a CUDA device when this build has the CUDA backend and a device is present, else
  // the CPU (ModelInfo::backend_note says why); "cpu"; "cuda" (an error without a device);
  // "cuda-emulated": the CUDA backend's kernels run on the CPU under the SIMT emulator
  // (slow: for tests). `tandem --version` lists the backends of a build.
  std::string device = "auto";
  // CUDA: the one device memory arena holding both models' weights, both KV caches and all
  // scratch; 0 → 90% of the device's free memory.
  size_t gpu_mem_bytes = 0;
  // A reduced draft vocabulary (FR-Spec): the draft computes logits for its `draft_vocab`
  // most frequent tokens only (and the end-of-generation ones), so its output head costs
  // that many rows instead of the whole vocabulary. 0 → the whole vocabulary. The target
  // verifies as always: outputs are unchanged, only acceptance and draft cost move.
  // Frequencies come from draft_vocab_counts (a file `tandem draft-vocab` writes), else from
  // the token ids' order (a BPE vocabulary's merge order). Needs a draft model.
  int32_t draft_vocab = 0;
  std::string draft_vocab_counts;
  // The draft's matrix weights re-quantized at load: "auto" (those stored in a quantized type
  // above 5 bits per weight, Q5_0/Q5_1/Q5_K/Q6_K/Q8_0, become Q4_0; 4-bit and float ones stay),
  // "keep" (as stored), or q4_0, q4_1, q5_0, q5_1, q8_0, q4_k for every matrix. A cheaper type makes
  // the draft faster and may lower its acceptance; outputs are unchanged (the target
  // verifies). An explicit type needs a draft model.
  std::string draft_type = "auto";
  // The target's matrix weights quantized at load: "keep" (as stored), or q4_0, q4_1, q5_0,
  // q5_1, q8_0, q4_k for every matrix stored in another type (whose rows are whole blocks). For models stored in floats (a
  // Hugging Face folder's bf16): a quantized matrix streams 2-4× fewer bytes per token. The
  // output is then the quantized model's.
  std::string weight_type = "keep";
};

struct GenerateOptions {
  int32_t max_tokens = 128;
  SamplingParams sampling;
  std::vector<std::string> stop;  // generation ends before the first occurrence of any of these
  bool add_special = true;        // prepend BOS etc. as the model's metadata says
  bool parse_special = true;      // special-token texts in the prompt become special tokens
  bool ignore_eos = false;
  // Tokens that end the output when generated, as an end-of-generation token does (vLLM's
  // stop_token_ids): such a token is the last of GenerateResult::tokens and adds no text;
  // ignore_eos does not lift them. Each inside the vocabulary, else std::invalid_argument.
  std::vector<int32_t> stop_token_ids;
  SpeculativeOptions speculative;
  // Constrained decoding: the output is a sentence of this GBNF grammar (llama.cpp's grammar
  // format; json_schema_to_gbnf in engine/grammar/json_schema.hpp writes one from a JSON
  // Schema). Empty → unconstrained. Each token is drawn from the target's distribution over
  // the tokens the grammar allows next (renormalised), with speculation on or off alike; the
  // output ends (FinishReason::Stop) once the grammar allows nothing more, and end-of-
  // generation tokens are allowed only where the grammar may end. A bad grammar throws
  // std::invalid_argument naming line and column.
  std::string grammar;
  // Log-probabilities of the output (GenerateResult::logprobs, StreamEvent::logprobs):
  // -1 → none; 0..kMaxTopLogprobs → each generated token's own and this many most likely
  // alternatives. They are the TARGET's, of the distribution the token was drawn from (after
  // penalties, temperature, top-k, top-p, min-p; tokens those cut have -inf), whether a draft
  // proposed the token or not, so speculation never changes them. Greedy requests (which
  // draw from no distribution) get the log-softmax of the penalised logits at temperature 1.
  // On the CUDA backend they are reached on the device with the verdict: only the numbers
  // asked for cross to the host.
  int32_t logprobs = -1;
  // Log-probabilities of the PROMPT (GenerateResult::prompt_logprobs): -1 → none;
  // 0..kMaxTopLogprobs → each prompt token after the first gets its log-probability under the
  // target given the tokens before it, and this many most likely alternatives: the
  // log-softmax of the raw logits at temperature 1, whatever the sampling settings (what
  // scoring a text means: OpenAI's `echo` with `logprobs`, lm-evaluation-harness's
  // loglikelihood). The prompt is then read with its logits, kPromptLogprobsChunk tokens a
  // pass, and never taken from the server's prefix cache. With max_tokens 0 nothing is
  // generated: the request only scores its prompt.
  int32_t prompt_logprobs = -1;
  // Keep every decoding step's drafted and accepted counts (SpeculativeMetrics::steps).
  bool record_steps = false;
};

inline constexpr int32_t kMaxTopLogprobs = 20;
// Prompt tokens a pass reads with their logits for prompt_logprobs: the logits of a pass are
// n_vocab floats a token (600 KB for Qwen2.5's vocabulary), so a 256-token chunk's would be
// 150 MB.
inline constexpr int32_t kPromptLogprobsChunk = 64;

struct TokenLogprob {
  int32_t token = -1;
  float logprob = 0.0f;  // natural log; -inf for a token the sampling transforms cut
};

// One generated token's log-probability and the most likely alternatives at its position.
struct TokenLogprobs {
  TokenLogprob chosen;
  std::vector<TokenLogprob> top;  // most likely first (ties: lower id first); may hold `chosen`
};

enum class FinishReason { Stop, Length, Cancelled };
TANDEM_API const char* to_string(FinishReason r);

struct Timings {
  int32_t n_prompt = 0;
  int32_t n_generated = 0;
  double prefill_ms = 0.0;  // prompt forward, up to the first sampled token
  double decode_ms = 0.0;   // every later token
  double prefill_tokens_per_s() const { return prefill_ms > 0 ? n_prompt * 1000.0 / prefill_ms : 0.0; }
  // The first token comes from the prefill pass, so decode speed counts the rest.
  double decode_tokens_per_s() const {
    return decode_ms > 0 && n_generated > 1 ? (n_generated - 1) * 1000.0 / decode_ms : 0.0;
  }
};

struct GenerateResult {
  std::vector<int32_t> prompt_tokens;
  std::vector<int32_t> tokens;  // generated tokens (a stop string's tokens included)
  std::string text;             // generated text, cut before a stop string
  FinishReason finish = FinishReason::Length;
  Timings timings;
  SpeculativeMetrics speculative;
  std::vector<TokenLogprobs> logprobs;  // one per entry of `tokens` when opts.logprobs >= 0, else empty
  // When opts.prompt_logprobs >= 0: one per prompt token after the first (entry i is
  // prompt_tokens[i + 1]'s), else empty.
  std::vector<TokenLogprobs> prompt_logprobs;
  // The seed the output was drawn with: the request's, or the fresh one drawn for it when it
  // gave none (SamplingParams::seed). Giving it back reproduces the text.
  uint64_t seed = 0;
  // The stop string (GenerateOptions::stop) that ended the output; "" when none did.
  std::string stop_string;
};

struct ModelInfo {
  std::string path, architecture, name;
  int32_t n_vocab = 0, n_layer = 0, n_embd = 0, n_head = 0, n_head_kv = 0, context = 0;
  size_t weight_bytes = 0, kv_bytes = 0;
  std::string weight_type;  // the target's matrix weights: "keep" or the type they were quantized to at load  // kv_bytes: the KV memory budget of target and draft together
  std::string backend;  // e.g. "cpu (avx2, 2 threads)"
  std::string backend_note;  // why device "auto" did not choose CUDA (one line), else empty
  std::string draft_path, draft_name;  // empty without a draft model
  // The draft's reduced vocabulary: its size (0: the whole vocabulary) and where its ranking
  // came from ("token ids", or the counts file's path).
  int32_t draft_vocab = 0;
  std::string draft_vocab_ranking;
  std::string draft_type;  // the draft's matrix weights: "keep", "auto" or the type they were re-quantized to
  size_t draft_weight_bytes = 0;  // the draft's weights as loaded (after re-quantization)
};

// Called for each generated token with the text it completed (UTF-8 complete; empty while
// a character or a possible stop string is incomplete) and the token; return false to
// cancel the generation. Text held back until the end comes in one last call whose return
// value is ignored.
using StreamCallback = std::function<bool(std::string_view text, int32_t token)>;

// The same calls with the token's log-probabilities as well (null when the request did not
// ask for them, and in the last call that only flushes held-back text). An end-of-generation
// token gets no call, as with StreamCallback; its logprobs are in GenerateResult::logprobs.
struct StreamEvent {
  std::string_view text;
  int32_t token = -1;
  const TokenLogprobs* logprobs = nullptr;
  // The prompt's log-probabilities (GenerateOptions::prompt_logprobs), all of them, in the
  // first call (the prompt is scored before the first token is drawn); null in every other
  // call and when not asked for. A generation that makes no call (nothing generated, or only
  // an end-of-generation token) has them in GenerateResult::prompt_logprobs alone.
  const std::vector<TokenLogprobs>* prompt_logprobs = nullptr;
};
using StreamEventCallback = std::function<bool(const StreamEvent& event)>;

}  // namespace tandem
