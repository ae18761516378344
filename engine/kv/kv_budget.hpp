// One memory budget for the KV caches of both models (target and draft), counted in bytes.
//
// The two caches use different bytes per token (KVCache::bytes_per_token), so a fixed
// split in token slots wastes one side: sequences without a draft leave the draft's half
// idle, and draft-model sequences need both. Instead each cache's BlockAllocator draws from
// this one account: taking a block costs block_size x that model's bytes per token, and
// giving it back returns them. Admission and preemption (engine/runtime/scheduler_step.cpp) therefore
// see one pool, and a draft sequence's blocks reduce what the target can take.
//
// Backing memory. Each cache is reserved at the most it could ever hold on its own
// (budget / its block bytes blocks), so which cache gets the memory is decided per block,
// at run time; only the budget is ever in use at once.
//  - CPU: the reserve is fresh anonymous memory (Backend::alloc_zeroed). It is zero and
//    costs nothing until touched, so construction must not zero-fill it. Pages of blocks
//    that were used and freed stay resident, so a process's resident KV memory is at most
//    the sum of each cache's high-water mark.
//  - GPU (one shared device pool, e.g. CUDA virtual memory management): reserve each
//    cache's address range at its maximum (cuMemAddressReserve) and back it with physical
//    chunks from one pool (cuMemCreate + cuMemMap) as the allocator first hands out blocks
//    inside them; the budget bounds the blocks taken and thus, to within one mapping chunk
//    per K/V layer strip, the physical memory mapped. A block's slots lie in every layer's
//    K and V strip (the layout is layer-major), so a chunk maps a run of block ids in each
//    strip; chunks whose blocks are all free can be unmapped and reused by the other cache.
//    A backend that maps lazily hooks that into BlockAllocator::allocate/release; the
//    accounting here stays as it is.
//
// Not thread-safe: the caches are used by one thread at a time (the engine's model lock).
#pragma once
#include <cstddef>
#include <stdexcept>

namespace tandem {

class KVBudget {
 public:
  explicit KVBudget(size_t total_bytes) : total_(total_bytes) {}
  KVBudget(const KVBudget&) = delete;
  KVBudget& operator=(const KVBudget&) = delete;

  // Takes `bytes`, or nothing (returning false) when fewer are left.
  bool take(size_t bytes) {
    if (bytes > total_ - used_) return false;
    used_ += bytes;
    return true;
  }
  void give(size_t bytes) {
    if (bytes > used_) throw std::logic_error("KVBudget: more bytes given back than taken");
    used_ -= bytes;
  }

  size_t total() const { return total_; }
  size_t used() const { return used_; }
  size_t available() const { return total_ - used_; }

 private:
  size_t total_;
  size_t used_ = 0;
};

}  // namespace tandem
