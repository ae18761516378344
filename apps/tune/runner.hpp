// `tandem tune`'s measurement: every configuration (policy × k × temperature) generates
// from every prompt, with plain decoding of the same prompt, seed and temperature run
// between them (before the first configuration and after every few), so machine noise
// hits the speculative runs and their baseline alike. The speedup of a configuration is
// its decode tokens/s over that of the plain runs that bracket it.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "apps/tune/concurrency.hpp"
#include "policies/cost_model.hpp"
#include "tandem/engine.hpp"

namespace tandem::cli {

struct TunePrompt {
  std::string category;  // "chat", "code", "summarise", or what a prompts file says
  std::string text;
};

// A few short chat, code and summarisation prompts (ChatML markup, which the Qwen2.5 and
// SmolLM2 instruct models share; code prompts are bare code).
const std::vector<TunePrompt>& builtin_prompts();
// .jsonl: one object per line with "prompt" (or "text") and optional "category";
// anything else: one prompt per non-empty line, "\n" written as a backslash-n. Throws
// std::runtime_error naming the file and line.
std::vector<TunePrompt> load_prompts(const std::string& path);
// "1..8", "1,2,4" or "4" → sorted, unique, each in 1..32. Throws std::invalid_argument.
std::vector<int32_t> parse_k_list(const std::string& s);
std::vector<float> parse_float_list(const std::string& s);
std::vector<std::string> parse_name_list(const std::string& s);

struct TuneOptions {
  std::vector<TunePrompt> prompts;  // empty → builtin_prompts()
  std::vector<int32_t> k_values = {1, 2, 3, 4, 5, 6, 7, 8};
  std::vector<float> temps = {0.0f, 0.7f};
  std::vector<std::string> policies = {"fixed", "adaptive"};
  // Token trees compared with chains: each width above 1 runs every policy at the largest k
  // with trees of that width (SpeculativeOptions::tree_width; nodes: width x k).
  std::vector<int32_t> tree_widths = {1};
  DraftMode mode = DraftMode::Model;
  int32_t n_tokens = 64;
  int32_t reps = 1;          // passes over the prompt set
  int32_t ar_every = 3;      // a plain run after every this many configurations
  uint64_t seed = 1;
  float alpha_prior = 0.0f;  // for adaptive/goodput (0 → the policy's default)
  // Called after each generation: runs done, runs in all, what just ran.
  std::function<void(int64_t done, int64_t total, const std::string& what)> progress;
};

// One configuration's measurements, summed over prompts and repetitions.
struct ConfigResult {
  int32_t draft_vocab = 0;  // the draft's reduced vocabulary (0: all of it)
  std::string draft_type = "keep";  // the draft's weights (--draft-type) it was measured with
  std::string policy;
  int32_t k = 0;  // draft_max (for adaptive/goodput: the largest k they may choose)
  int32_t tree_width = 1;  // token trees of this width (1: chains)
  float temp = 0.0f;
  SpeculativeMetrics metrics;
  int64_t tokens = 0, ar_tokens = 0;        // decode tokens (the first comes from prefill)
  double decode_ms = 0.0, ar_decode_ms = 0.0;
  double total_ms = 0.0, ar_total_ms = 0.0;  // prefill + decode
  // Decode time in CPU time of the process: what machine load does not inflate (with one
  // thread; more threads add the time they wait for each other).
  double cpu_decode_ms = 0.0, ar_cpu_decode_ms = 0.0;
  double ar_target_ms = 0.0;                  // the plain runs' target passes, for T_target(1)
  int64_t ar_target_passes = 0;
  // Greedy runs with a cost model: the speedup replaying this configuration predicts over
  // the draft's agreement recorded with one far-drafting greedy run per prompt (fixed k = 16,
  // untimed; policies/replay.hpp): no timing noise, the cost model's pass times only, a
  // policy started at once. 0 where not replayed (sampling, the confidence policy, n-gram
  // drafts, no cost model).
  double replayed = 0.0;
  struct Prompt {
    std::string category;
    double speedup = 0.0;
    double cpu_speedup = 0.0;
  };
  std::vector<Prompt> prompts;

