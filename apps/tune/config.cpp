#include "apps/tune/config.hpp"

#include <algorithm>
#include <boost/json.hpp>
#include <cmath>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "engine/model/requantize.hpp"
#include "engine/runtime/engine_calibration.hpp"
#include "policies/factory.hpp"

namespace tandem::cli {
namespace json = boost::json;

namespace {

// A float as the decimal it was typed as (0.7f would print as 0.699999988...).
double tidy(float v) { return std::round(static_cast<double>(v) * 1e6) / 1e6; }

json::object spec_to_json(const SpecSettings& s) {
  json::object o;
  o["draft"] = s.draft;
  o["policy"] = s.policy;
  o["draft_max"] = s.draft_max;
  o["draft_p_min"] = tidy(s.draft_p_min);
  o["alpha_prior"] = tidy(s.alpha_prior);
  o["tree_width"] = s.tree_width;
  return o;
}

SpecSettings spec_from_json(const json::value& v) {
  const json::object& o = v.as_object();
  SpecSettings s;
  if (const auto* x = o.if_contains("draft")) s.draft = json::value_to<std::string>(*x);
  if (const auto* x = o.if_contains("policy")) s.policy = json::value_to<std::string>(*x);
  if (const auto* x = o.if_contains("draft_max")) s.draft_max = static_cast<int32_t>(x->to_number<int64_t>());
  if (const auto* x = o.if_contains("draft_p_min")) s.draft_p_min = x->to_number<float>();
  if (const auto* x = o.if_contains("alpha_prior")) s.alpha_prior = x->to_number<float>();
  if (const auto* x = o.if_contains("tree_width")) s.tree_width = static_cast<int32_t>(x->to_number<int64_t>());
  if (s.tree_width < 1 || s.tree_width > kMaxTreeNodes)
    throw std::runtime_error("tree_width must be in 1.." + std::to_string(kMaxTreeNodes));
  if (s.draft != "model" && s.draft != "ngram" && s.draft != "none")
    throw std::runtime_error("speculative.draft must be model, ngram or none, not '" + s.draft + "'");
  if (!is_policy_name(s.policy)) throw std::runtime_error("unknown speculation policy '" + s.policy + "'");
  if (s.draft_max < 0 || s.draft_max > 64) throw std::runtime_error("draft_max out of range");
  if (!(s.draft_p_min >= 0.0f && s.draft_p_min <= 1.0f)) throw std::runtime_error("draft_p_min must be in [0, 1]");
  if (!(s.alpha_prior >= 0.0f && s.alpha_prior <= 1.0f)) throw std::runtime_error("alpha_prior must be in [0, 1]");
  return s;
}

}  // namespace

const SpecSettings& TandemConfig::for_temperature(float t) const {
  const PerTemp* best = nullptr;
  for (const PerTemp& p : per_temperature)
    if (!best || std::fabs(p.temp - t) < std::fabs(best->temp - t)) best = &p;
  return best ? best->spec : defaults;
}

TandemConfig config_from_report(const TuneReport& report, const std::string& draft_mode) {
  TandemConfig c;
  c.target = report.target;
  c.draft = report.draft;
  c.backend = report.backend;
  c.draft_vocab = report.draft_vocab;
  c.draft_vocab_counts = report.draft_vocab_counts;
  c.draft_type = report.draft_type;
  for (const Recommendation& r : report.recommendations) {
    TandemConfig::PerTemp p;
    p.temp = r.temp;
    p.measured_speedup = r.speedup;
    if (r.policy == "none") {
      p.spec.draft = "none";
      p.spec.policy = "fixed";
      p.spec.draft_max = 0;
    } else {
      p.spec.draft = draft_mode;
      p.spec.policy = r.policy;
      p.spec.draft_max = r.k;
      p.spec.tree_width = r.tree_width;
      // The measured α seeds the adaptive policies' estimate on the next run.
      if (policy_uses_cost_model(r.policy)) p.spec.alpha_prior = static_cast<float>(r.alpha);
    }
    c.per_temperature.push_back(p);
  }
  if (!c.per_temperature.empty()) c.defaults = c.per_temperature.front().spec;
  if (report.costs) c.cost_model = std::make_shared<CostModel>(*report.costs);
  return c;
}

std::string config_to_json(const TandemConfig& c) {
  json::object o;
  o["format"] = "tandem-config";
  o["version"] = 1;
  o["target"] = c.target;
  o["draft"] = c.draft;
  o["backend"] = c.backend;
  o["draft_vocab"] = c.draft_vocab;
  o["draft_vocab_counts"] = c.draft_vocab_counts;
  o["draft_type"] = c.draft_type;
  o["speculative"] = spec_to_json(c.defaults);
  json::array per;
  for (const auto& p : c.per_temperature) {
    json::object e;
    e["temp"] = tidy(p.temp);
    e["speculative"] = spec_to_json(p.spec);
    e["measured_speedup"] = p.measured_speedup;
    per.push_back(std::move(e));
  }
  o["per_temperature"] = std::move(per);
  if (c.cost_model) o["cost_model"] = json::parse(c.cost_model->to_json());
  return json::serialize(o);
}

TandemConfig config_from_json(const std::string& text) {
  boost::system::error_code ec;
  const json::value v = json::parse(text, ec);
  if (ec) throw std::runtime_error("not JSON: " + ec.message());
  try {
    const json::object& o = v.as_object();
    const json::value* fmt = o.if_contains("format");
    if (!fmt || !fmt->is_string() || fmt->as_string() != "tandem-config")
      throw std::runtime_error("not a tandem config (\"format\": \"tandem-config\" missing)");
    TandemConfig c;
    if (const auto* x = o.if_contains("target")) c.target = json::value_to<std::string>(*x);
    if (const auto* x = o.if_contains("draft")) c.draft = json::value_to<std::string>(*x);
    if (const auto* x = o.if_contains("backend")) c.backend = json::value_to<std::string>(*x);
    if (const auto* x = o.if_contains("draft_vocab")) {
      const int64_t n = x->to_number<int64_t>();
      if (n < 0 || n > (int64_t{1} << 24)) throw std::runtime_error("draft_vocab out of range");
      c.draft_vocab = static_cast<int32_t>(n);
    }
    if (const auto* x = o.if_contains("draft_vocab_counts")) c.draft_vocab_counts = json::value_to<std::string>(*x);
    if (const auto* x = o.if_contains("draft_type")) {
      try {
        c.draft_type = weight_options_name(parse_weight_options(json::value_to<std::string>(*x)));
      } catch (const std::invalid_argument& e) {
        throw std::runtime_error(e.what());
      }
    }
    if (const auto* x = o.if_contains("speculative")) c.defaults = spec_from_json(*x);
    if (const auto* x = o.if_contains("per_temperature")) {
      for (const json::value& e : x->as_array()) {
        TandemConfig::PerTemp p;
        p.temp = e.at("temp").to_number<float>();
        p.spec = spec_from_json(e.at("speculative"));
        if (const auto* s = e.as_object().if_contains("measured_speedup")) p.measured_speedup = s->to_number<double>();
        c.per_temperature.push_back(p);
      }
    }
    if (const auto* x = o.if_contains("cost_model"))
      c.cost_model = std::make_shared<CostModel>(CostModel::from_json(json::serialize(*x)));
    return c;
  } catch (const std::runtime_error&) {
    throw;
  } catch (const std::exception& e) {  // boost: wrong kinds, missing keys
    throw std::runtime_error(std::string("malformed config: ") + e.what());
  }
}

TandemConfig load_config(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open config " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  try {
    return config_from_json(ss.str());
  } catch (const std::exception& e) {
    throw std::runtime_error(path + ": " + e.what());
  }
}

