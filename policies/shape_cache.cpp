#include "policies/shape_cache.hpp"

#include <boost/json.hpp>

namespace tandem {
namespace json = boost::json;

std::optional<RateChoice::State> load_cached_shape_choice(const std::string& path, const std::string& key) {
  const json::value v = read_cache_file(path);
  const json::value* shapes = v.is_object() ? v.as_object().if_contains("shapes") : nullptr;
  const json::value* e = shapes && shapes->is_object() ? shapes->as_object().if_contains(key) : nullptr;
  if (!e || !e->is_object()) return std::nullopt;
  try {
    const json::object& o = e->as_object();
    const auto num = [&](const char* name) { return o.at(name).to_number<double>(); };
    RateChoice::State s;
    s.first_tokens = num("tree_tokens");
    s.first_ms = num("tree_ms");
    s.first_steps = num("tree_steps");
    s.second_tokens = num("chain_tokens");
    s.second_ms = num("chain_ms");
    s.second_steps = num("chain_steps");
    s.passed = static_cast<int32_t>(o.at("passed").to_number<int64_t>());
    s.retry_after = static_cast<int32_t>(o.at("retry_after").to_number<int64_t>());
    if (const json::value* since = o.if_contains("since_chain"))
      s.since_second = static_cast<int32_t>(since->to_number<int64_t>());
    return s;  // (RateChoice::restore clamps what is out of range)
  } catch (const std::exception&) {
    return std::nullopt;  // a damaged entry: start afresh
  }
}

void save_cached_shape_choice(const std::string& path, const std::string& key, const RateChoice::State& s,
                              const CacheKeyFilter& keep) {
  json::object o;
  o["tree_tokens"] = s.first_tokens;
  o["tree_ms"] = s.first_ms;
  o["tree_steps"] = s.first_steps;
  o["chain_tokens"] = s.second_tokens;
  o["chain_ms"] = s.second_ms;
  o["chain_steps"] = s.second_steps;
  o["passed"] = s.passed;
  o["retry_after"] = s.retry_after;
  o["since_chain"] = s.since_second;
  put_cache_entry(path, "shapes", key, std::move(o), keep);
}

}  // namespace tandem
