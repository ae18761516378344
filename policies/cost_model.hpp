// The speculation cost model: how long a target pass over n tokens and a draft step take on
// this machine, measured with the real models (calibration.hpp), cached in a JSON file
// and turned into the quantities of the speedup formula
//   c = T_draft(1) / T_target(1),  r(k) = T_target(k+1) / T_target(1),
//   E(α, k) = (1 − α^(k+1)) / (1 − α),  S(α, k) = E / (k·c + r(k)),
// which the adaptive and goodput policies maximise over k (k = 0 is plain decoding, S = 1).
//
// Batch dimension: every curve belongs to a batch size b (sequences in the pass, each with
// n tokens). Only b = 1 is measured by default. For a b without its own curve the model
// says a pass costs what one sequence's pass over b·n tokens costs: a pass reads each weight
// once for all its rows, so on a CPU its time follows the total row count; attention over
// the (short) contexts is left out. Beyond the last measured n a curve extrapolates
// linearly along its last segment (the compute-bound regime).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace tandem {

// Timings of one model's passes for one batch size: ms[i] is the median time of a pass
// where each of `batch` sequences carries n[i] new tokens (n ascending).
struct PassCurve {
  int32_t batch = 1;
  std::vector<int32_t> n;
  std::vector<double> ms;
  double at(double tokens) const;  // interpolated / extrapolated, see above
};

class CostModel {
 public:
  CostModel() = default;
  CostModel(std::string key, std::vector<PassCurve> target, std::vector<PassCurve> draft);
  // A model given directly as ratios (tests, defaults): T_target(1) = 1 ms, a draft step
  // costs c, r[k] = T_target(k+1) / T_target(1) for k = 0..r.size()-1 (r[0] = 1).
  static CostModel from_ratios(double c, const std::vector<double>& r);
  // What the policies use when nothing was calibrated: a modest CPU where verifying k+1
  // tokens costs r(k) = 1 + 0.15·k target steps and a draft step 0.35 of one (close to the
  // Qwen2.5-Coder 0.5B → 1.5B pair measured on a 2-core AVX2 machine). Conservative on
  // purpose: it turns speculation on only for well-agreeing pairs.
  static const CostModel& assumed_default();

  const std::string& key() const { return key_; }
  // Measured in milliseconds on a machine (calibrated), not bare ratios (from_ratios, the
  // assumed default): only then can step timings be compared with it directly.
  bool absolute() const { return !key_.empty() && key_ != "synthetic" && key_ != "assumed-default"; }
  bool has_draft() const { return !draft_.empty(); }
  int32_t max_measured_n() const;  // largest n in the batch-1 target curve

  // Milliseconds of one pass with `batch` sequences of n tokens each.
  double target_ms(int32_t n, int32_t batch = 1) const;
  double draft_ms(int32_t n, int32_t batch = 1) const;
  double c(int32_t batch = 1) const;
  double r(int32_t k, int32_t batch = 1) const;
  // The draft's catch-up: a draft pass over `tokens` new tokens (after speculation was
  // off for a while), in units of one target step at this batch size.
  double catch_up(int32_t tokens, int32_t batch = 1) const;

  static double expected_tokens(double alpha, int32_t k);
  // E / (k·c + r(k)); 1 for k = 0. `draft_free` sets c = 0 (n-gram drafts cost ~nothing).
  double predict_speedup(double alpha, int32_t k, int32_t batch = 1, bool draft_free = false) const;

  std::string to_json() const;
  static CostModel from_json(const std::string& text);  // throws std::runtime_error

  const std::vector<PassCurve>& target_curves() const { return target_; }
  const std::vector<PassCurve>& draft_curves() const { return draft_; }

  // Calibration settings, kept for the record.
  int32_t context = 0, reps = 0, warmup = 0;
  std::string created;  // UTC, ISO 8601

 private:
  const PassCurve* curve(const std::vector<PassCurve>& cs, int32_t batch) const;
  double pass_ms(const std::vector<PassCurve>& cs, int32_t n, int32_t batch) const;

  std::string key_;
  std::vector<PassCurve> target_, draft_;
};

// The cache file holds one cost model per key (models, their sizes, backend, threads).
std::string default_cost_cache_path();  // $TANDEM_CACHE or $XDG_CACHE_HOME/tandem or ~/.cache/tandem, + /cost_models.json
// The model stored under `key`, or null (no file, no such key, unreadable entry).
std::shared_ptr<CostModel> load_cached_cost_model(const std::string& path, const std::string& key);
// Adds or replaces the model's entry; creates the directory. Throws on I/O errors. The other
// entries for which `keep` (when given) says false are dropped: keys nothing can look up any
// more (models deleted or changed, another build's timings), which would otherwise pile up.
using CostKeyFilter = std::function<bool(const std::string& key)>;
void save_cached_cost_model(const std::string& path, const CostModel& model, const CostKeyFilter& keep = {});

}  // namespace tandem
