// What ShapeChoice learned (trees against chains, rate_choice.hpp's State), kept in the cost
// models' cache file under the same key (section "shapes", cache_file.hpp): a process that
// loads the same models on the same backend starts where the last one stopped. Without it
// every `tandem generate` would try trees and chains afresh, a few steps of a short request
// each time, where a server learns once.
#pragma once
#include <optional>
#include <string>

#include "policies/cache_file.hpp"
#include "policies/rate_choice.hpp"

namespace tandem {

// The state saved under `key`, or nullopt (no file, no entry, or one that is not a state).
std::optional<RateChoice::State> load_cached_shape_choice(const std::string& path, const std::string& key);
// Saves `s` under `key`, dropping the entries of other keys `keep` refuses; throws
// std::runtime_error when the file cannot be written.
void save_cached_shape_choice(const std::string& path, const std::string& key, const RateChoice::State& s,
                              const CacheKeyFilter& keep = {});

}  // namespace tandem
