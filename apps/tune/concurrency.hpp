// `tandem tune --concurrency`: what a configuration gives in the server's batches. A
// recommendation measured one sequence at a time says nothing of many streams (fixed k = 4
// can be 1.4× alone and slower than plain at four streams). So for each recommended
// configuration, and for the server's default policy (goodput, the step budget) at the same k,
// the prompts are served through the scheduler with `streams` sequences at once, plain
// decoding of the same requests run right before and after (machine noise hits both alike),
// and the throughputs compared.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "tandem/engine.hpp"

namespace tandem::cli {

struct ConcurrencyResult {
  float temp = 0.0f;
  std::string policy;
  int32_t k = 0;
  int32_t streams = 0;
  int64_t tokens = 0;             // generated, each of the speculative and the plain runs
  double plain_tok_s = 0.0;       // the two plain runs' mean
  double spec_tok_s = 0.0;
  SpeculativeMetrics metrics;     // the speculative run's, all requests together
  double ratio() const { return plain_tok_s > 0 ? spec_tok_s / plain_tok_s : 0.0; }
};

struct ConcurrencyOptions {
  std::vector<int32_t> streams = {1, 2, 4};
  int32_t waves = 2;  // requests per level: waves × streams (at least 2)
  int32_t n_tokens = 64;
  uint64_t seed = 1;
};

// `configs` are (temperature, speculative options) pairs; the prompts (text, as generate
// takes it) are used in turn.
std::vector<ConcurrencyResult> measure_concurrency(Engine& engine, const std::vector<std::string>& prompts,
                                                   const std::vector<std::pair<float, SpeculativeOptions>>& configs,
                                                   const ConcurrencyOptions& opts);

}  // namespace tandem::cli
