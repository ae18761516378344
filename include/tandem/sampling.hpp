// Sampling parameters of a request: part of the public API (include/tandem/).
// engine/sampling/sampler.hpp turns them into the final distribution that is sampled and that
// speculative verification compares.
#pragma once
#include <cstdint>
#include <map>
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
  // OpenAI's logit_bias: token id → a value added to its logit after the penalties and before
  // every other transform (greedy's argmax included); about -100 bans a token, +100 all but
  // forces it. Values must be finite; ids must be >= 0, and the engine refuses ids outside the
  // target's vocabulary (the sampler alone skips them, as a smaller draft vocabulary must).
  std::map<int32_t, float> logit_bias;
  // Seeds the request's random draws (the sampler itself never reads it). Unset: each request
  // draws a fresh seed from the operating system's random source, as OpenAI's API does for a
  // request without one, and reports it (GenerateResult::seed) so its text can be reproduced.
  std::optional<uint64_t> seed;

  bool greedy() const { return temperature <= 0.0f; }
  bool has_penalties() const {
    return repetition_penalty != 1.0f || presence_penalty != 0.0f || frequency_penalty != 0.0f;
  }
  // Whether the logits change before the transforms (penalties or a bias), so that a greedy
  // request's token may be other than the raw logits' argmax.
  bool adjusts_logits() const { return has_penalties() || !logit_bias.empty(); }
};

}  // namespace tandem
