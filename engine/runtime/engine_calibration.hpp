// Calibrating the speculation cost model (policies/calibration.hpp) on a loaded Engine.
#pragma once
#include <memory>
#include <string>

#include "policies/calibration.hpp"
#include "tandem/engine.hpp"

namespace tandem {

// The engine's forward passes as calibration times them (Engine::time_forward_passes).
class EnginePassTimer final : public PassTimer {
 public:
  explicit EnginePassTimer(Engine& engine) : engine_(engine) {}
  std::string key() const override;
  bool key_is_live(const std::string& other) const override;
  bool has_draft() const override;
  std::vector<std::vector<double>> time_passes(bool draft, int32_t batch, std::span<const int32_t> n_values,
                                               int32_t context, int32_t reps) override;

 private:
  Engine& engine_;
};

// The identity of an engine's cost model: target and draft paths with their file sizes, and
// the backend's name (which carries the kernel ISA and the thread count).
std::string cost_model_key(const Engine& engine);
// Whether a cost-model key (cost_model_key's format) can still be looked up by this build:
// its target and draft files (and a draft vocabulary's counts file) exist with the sizes it
// names, and it carries this build's version and timing revision (keys of this format from
// builds before keys carried one do not). Keys of another format are kept.
bool cost_model_key_is_live(const std::string& key);

// Measures the engine's target (and draft, if loaded) passes, or loads them from the cache
// when it holds this engine's key and covers k_max. Does not install the model: pass it to
// Engine::set_cost_model. *from_cache tells which happened.
std::shared_ptr<CostModel> calibrate_cost_model(Engine& engine, const CalibrationOptions& opts,
                                                bool* from_cache = nullptr);

// calibrate_cost_model, then Engine::set_cost_model with the result; true when it came
// from the cache.
bool calibrate_and_install(Engine& engine, const CalibrationOptions& opts);

}  // namespace tandem
