#include "kernels/cpu/thread_pool.hpp"

#include <pthread.h>
#include <sched.h>

#include <algorithm>

namespace tandem::kernels::cpu {
namespace {
// Spin this many polls before sleeping: long enough to bridge the gap between two ops of
// one forward pass, short enough that an idle engine goes quiet within about a millisecond.
constexpr int kSpinPolls = 20000;
constexpr int kSpinBeforeYield = 2000;

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}
}  // namespace

ThreadPool::ThreadPool(int n_threads, bool pin) : n_threads_(std::max(1, n_threads)), pin_(pin) {
  threads_.reserve(static_cast<size_t>(n_threads_ - 1));
  std::vector<int> cpus;
  if (pin) {
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof(set), &set) == 0)
      for (int c = 0; c < CPU_SETSIZE; ++c)
        if (CPU_ISSET(c, &set)) cpus.push_back(c);
  }
  for (int i = 1; i < n_threads_; ++i) {
    threads_.emplace_back([this, i] { worker(i); });
    if (!cpus.empty()) {
      cpu_set_t one;
      CPU_ZERO(&one);
      CPU_SET(cpus[static_cast<size_t>(i) % cpus.size()], &one);
      if (pthread_setaffinity_np(threads_.back().native_handle(), sizeof(one), &one) == 0) pinned_.fetch_add(1);
    }
  }
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_.store(true);
    generation_.fetch_add(1);
  }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
}

int ThreadPool::default_threads() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

void ThreadPool::run(const Job& job) {
  if (n_threads_ == 1) {
    job(0, 1);
    return;
  }
  job_ = &job;
  pending_.store(n_threads_ - 1, std::memory_order_relaxed);
  {
    // Publishing under the lock pairs with the sleepers' predicate check, so a worker
    // that is about to sleep cannot miss this generation.
    std::lock_guard<std::mutex> lk(mu_);
    generation_.fetch_add(1, std::memory_order_release);
  }
  if (sleepers_.load(std::memory_order_acquire) > 0) cv_.notify_all();
  job(0, n_threads_);
  // Wait for the workers. When the machine is oversubscribed a worker may be descheduled;
  // yielding after a short spin lets it run instead of burning the caller's time slice.
  for (int spin = 0; pending_.load(std::memory_order_acquire) != 0; ++spin) {
    if (spin < kSpinBeforeYield) {
      cpu_relax();
    } else {
      std::this_thread::yield();
    }
  }
  job_ = nullptr;
}

void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& body) {
  run([&](int ith, int nth) {
    const int64_t chunk = (n + nth - 1) / nth;
    const int64_t b = std::min<int64_t>(n, chunk * ith);
    const int64_t e = std::min<int64_t>(n, b + chunk);
    if (b < e) body(b, e);
  });
}

void ThreadPool::worker(int ith) {
  uint64_t seen = 0;
  for (;;) {
    uint64_t g = generation_.load(std::memory_order_acquire);
    for (int spin = 0; g == seen && spin < kSpinPolls; ++spin) {
      cpu_relax();
      g = generation_.load(std::memory_order_acquire);
    }
    if (g == seen) {
      std::unique_lock<std::mutex> lk(mu_);
      sleepers_.fetch_add(1);
      cv_.wait(lk, [&] { return generation_.load(std::memory_order_acquire) != seen; });
      sleepers_.fetch_sub(1);
      g = generation_.load(std::memory_order_acquire);
    }
    seen = g;
    if (stop_.load()) return;
    (*job_)(ith, n_threads_);
    pending_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

}  // namespace tandem::kernels::cpu
