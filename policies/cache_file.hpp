// The cache file the policies keep what they measured in (cost_models.json: the cost models,
// cost_model.hpp; what ShapeChoice learned, shape_cache.hpp): one JSON object, sections keyed
// by the cost model's key, rewritten whole and renamed into place so that a concurrent
// reader never sees half a file. Every writer reads the file first and keeps the sections it
// does not own.
#pragma once
#include <boost/json/value.hpp>
#include <functional>
#include <string>

namespace tandem {

// The file's JSON, or null when it is missing or not JSON (a damaged cache is rebuilt).
boost::json::value read_cache_file(const std::string& path);

// Sets section[key] = entry in the file (creating it and its folder), dropping the section's
// other keys that `keep` refuses (entries of models that are gone); throws std::runtime_error
// when the file cannot be written.
using CacheKeyFilter = std::function<bool(const std::string& key)>;
void put_cache_entry(const std::string& path, const std::string& section, const std::string& key,
                     boost::json::value entry, const CacheKeyFilter& keep = {});

}  // namespace tandem
