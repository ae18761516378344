// The configuration file `tandem tune --write-config` writes and `generate --config` (and
// later `serve --config`) reads: the speculative settings recommended per temperature,
// with the cost model the adaptive policies decide with.
//
//   {"format": "tandem-config", "version": 1, "target": ..., "draft": ..., "backend": ...,
//    "speculative": {"draft": "model", "policy": "fixed", "draft_max": 3, ...},
//    "per_temperature": [{"temp": 0, "speculative": {...}, "measured_speedup": 1.12}, ...],
//    "cost_model": {...}}
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "apps/tune/runner.hpp"
#include "policies/cost_model.hpp"

namespace tandem::cli {

struct SpecSettings {
  std::string draft = "model";  // "model", "ngram" or "none" (plain decoding)
  std::string policy = "fixed";
  int32_t draft_max = 4;
  float draft_p_min = 0.0f;
  float alpha_prior = 0.0f;
  int32_t tree_width = 1;  // token trees (1: chains)
};

struct TandemConfig {
  std::string target, draft, backend;
  // The draft's reduced vocabulary (LoadOptions::draft_vocab; 0: all of it) and its counts file.
  int32_t draft_vocab = 0;
  std::string draft_vocab_counts;
  std::string draft_type = "keep";  // the draft's weights (LoadOptions::draft_type) it was measured with
  SpecSettings defaults;  // used when per_temperature is empty
  struct PerTemp {
    float temp = 0.0f;
    SpecSettings spec;
    double measured_speedup = 0.0;
  };
  std::vector<PerTemp> per_temperature;
  std::shared_ptr<CostModel> cost_model;  // may be null

  // The entry measured at the temperature nearest to t (the defaults without entries).
  const SpecSettings& for_temperature(float t) const;
};

// From tune's recommendations; draft_mode is "model" or "ngram".
TandemConfig config_from_report(const TuneReport& report, const std::string& draft_mode);
std::string config_to_json(const TandemConfig& c);
TandemConfig config_from_json(const std::string& text);  // throws std::runtime_error
TandemConfig load_config(const std::string& path);       // throws std::runtime_error naming the file
void save_config(const std::string& path, const TandemConfig& c);

// Command-line flags given explicitly: they win over the file.
struct ExplicitFlags {
  bool draft = false, draft_max = false, draft_p_min = false, policy = false, draft_vocab = false;
  bool draft_type = false;
  bool tree_width = false;
};
// The config's draft vocabulary and weight type into `load` unless --draft-vocab or
// --draft-type was given (and only with a draft model: they belong to the draft the config
// was measured with).
void apply_config_load(const TandemConfig& c, const ExplicitFlags& given, LoadOptions& load);
// Applies the file's settings for temperature `temp` to draft_mode ("model", "ngram",
// "none") and the speculative options, except what `given` marks.
void apply_config(const TandemConfig& c, float temp, const ExplicitFlags& given, std::string& draft_mode,
                  SpeculativeOptions& so);
// Gives the engine a cost model when `so.policy` needs one: the config's if it was measured
// for this engine (same models, sizes, backend, threads), else one measured now (cached in
// default_cost_cache_path(), so only the first run pays). Returns what it did, for logs.
// batch_tokens: the most target tokens a step may carry (the server's batches), which the
// measured passes must reach; 0 for one sequence.
std::string ensure_cost_model(Engine& engine, const SpeculativeOptions& so, const TandemConfig* config,
                              int32_t batch_tokens = 0);

}  // namespace tandem::cli
