#include "kernels/cuda/arena.hpp"

#include <algorithm>
#include <cstdio>

namespace tandem::kernels::cuda_arena {

Arena::Arena(size_t capacity) : capacity_(capacity / kAlign * kAlign) {
  if (capacity_ > 0) free_[0] = capacity_;
}

std::string Arena::human(size_t bytes) {
  char buf[64];
  const double b = static_cast<double>(bytes);
  if (bytes >= (size_t{1} << 30)) std::snprintf(buf, sizeof buf, "%.2f GiB", b / (1u << 30));
  else if (bytes >= (size_t{1} << 20)) std::snprintf(buf, sizeof buf, "%.2f MiB", b / (1u << 20));
  else if (bytes >= 1024) std::snprintf(buf, sizeof buf, "%.2f KiB", b / 1024);
  else std::snprintf(buf, sizeof buf, "%zu B", bytes);
  return buf;
}

size_t Arena::largest_free() const {
  size_t m = 0;
  for (const auto& [off, sz] : free_) m = std::max(m, sz);
  return m;
}

Arena::Allocation Arena::allocate(size_t bytes, const char* what) {
  const size_t need = std::max<size_t>(kAlign, (bytes + kAlign - 1) / kAlign * kAlign);
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->second < need) continue;
    const size_t off = it->first, rest = it->second - need;
    free_.erase(it);
    if (rest > 0) free_[off + need] = rest;
    live_[off] = need;
    used_ += need;
    peak_ = std::max(peak_, used_);
    Allocation a{off, need, off >= high_water_};
    high_water_ = std::max(high_water_, off + need);
    return a;
  }
  // Would fit in an arena grown by what the largest hole lacks (the holes stay where they are).
  const size_t would_fit = capacity_ + (need - std::min(need, largest_free()));
  throw ArenaOutOfMemory("cuda: out of device memory: " + std::string(what) + " of " + human(bytes) +
                             " does not fit in the arena (" + human(capacity_) + ", " + human(used_) +
                             " used in " + std::to_string(live_.size()) + " buffers, largest free block " +
                             human(largest_free()) + "); an arena of at least " + human(would_fit) +
                             " (--gpu-mem " + std::to_string((would_fit + (1u << 20) - 1) >> 20) + "M) would fit it",
                         bytes, would_fit);
}

void Arena::free(size_t offset) {
  auto it = live_.find(offset);
  if (it == live_.end()) throw std::logic_error("cuda arena: free of an offset that was not allocated");
  size_t off = it->first, sz = it->second;
  used_ -= sz;
  live_.erase(it);
  auto next = free_.lower_bound(off);
  if (next != free_.end() && off + sz == next->first) {
    sz += next->second;
    next = free_.erase(next);
  }
  if (next != free_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == off) {
      prev->second += sz;
      return;
    }
  }
  free_[off] = sz;
}

}  // namespace tandem::kernels::cuda_arena
