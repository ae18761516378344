// tandem's C++ API: load a model, generate text with streaming. The CLI is a thin user of
// this header; include/tandem/tandem.h is the C API over it.
//
// Thread safety, per type:
//  - LoadOptions, GenerateOptions, GenerateResult, Timings, ModelInfo, SamplingParams,
//    SpeculativeOptions/Metrics: plain values, no shared state.
//  - Engine: generate, generate_tokens and logits may be called from any thread; they run
//    one at a time (an internal mutex: later callers wait). tokenize, detokenize, info,
//    backend_description and cancel may be called from any thread at any time, also while a
//    generation runs. The destructor must not overlap any other call. Separate Engines are
//    independent and run in parallel (each has its own thread pool).
//  - StreamCallback: runs on the thread that called generate, with the Engine's mutex held:
//    it must not call generate/generate_tokens/logits on the same Engine (deadlock).
//
// Cancellation: return false from the StreamCallback, or call Engine::cancel() from another
// thread. Either way generate returns normally with FinishReason::Cancelled and the output
// produced so far.
//
// Binary compatibility: libtandem.so exports this class, but its layout and these structs
// may change between minor versions: C++ programs rebuild on upgrade. The C API keeps ABI.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tandem/export.h"
#include "tandem/sampling.hpp"
#include "tandem/speculative.hpp"
#include "tandem/version.hpp"

namespace tandem {

class CostModel;  // speculation cost model: policies/cost_model.hpp

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
  std::string device = "cpu";   // "cpu" ("cuda" when built with CUDA: see `tandem --version`)
};

struct GenerateOptions {
  int32_t max_tokens = 128;
  SamplingParams sampling;
  std::vector<std::string> stop;  // generation ends before the first occurrence of any of these
  bool add_special = true;        // prepend BOS etc. as the model's metadata says
  bool parse_special = true;      // special-token texts in the prompt become special tokens
  bool ignore_eos = false;
  SpeculativeOptions speculative;
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
};

struct ModelInfo {
  std::string path, architecture, name;
  int32_t n_vocab = 0, n_layer = 0, n_embd = 0, n_head = 0, n_head_kv = 0, context = 0;
  size_t weight_bytes = 0, kv_bytes = 0;  // kv_bytes: the KV memory budget of target and draft together
  std::string backend;  // e.g. "cpu (avx2, 2 threads)"
  std::string draft_path, draft_name;  // empty without a draft model
};

// Called for each generated token with the text it completed (UTF-8 complete; empty while
// a character or a possible stop string is incomplete) and the token; return false to
// cancel the generation. Text held back until the end comes in one last call whose return
// value is ignored.
using StreamCallback = std::function<bool(std::string_view text, int32_t token)>;

class TANDEM_API Engine {
 public:
  // Throws std::runtime_error with a message naming the file and the problem.
  static std::unique_ptr<Engine> load(const LoadOptions& opts);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  GenerateResult generate(std::string_view prompt, const GenerateOptions& opts, const StreamCallback& cb = {});
  GenerateResult generate_tokens(std::span<const int32_t> prompt, const GenerateOptions& opts,
                                 const StreamCallback& cb = {});
  // Logits of every position of `tokens` from a fresh sequence ([n, n_vocab] row-major).
  std::vector<float> logits(std::span<const int32_t> tokens);

  // Cancels every generate/generate_tokens call already running or waiting on this Engine
  // when cancel() is called; later calls are unaffected. They stop at their next token
  // (a long prompt's prefill is not interrupted) with FinishReason::Cancelled. Thread-safe.
  void cancel();

  std::vector<int32_t> tokenize(std::string_view text, bool add_special = true, bool parse_special = true) const;
  std::string detokenize(std::span<const int32_t> tokens) const;
  ModelInfo info() const;
  std::string backend_description() const;

  // Speculation cost model (policies/cost_model.hpp builds it with calibrate_cost_model()).
  // Times forward passes: `batch` sequences already holding `context` tokens each get
  // `n` new tokens in ONE pass (the target with logits at every position, as verification
  // needs; the draft with the last position's, as drafting needs). Returns ms[i][r] for
  // n = n_values[i] and repetition r; repetitions are interleaved across n_values so
  // machine noise hits all alike. The context prefill is not timed. Throws when the cache
  // cannot hold the batch, or for draft = true without a draft model.
  std::vector<std::vector<double>> time_forward_passes(bool draft, int32_t batch, std::span<const int32_t> n_values,
                                                       int32_t context, int32_t reps);
  // The cost model the adaptive and goodput policies decide with (null → their default).
  void set_cost_model(std::shared_ptr<const CostModel> model);
  std::shared_ptr<const CostModel> cost_model() const;

  struct Impl;

 private:
  friend struct EngineAccess;  // engine-internal code (the server's scheduler) reaches the parts
  explicit Engine(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace tandem
