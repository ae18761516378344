#include "policies/output_lengths.hpp"

#include <algorithm>
#include <boost/json.hpp>

namespace tandem {
namespace json = boost::json;

void OutputLengths::add(int32_t generated, bool stopped) {
  if (generated < 0) return;
  std::lock_guard<std::mutex> lk(mu_);
  recent_.push_back({generated, stopped});
  while (recent_.size() > kKept) recent_.pop_front();
}

double OutputLengths::expected_left(int32_t generated, int32_t limit) const {
  const int32_t most = limit - generated;
  if (most <= 0) return 0.0;
  double sum = most;  // the limit, counted as one output that runs to it
  int32_t n = 1;
  std::lock_guard<std::mutex> lk(mu_);
  for (const Record& r : recent_) {
    if (r.generated <= generated) continue;  // ended before this point: unlike a sequence still running
    sum += r.stopped ? std::min(r.generated, limit) - generated : most;
    ++n;
  }
  return sum / n;
}

std::vector<OutputLengths::Record> OutputLengths::records() const {
  std::lock_guard<std::mutex> lk(mu_);
  return {recent_.begin(), recent_.end()};
}

void OutputLengths::restore(const std::vector<Record>& r) {
  std::lock_guard<std::mutex> lk(mu_);
  recent_.clear();
  const size_t from = r.size() > kKept ? r.size() - kKept : 0;
  for (size_t i = from; i < r.size(); ++i)
    if (r[i].generated >= 0) recent_.push_back(r[i]);
}

void OutputLengths::reset() {
  std::lock_guard<std::mutex> lk(mu_);
  recent_.clear();
}

std::optional<std::vector<OutputLengths::Record>> load_cached_output_lengths(const std::string& path,
                                                                             const std::string& key) {
  const json::value v = read_cache_file(path);
  const json::value* lengths = v.is_object() ? v.as_object().if_contains("lengths") : nullptr;
  const json::value* e = lengths && lengths->is_object() ? lengths->as_object().if_contains(key) : nullptr;
  if (!e || !e->is_array()) return std::nullopt;
  try {
    std::vector<OutputLengths::Record> out;
    for (const json::value& r : e->as_array()) {
      const json::array& a = r.as_array();
      if (a.size() != 2) return std::nullopt;
      const int64_t n = a[0].to_number<int64_t>();
      if (n < 0 || n > INT32_MAX) return std::nullopt;
      out.push_back({static_cast<int32_t>(n), a[1].as_bool()});
    }
    return out;
  } catch (const std::exception&) {
    return std::nullopt;  // a damaged entry: start afresh
  }
}

void save_cached_output_lengths(const std::string& path, const std::string& key,
                                const std::vector<OutputLengths::Record>& r, const CacheKeyFilter& keep) {
  json::array a;
  for (const OutputLengths::Record& x : r) a.push_back(json::array{x.generated, x.stopped});
  put_cache_entry(path, "lengths", key, std::move(a), keep);
}

}  // namespace tandem
