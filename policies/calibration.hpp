// Measuring a cost model (cost_model.hpp): forward passes of n = 1..k_max+1 tokens of the
// target and of the draft, interleaved so machine noise hits both alike, or a cached model
// still fresh. The passes are timed through PassTimer, which the engine implements
// (engine/runtime/engine_calibration.hpp): the policies know nothing of the engine.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "policies/cost_model.hpp"

namespace tandem {

// What calibration times passes with.
class PassTimer {
 public:
  virtual ~PassTimer() = default;
  // The identity of what is timed (models, their sizes, backend, threads): the cache key.
  virtual std::string key() const = 0;
  // Whether another cache entry's key can still be looked up (its models are there and
  // unchanged, it is this build's): entries for which this says false are dropped when a
  // new measurement is saved. Keeps every entry by default.
  virtual bool key_is_live(const std::string&) const { return true; }
  virtual bool has_draft() const = 0;
  // `batch` sequences holding `context` tokens each get n new tokens in ONE pass; returns
  // ms[i][r] for n = n_values[i] and repetition r (as Engine::time_forward_passes).
  virtual std::vector<std::vector<double>> time_passes(bool draft, int32_t batch, std::span<const int32_t> n_values,
                                                       int32_t context, int32_t reps) = 0;
};

struct CalibrationOptions {
  int32_t k_max = 8;                             // target passes over n = 1..k_max+1 tokens
  std::vector<int32_t> extra_n = {16, 32};       // also: draft catch-up, batch model
  // A cached model is used only when its passes reach this many tokens (and k_max + 1): the
  // server's batches add the token counts their steps reach (batch_token_points).
  int32_t cover_n = 0;
  std::vector<int32_t> batches = {1};            // batch sizes measured (1 is always)
  int32_t context = 32;                          // tokens each sequence holds before the pass
  int32_t reps = 5, warmup = 1;                  // median of reps after warmup passes
  std::string cache_path;                        // "" → no file cache
  bool force = false;                            // measure even when the cache has the key
  // A cached model is checked against a quick timing of one-token passes (a few hundred
  // ms): if target or draft is now more than this fraction faster or slower (another
  // machine load, a kernel upgrade, a model measured under load), it is measured again.
  // 0 trusts the cache.
  double stale_tolerance = 0.35;
  std::function<void(double fraction)> progress;  // 0..1 while measuring
};

// The pass sizes a batch of up to `max_tokens` target tokens needs measured beyond the
// defaults: doublings from 64, and max_tokens itself (beyond the last, a curve extrapolates).
std::vector<int32_t> batch_token_points(int32_t max_tokens);

// Measures the target (and draft, if there is one) passes through `timer`, or loads them from
// the cache when it holds the timer's key and covers k_max. *from_cache tells which happened.
std::shared_ptr<CostModel> calibrate_cost_model(PassTimer& timer, const CalibrationOptions& opts,
                                                bool* from_cache = nullptr);

}  // namespace tandem
