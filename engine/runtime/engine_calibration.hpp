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

// calibrate_cost_model, then Engine::set_cost_model with the result, and the engine's
// tree-or-chain record and output lengths restored from the same cache file
// (restore_shape_choice, restore_output_lengths); true when the model came from the cache.
bool calibrate_and_install(Engine& engine, const CalibrationOptions& opts);

// What the engine's ShapeChoice (token trees against chains, policies/shape_choice.hpp) has
// learned, kept in the cost cache file under the engine's cost-model key
// (policies/shape_cache.hpp): restore it after a cost model is installed (true when there was
// a record), save it before the process ends. Saving is skipped while nothing was learned,
// and a cache that cannot be written is reported on the log, never thrown.
bool restore_shape_choice(const Engine& engine, const std::string& cache_path);
void save_shape_choice(const Engine& engine, const std::string& cache_path);
// The same for the lengths of the outputs the engine finished (policies/output_lengths.hpp),
// under the same key: saving is skipped while no output finished.
bool restore_output_lengths(const Engine& engine, const std::string& cache_path);
void save_output_lengths(const Engine& engine, const std::string& cache_path);

}  // namespace tandem
