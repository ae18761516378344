// tandem's C++ API: load a model, generate text with streaming. The CLI is a thin user of
// this header. Thread-safety: an Engine may be used from one thread at a time (generate
// calls are serialised internally by a mutex); separate Engines are independent.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tandem/sampling.hpp"
#include "tandem/speculative.hpp"
#include "tandem/version.hpp"

namespace tandem {

struct LoadOptions {
  std::string model_path;
  std::string draft_model_path;  // optional draft model; must share the target's vocabulary
  int threads = 0;            // 0 → one per available core
  int32_t context = 0;        // max tokens per sequence; 0 → min(model's training context, 4096)
  std::string kv_type = "f16";  // "f16" | "f32"
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
const char* to_string(FinishReason r);

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
  size_t weight_bytes = 0, kv_bytes = 0;
  std::string backend;  // e.g. "cpu (avx2, 2 threads)"
  std::string draft_path, draft_name;  // empty without a draft model
};

// Called with each newly completed piece of text (UTF-8 complete) and the token that
// completed it; return false to cancel the generation.
using StreamCallback = std::function<bool(std::string_view text, int32_t token)>;

class Engine {
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

  std::vector<int32_t> tokenize(std::string_view text, bool add_special = true, bool parse_special = true) const;
  std::string detokenize(std::span<const int32_t> tokens) const;
  ModelInfo info() const;
  std::string backend_description() const;

  struct Impl;

 private:
  explicit Engine(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace tandem