  double tokens_per_s() const { return decode_ms > 0 ? tokens * 1000.0 / decode_ms : 0.0; }
  double ar_tokens_per_s() const { return ar_decode_ms > 0 ? ar_tokens * 1000.0 / ar_decode_ms : 0.0; }
  double speedup() const;      // decode tokens/s over the bracketing plain runs'
  double e2e_speedup() const;  // the same over prefill + decode time
  double cpu_speedup() const;  // the same in CPU time
  double ar_pass_ms() const { return ar_target_passes ? ar_target_ms / ar_target_passes : 0.0; }
  double min_prompt_speedup() const;
  // Per-token acceptance α in the geometric model: accepted draft tokens over the draft
  // positions actually tried (each step's accepted ones plus its first rejected one).
  double alpha() const;
  std::vector<double> acceptance_per_position() const;  // accepted / drafted at each position
  // c = one draft forward over one plain target pass (both from this run).
  double c() const;
  double r_measured() const;  // mean verification pass over the plain pass (fixed k)
  double steps_off_fraction() const;  // steps with k = 0 (the last step of a run included)
  // Predicted speedups from α, c and the k chosen at each step: with r(k) = 1 (Leviathan)
  // and with the cost model's r(k).
  double predicted_r1() const;
  double predicted(const CostModel& costs) const;
};

struct Recommendation {
  float temp = 0.0f;
  int32_t draft_vocab = 0;  // the draft's reduced vocabulary it was measured with
  std::string draft_type = "keep";  // and the draft's weights
  std::string policy;  // "none" when nothing beat plain decoding
  int32_t k = 0;
  int32_t tree_width = 1;  // token trees (1: chains)
  double speedup = 1.0;
  double alpha = 0.0;  // measured in that configuration (a prior for adaptive)
  double off_fraction = 0.0;  // adaptive policies: share of steps they kept speculation off
};

struct TuneReport {
  std::string target, draft, backend, created;
  // The draft's reduced vocabulary recommended (tune --draft-vocabs), and the counts file its
  // ranking came from ("" for the token ids' order).
  int32_t draft_vocab = 0;
  std::string draft_vocab_counts;
  std::string draft_type = "keep";  // the draft weight type recommended (tune --draft-types)
  int32_t n_tokens = 0, reps = 0;
  std::vector<TunePrompt> prompts;
  std::vector<float> temps;
  std::vector<ConfigResult> results;
  std::vector<Recommendation> recommendations;  // one per temperature
  std::vector<ConcurrencyResult> concurrency;   // --concurrency: the recommendations in batches
  std::shared_ptr<const CostModel> costs;       // null when none was used
  double elapsed_s = 0.0;
};

// Runs the measurements on an engine that has the draft loaded (for DraftMode::Model).
// Uses engine.cost_model() for the adaptive/goodput policies and the predictions.
TuneReport run_tune(Engine& engine, const TuneOptions& opts);

// The best measured configuration per temperature; "none" where none beat plain decoding.
std::vector<Recommendation> recommend(const std::vector<ConfigResult>& results, const std::vector<float>& temps);
// Of the draft vocabularies the results were measured with, the one whose best speedups,
// averaged over the temperatures (plain decoding counting 1), are highest; ties: the larger.
int32_t best_draft_vocab(const std::vector<ConfigResult>& results, const std::vector<float>& temps);
// The same over (draft weight type, vocabulary) pairs: the pair whose best speedups average
// highest; ties: "keep" (the stored weights), then the larger vocabulary.
struct DraftVariant {
  std::string type = "keep";
  int32_t vocab = 0;
  bool operator==(const DraftVariant&) const = default;
};
DraftVariant best_draft_variant(const std::vector<ConfigResult>& results, const std::vector<float>& temps);
// "keep,q4_0" → the names, checked (engine/model/requantize.hpp), unique, in order.
std::vector<std::string> parse_draft_type_list(const std::string& s);
// The draft weight types tune compares when --draft-types is not given: the one --draft-type
// names, if it was given; else the stored weights and Q4_0, which measured the cheaper and
// faster draft for the Qwen pair on CPUs (docs/benchmarks.md), so tune offers it unasked.
std::vector<std::string> default_draft_types(bool draft_type_given, const std::string& draft_type);
// "0,16384,32768" → sorted, unique sizes, each 0 (the whole vocabulary) or >= 256.
std::vector<int32_t> parse_draft_vocab_list(const std::string& s);

}  // namespace tandem::cli
