// The device memory arena: one region taken from the device once (cudaMalloc at backend
// construction) from which every Buffer comes. Host-only bookkeeping: first-fit over a
// free list kept sorted by offset, neighbours coalesced on free, 256-byte granules.
// Out of memory is an ArenaOutOfMemory naming the request and the arena size that would
// have fitted it.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>

namespace tandem::kernels::cuda_arena {

class ArenaOutOfMemory : public std::runtime_error {
 public:
  ArenaOutOfMemory(const std::string& msg, size_t request, size_t would_fit)
      : std::runtime_error(msg), request_(request), would_fit_(would_fit) {}
  size_t request() const { return request_; }
  size_t would_fit() const { return would_fit_; }  // an arena of this many bytes would have fitted it

 private:
  size_t request_, would_fit_;
};

class Arena {
 public:
  static constexpr size_t kAlign = 256;
  explicit Arena(size_t capacity);

  struct Allocation {
    size_t offset = 0;
    size_t size = 0;   // rounded up to kAlign
    bool fresh = false;  // lies wholly in memory never handed out before (still as reserved)
  };
  // `what` names the request in the error message ("weights", "KV cache", ...).
  Allocation allocate(size_t bytes, const char* what = "a buffer");
  void free(size_t offset);

  size_t capacity() const { return capacity_; }
  size_t used() const { return used_; }
  size_t peak() const { return peak_; }
  size_t largest_free() const;
  size_t n_allocations() const { return live_.size(); }
  static std::string human(size_t bytes);  // "1.50 GiB"

 private:
  size_t capacity_;
  size_t used_ = 0, peak_ = 0;
  size_t high_water_ = 0;             // end of the highest byte ever allocated
  std::map<size_t, size_t> free_;     // offset -> size
  std::map<size_t, size_t> live_;     // offset -> size
};

}  // namespace tandem::kernels::cuda_arena
