#include "engine/runtime/engine_calibration.hpp"

#include <algorithm>
#include <filesystem>
#include <optional>

#include <spdlog/spdlog.h>

#include "engine/runtime/engine_access.hpp"
#include "kernels/backend.hpp"
#include "policies/shape_cache.hpp"
#include "policies/shape_choice.hpp"
#include "tandem/version.hpp"

namespace tandem {

namespace {
std::string build_tag() { return std::string("tandem=") + version_string() + ".t" + std::to_string(kernels::kTimingRevision); }

// The value of `name=` in a ';'-separated key, or nullopt.
std::optional<std::string> key_field(const std::string& key, const std::string& name) {
  size_t at = 0;
  while (at <= key.size()) {
    const size_t end = std::min(key.find(';', at), key.size());
    if (key.compare(at, name.size() + 1, name + "=") == 0) return key.substr(at + name.size() + 1, end - at - name.size() - 1);
    at = end + 1;
  }
  return std::nullopt;
}

// "PATH:SIZE" (or "-"): the file is there with that size.
bool file_part_live(const std::string& part) {
  if (part == "-") return true;
  const size_t colon = part.rfind(':');
  if (colon == std::string::npos) return false;
  std::error_code ec;
  const auto size = std::filesystem::file_size(part.substr(0, colon), ec);
  return !ec && std::to_string(size) == part.substr(colon + 1);
}
}  // namespace

std::string cost_model_key(const Engine& engine) {
  namespace fs = std::filesystem;
  const ModelInfo i = engine.info();
  auto part = [](const std::string& path) {
    if (path.empty()) return std::string("-");
    std::error_code ec;
    const auto size = fs::file_size(path, ec);
    const fs::path abs = fs::absolute(path, ec);
    return abs.string() + ":" + std::to_string(ec ? 0 : size);
  };
  // The engine's version and timing revision: pass times measured by another build of the
  // kernels are not these.
  std::string key = "target=" + part(i.path) + ";draft=" + part(i.draft_path) + ";backend=" + i.backend + ";" + build_tag();
  // A reduced draft vocabulary changes the draft's cost.
  if (i.draft_vocab > 0)
    key += ";draft_vocab=" + std::to_string(i.draft_vocab) + ":" +
           (i.draft_vocab_ranking == "token ids" ? std::string("ids") : part(i.draft_vocab_ranking));
  // So does a re-quantized draft.
  if (!i.draft_type.empty() && i.draft_type != "keep") key += ";draft_type=" + i.draft_type;
  return key;
}


bool cost_model_key_is_live(const std::string& key) {
  const auto target = key_field(key, "target"), draft = key_field(key, "draft"), tag = key_field(key, "tandem");
  if (!target || !draft) return true;  // not ours to judge
  // Our format without the build: written by a tandem from before keys carried it, which
  // this build never looks up.
  if (!tag) return false;
  if ("tandem=" + *tag != build_tag() || !file_part_live(*target) || !file_part_live(*draft)) return false;
  // A draft vocabulary ranked by a counts file ("N:PATH:SIZE"; "N:ids" needs no file).
  if (const auto vocab = key_field(key, "draft_vocab")) {
    const size_t colon = vocab->find(':');
    if (colon == std::string::npos) return false;
    const std::string ranking = vocab->substr(colon + 1);
    if (ranking != "ids" && !file_part_live(ranking)) return false;
  }
  return true;
}

std::string EnginePassTimer::key() const { return cost_model_key(engine_); }

bool EnginePassTimer::key_is_live(const std::string& other) const { return cost_model_key_is_live(other); }

bool EnginePassTimer::has_draft() const { return !engine_.info().draft_path.empty(); }

std::vector<std::vector<double>> EnginePassTimer::time_passes(bool draft, int32_t batch,
                                                              std::span<const int32_t> n_values, int32_t context,
                                                              int32_t reps) {
  return engine_.time_forward_passes(draft, batch, n_values, context, reps);
}

std::shared_ptr<CostModel> calibrate_cost_model(Engine& engine, const CalibrationOptions& opts, bool* from_cache) {
  EnginePassTimer timer(engine);
  return calibrate_cost_model(timer, opts, from_cache);
}

bool calibrate_and_install(Engine& engine, const CalibrationOptions& opts) {
  bool cached = false;
  engine.set_cost_model(calibrate_cost_model(engine, opts, &cached));
  if (!opts.cache_path.empty()) {
    restore_shape_choice(engine, opts.cache_path);
    restore_output_lengths(engine, opts.cache_path);
  }
  return cached;
}

bool restore_shape_choice(const Engine& engine, const std::string& cache_path) {
  const std::shared_ptr<ShapeChoice> shapes = EngineAccess::policy_costs(engine).shapes;
  if (!shapes || cache_path.empty()) return false;
  const auto s = load_cached_shape_choice(cache_path, cost_model_key(engine));
  if (!s) return false;
  shapes->restore(*s);
  return true;
}

void save_shape_choice(const Engine& engine, const std::string& cache_path) {
  const std::shared_ptr<ShapeChoice> shapes = EngineAccess::policy_costs(engine).shapes;
  if (!shapes || cache_path.empty()) return;
  const RateChoice::State s = shapes->state();
  if (s.first_ms <= 0.0 && s.second_ms <= 0.0) return;  // no step was drafted either way
  try {
    save_cached_shape_choice(cache_path, cost_model_key(engine), s, cost_model_key_is_live);
  } catch (const std::exception& e) {
    spdlog::warn("cannot save what token trees against chains learned to {}: {}", cache_path, e.what());
  }
}

bool restore_output_lengths(const Engine& engine, const std::string& cache_path) {
  const std::shared_ptr<OutputLengths> lengths = EngineAccess::policy_costs(engine).lengths;
  if (!lengths || cache_path.empty()) return false;
  const auto r = load_cached_output_lengths(cache_path, cost_model_key(engine));
  if (!r) return false;
  lengths->restore(*r);
  return true;
}

void save_output_lengths(const Engine& engine, const std::string& cache_path) {
  const std::shared_ptr<OutputLengths> lengths = EngineAccess::policy_costs(engine).lengths;
  if (!lengths || cache_path.empty()) return;
  const std::vector<OutputLengths::Record> r = lengths->records();
  if (r.empty()) return;
  try {
    save_cached_output_lengths(cache_path, cost_model_key(engine), r, cost_model_key_is_live);
  } catch (const std::exception& e) {
    spdlog::warn("cannot save the lengths of finished outputs to {}: {}", cache_path, e.what());
  }
}

}  // namespace tandem
