#include "policies/cost_model.hpp"

#include <algorithm>
#include <boost/json.hpp>
#include <cmath>
#include <cstdlib>
#include <ctime>
#include <stdexcept>

#include "policies/cache_file.hpp"

namespace tandem {
namespace json = boost::json;

namespace {

json::array curves_to_json(const std::vector<PassCurve>& cs) {
  json::array a;
  for (const PassCurve& c : cs) {
    json::object o;
    o["batch"] = c.batch;
    o["n"] = json::value_from(c.n);
    o["ms"] = json::value_from(c.ms);
    a.push_back(std::move(o));
  }
  return a;
}

std::vector<PassCurve> curves_from_json(const json::value& v) {
  std::vector<PassCurve> out;
  for (const json::value& e : v.as_array()) {
    const json::object& o = e.as_object();
    PassCurve c;
    c.batch = static_cast<int32_t>(o.at("batch").to_number<int64_t>());
    for (const json::value& x : o.at("n").as_array()) c.n.push_back(static_cast<int32_t>(x.to_number<int64_t>()));
    for (const json::value& x : o.at("ms").as_array()) c.ms.push_back(x.to_number<double>());
    if (c.batch < 1 || c.n.empty() || c.n.size() != c.ms.size() || !std::is_sorted(c.n.begin(), c.n.end()) ||
        c.n.front() < 1)
      throw std::runtime_error("cost model: malformed pass curve");
    for (double ms : c.ms)
      if (!(ms > 0.0) || !std::isfinite(ms)) throw std::runtime_error("cost model: pass time not positive");
    out.push_back(std::move(c));
  }
  return out;
}

}  // namespace

double PassCurve::at(double x) const {
  if (n.empty()) return 0.0;
  if (n.size() == 1 || x <= n.front()) return n.size() == 1 ? ms.front() * std::max(1.0, x / n.front()) : ms.front();
  for (size_t i = 1; i < n.size(); ++i) {
    if (x <= n[i]) {
      const double f = (x - n[i - 1]) / (n[i] - n[i - 1]);
      return ms[i - 1] + f * (ms[i] - ms[i - 1]);
    }
  }
  // Past the last point: continue the last segment, never downhill (noise can make it so).
  const size_t l = n.size() - 1;
  const double slope = std::max(0.0, (ms[l] - ms[l - 1]) / (n[l] - n[l - 1]));
  return ms[l] + slope * (x - n[l]);
}

CostModel::CostModel(std::string key, std::vector<PassCurve> target, std::vector<PassCurve> draft)
    : key_(std::move(key)), target_(std::move(target)), draft_(std::move(draft)) {
  if (!curve(target_, 1)) throw std::invalid_argument("cost model needs a batch-1 target curve");
  if (!draft_.empty() && !curve(draft_, 1)) throw std::invalid_argument("cost model needs a batch-1 draft curve");
}

CostModel CostModel::from_ratios(double c, const std::vector<double>& r) {
  PassCurve t, d;
  for (size_t k = 0; k < r.size(); ++k) {
    t.n.push_back(static_cast<int32_t>(k + 1));
    t.ms.push_back(k == 0 ? 1.0 : r[k]);
  }
  if (t.n.empty()) throw std::invalid_argument("from_ratios: empty r");
  // The draft: c per token, and a catch-up pass that costs like the target's shape.
  for (size_t i = 0; i < t.n.size(); ++i) {
    d.n.push_back(t.n[i]);
    d.ms.push_back(c * t.ms[i]);
  }
  return CostModel("synthetic", {t}, {d});
}

const CostModel& CostModel::assumed_default() {
  static const CostModel m = [] {
    std::vector<double> r;
    for (int k = 0; k <= 32; ++k) r.push_back(1.0 + 0.15 * k);
    CostModel x = from_ratios(0.35, r);
    x.key_ = "assumed-default";
    return x;
  }();
  return m;
}

int32_t CostModel::max_measured_n() const {
  const PassCurve* c = curve(target_, 1);
  return c ? c->n.back() : 0;
}

const PassCurve* CostModel::curve(const std::vector<PassCurve>& cs, int32_t batch) const {
  for (const PassCurve& c : cs)
    if (c.batch == batch) return &c;
  return nullptr;
}

double CostModel::pass_ms(const std::vector<PassCurve>& cs, int32_t n, int32_t batch) const {
  batch = std::max(1, batch);
  if (const PassCurve* c = curve(cs, batch)) return c->at(n);
  const PassCurve* one = curve(cs, 1);
  return one ? one->at(static_cast<double>(batch) * n) : 0.0;  // the token-count model (header)
}

double CostModel::target_ms(int32_t n, int32_t batch) const { return pass_ms(target_, n, batch); }
double CostModel::draft_ms(int32_t n, int32_t batch) const { return pass_ms(draft_, n, batch); }

double CostModel::c(int32_t batch) const {
  const double t = target_ms(1, batch);
  return t > 0 && has_draft() ? draft_ms(1, batch) / t : 0.0;
}

double CostModel::r(int32_t k, int32_t batch) const {
  const double t = target_ms(1, batch);
  return t > 0 ? target_ms(k + 1, batch) / t : 1.0;
}

double CostModel::catch_up(int32_t tokens, int32_t batch) const {
  const double t = target_ms(1, batch);
  return t > 0 && has_draft() && tokens > 0 ? draft_ms(tokens, batch) / t : 0.0;
}

double CostModel::expected_tokens(double alpha, int32_t k) {
  alpha = std::clamp(alpha, 0.0, 1.0);
  if (k <= 0) return 1.0;
  if (alpha >= 1.0 - 1e-12) return k + 1.0;
  return (1.0 - std::pow(alpha, k + 1)) / (1.0 - alpha);
}

double CostModel::predict_speedup(double alpha, int32_t k, int32_t batch, bool draft_free) const {
  if (k <= 0) return 1.0;
  const double cost = (draft_free ? 0.0 : k * c(batch)) + r(k, batch);
  return expected_tokens(alpha, k) / cost;
}

std::string CostModel::to_json() const {
  json::object o;
  o["key"] = key_;
  o["created"] = created;
  o["context"] = context;
  o["reps"] = reps;
  o["warmup"] = warmup;
  o["target"] = curves_to_json(target_);
  o["draft"] = curves_to_json(draft_);
  return json::serialize(o);
}

CostModel CostModel::from_json(const std::string& text) {
  boost::system::error_code ec;
  const json::value v = json::parse(text, ec);
  if (ec) throw std::runtime_error("cost model: not JSON: " + ec.message());
  try {
    const json::object& o = v.as_object();
    CostModel m(json::value_to<std::string>(o.at("key")), curves_from_json(o.at("target")),
                o.contains("draft") ? curves_from_json(o.at("draft")) : std::vector<PassCurve>{});
    if (o.contains("created")) m.created = json::value_to<std::string>(o.at("created"));
    if (o.contains("context")) m.context = static_cast<int32_t>(o.at("context").to_number<int64_t>());
    if (o.contains("reps")) m.reps = static_cast<int32_t>(o.at("reps").to_number<int64_t>());
    if (o.contains("warmup")) m.warmup = static_cast<int32_t>(o.at("warmup").to_number<int64_t>());
    return m;
  } catch (const std::runtime_error&) {
    throw;
  } catch (const std::exception& e) {  // boost's wrong-kind / missing-key errors
    throw std::runtime_error(std::string("cost model: malformed: ") + e.what());
  }
}

std::string default_cost_cache_path() {
  if (const char* d = std::getenv("TANDEM_CACHE"); d && *d) return std::string(d) + "/cost_models.json";
  if (const char* d = std::getenv("XDG_CACHE_HOME"); d && *d) return std::string(d) + "/tandem/cost_models.json";
  const char* home = std::getenv("HOME");
  return std::string(home && *home ? home : ".") + "/.cache/tandem/cost_models.json";
}

std::shared_ptr<CostModel> load_cached_cost_model(const std::string& path, const std::string& key) {
  const json::value v = read_cache_file(path);
  if (!v.is_object()) return nullptr;
  const json::object& o = v.as_object();
  const json::value* models = o.if_contains("models");
  if (!models || !models->is_object()) return nullptr;
  const json::value* e = models->as_object().if_contains(key);
  if (!e) return nullptr;
  try {
    return std::make_shared<CostModel>(CostModel::from_json(json::serialize(*e)));
  } catch (const std::exception&) {
    return nullptr;  // a damaged entry is measured again
  }
}

void save_cached_cost_model(const std::string& path, const CostModel& model, const CostKeyFilter& keep) {
  put_cache_entry(path, "models", model.key(), json::parse(model.to_json()), keep);
}

}  // namespace tandem