void save_config(const std::string& path, const TandemConfig& c) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw std::runtime_error("cannot write " + path);
  out << config_to_json(c) << '\n';
  if (!out) throw std::runtime_error("cannot write " + path);
}

void apply_config(const TandemConfig& c, float temp, const ExplicitFlags& given, std::string& draft_mode,
                  SpeculativeOptions& so) {
  const SpecSettings& s = c.for_temperature(temp);
  if (!given.draft) draft_mode = s.draft;
  if (!given.draft_max) so.draft_max = s.draft_max;
  if (!given.draft_p_min) so.draft_p_min = s.draft_p_min;
  if (!given.policy) so.policy = s.policy;
  if (!given.tree_width) so.tree_width = s.tree_width;
  so.alpha_prior = s.alpha_prior;
}

void apply_config_load(const TandemConfig& c, const ExplicitFlags& given, LoadOptions& load) {
  if (load.draft_model_path.empty()) return;
  if (!given.draft_type) load.draft_type = c.draft_type;  // "keep" too: the default is "auto"
  if (given.draft_vocab || c.draft_vocab == 0) return;
  load.draft_vocab = c.draft_vocab;
  if (load.draft_vocab_counts.empty()) load.draft_vocab_counts = c.draft_vocab_counts;
}

std::string ensure_cost_model(Engine& engine, const SpeculativeOptions& so, const TandemConfig* config,
                              int32_t batch_tokens) {
  if (so.mode == DraftMode::None || !policy_uses_cost_model(so.policy)) return "";
  if (engine.cost_model()) return "cost model: already set";
  const std::string key = cost_model_key(engine);
  CalibrationOptions co;
  co.k_max = std::max(1, so.draft_max);
  for (int32_t n : batch_token_points(batch_tokens)) {
    co.extra_n.push_back(n);
    co.cover_n = std::max(co.cover_n, n);
  }
  const int32_t widest = std::max(co.k_max + 1, co.cover_n);
  if (config && config->cost_model && config->cost_model->key() == key &&
      config->cost_model->max_measured_n() >= widest) {
    engine.set_cost_model(config->cost_model);
    restore_shape_choice(engine, default_cost_cache_path());
    restore_output_lengths(engine, default_cost_cache_path());
    return "cost model: from the config file";
  }
  co.cache_path = default_cost_cache_path();
  const bool cached = calibrate_and_install(engine, co);
  return cached ? "cost model: cached in " + co.cache_path : "cost model: measured now, cached in " + co.cache_path;
}

}  // namespace tandem::cli
