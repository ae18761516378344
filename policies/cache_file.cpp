#include "policies/cache_file.hpp"

#include <boost/json.hpp>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <unistd.h>
#include <vector>

namespace tandem {
namespace fs = std::filesystem;
namespace json = boost::json;

json::value read_cache_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return nullptr;
  std::stringstream ss;
  ss << in.rdbuf();
  boost::system::error_code ec;
  json::value v = json::parse(ss.str(), ec);
  return ec ? json::value(nullptr) : v;
}

void put_cache_entry(const std::string& path, const std::string& section, const std::string& key, json::value entry,
                     const CacheKeyFilter& keep) {
  json::value v = read_cache_file(path);
  if (!v.is_object()) v = json::object{{"format", "tandem-cost-models"}, {"version", 1}};
  json::object& o = v.as_object();
  if (!o.contains(section) || !o[section].is_object()) o[section] = json::object{};
  json::object& entries = o[section].as_object();
  if (keep) {
    std::vector<std::string> stale;
    for (const auto& e : entries)
      if (e.key() != key && !keep(std::string(e.key()))) stale.emplace_back(e.key());
    for (const std::string& k : stale) entries.erase(k);
  }
  entries[key] = std::move(entry);
  const fs::path p(path);
  if (p.has_parent_path()) fs::create_directories(p.parent_path());
  const std::string tmp = path + ".tmp" + std::to_string(static_cast<long>(getpid()));
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw std::runtime_error("cannot write " + tmp);
    out << json::serialize(v) << '\n';
    if (!out) throw std::runtime_error("cannot write " + tmp);
  }
  fs::rename(tmp, p);
}

}  // namespace tandem
