// tandem's C++ API: load a model, generate text with streaming. The CLI is a thin user of
// this header; include/tandem/tandem.h is the C API over it. The options and results it
// takes and gives are plain values in tandem/generation.hpp.
//
// Thread safety, per type:
//  - LoadOptions, GenerateOptions, GenerateResult, Timings, ModelInfo, SamplingParams,
//    SpeculativeOptions/Metrics: plain values, no shared state.
//  - Engine: generate, generate_tokens and logits may be called from any thread; they run
//    one at a time (an internal mutex: later callers wait). tokenize, detokenize, info,
//    backend_description and cancel may be called from any thread at any time, also while a
//    generation runs. The destructor must not overlap any other call. Separate Engines are
//    independent and run in parallel (each has its own thread pool).
//  - StreamCallback, StreamEventCallback: run on the thread that called generate, with the Engine's mutex held:
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
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tandem/export.h"
#include "tandem/generation.hpp"
#include "tandem/version.hpp"

namespace tandem {

class CostModel;  // speculation cost model: policies/cost_model.hpp

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
  // The same with a callback that also gets each token's logprobs (opts.logprobs >= 0).
  GenerateResult generate(std::string_view prompt, const GenerateOptions& opts, const StreamEventCallback& cb);
  GenerateResult generate_tokens(std::span<const int32_t> prompt, const GenerateOptions& opts,
                                 const StreamEventCallback& cb);
  // Logits of every position of `tokens` from a fresh sequence ([n, n_vocab] row-major).
  std::vector<float> logits(std::span<const int32_t> tokens);

  // Cancels every generate/generate_tokens call already running or waiting on this Engine
  // when cancel() is called; later calls are unaffected. They stop at their next token
  // (a long prompt's prefill is not interrupted) with FinishReason::Cancelled. Thread-safe.
  void cancel();

  std::vector<int32_t> tokenize(std::string_view text, bool add_special = true, bool parse_special = true) const;
  std::string detokenize(std::span<const int32_t> tokens) const;
  // A fill-in-the-middle prompt for a code model (Qwen2.5-Coder, StarCoder, CodeLlama,
  // DeepSeek-Coder, ...): its prefix, suffix and middle markers around the two texts (PSM
  // order), BOS first where the model adds one; what is generated from it is the text that
  // goes between `prefix` and `suffix`. Both are plain text: control-token texts in them are
  // not parsed. Throws std::invalid_argument when the model has no such markers.
  std::vector<int32_t> fim_prompt(std::string_view prefix, std::string_view suffix) const;
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
  // Changes the draft's reduced vocabulary (LoadOptions::draft_vocab; 0: the whole one), as
  // `tandem tune` does to compare sizes. The cost model stays as it was: recalibrate after
  // (its cache key includes the size). Throws std::invalid_argument without a draft model
  // or for n < 0. Waits for a running generation, like generate.
  void set_draft_vocab(int32_t n);
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
