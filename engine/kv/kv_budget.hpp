// One memory budget for the KV caches of both models (target and draft), counted in bytes.
//
// The two caches use different bytes per token (KVCache::bytes_per_token), so a fixed
// split in token slots wastes one side: sequences without a draft leave the draft's half
// idle, and draft-model sequences need both. Instead each cache's BlockAllocator draws from
// this one account: taking a block costs its bytes (alone: block_size x that model's bytes
// per token; in a KVPool: one column, the same for both), and
// giving it back returns them. Admission and preemption (engine/runtime/scheduler_step.cpp) therefore
// see one pool, and a draft sequence's blocks reduce what the target can take.
//
// Backing memory. The engine's caches live in one KVPool (kv_pool.hpp): one buffer of
// exactly the budget, every block a column of it whichever cache takes it, so the budget
// is also the memory (on a GPU: one piece of the device arena). A cache made on its own
// with a budget (KVCacheOptions::budget) is instead reserved at the most it could hold
// alone; on the CPU that reserve is fresh anonymous memory (Backend::alloc_zeroed), zero
// and free until touched, but a device backend would pay for all of it.
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
