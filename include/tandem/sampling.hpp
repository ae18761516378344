// Sampling parameters of a request: part of the public API (include/tandem/).
// engine/sampling/sampler.hpp turns them into the final distribution that is sampled and that
// speculative verification compares.
#pragma once
#include <cstdint>
#include <optional>

namespace tandem {

struct SamplingParams {
  float temperature = 0.8f;  // <= 0 → greedy
  int32_t top_k = 40;        // <= 0 → off
  float top_p = 0.95f;       // >= 1 → off; <= 0 → keep only the most likely token
  float min_p = 0.05f;       // <= 0 → off; keeps tokens with p >= min_p * p_max
  // llama.cpp/CTRL style: logit > 0 ? logit / penalty : logit * penalty, once per distinct
  // token among the last `repetition_window` history tokens. 1 → off; must be > 0.
  float repetition_penalty = 1.0f;
  int32_t repetition_window = 64;  // < 0 → whole history, 0 → none
  // OpenAI semantics over the whole history: logit -= count * frequency + (count > 0) * presence.
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  // Seeds the request's random draws (the sampler itself never reads it). Unset: each request
  // draws a fresh seed from the operating system's random source, as OpenAI's API does for a
  // request without one, and reports it (GenerateResult::seed) so its text can be reproduced.
  std::optional<uint64_t> seed;

  bool greedy() const { return temperature <= 0.0f; }
  bool has_penalties() const {
    return repetition_penalty != 1.0f || presence_penalty != 0.0f || frequency_penalty != 0.0f;
  }
};

}  // namespace tandem
