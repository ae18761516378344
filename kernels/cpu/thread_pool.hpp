// A persistent pool of worker threads for CPU kernels. One `run` call hands the same
// function to every thread (the caller is thread 0) and returns when all are done, so a
// kernel splits its own work by (ith, nth). Workers spin briefly between jobs (a forward
// pass issues hundreds of back-to-back ops) and then sleep, so an idle engine costs no CPU.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace tandem::kernels::cpu {

class ThreadPool {
 public:
  using Job = std::function<void(int ith, int nth)>;

  // n_threads >= 1, includes the caller. pin: each worker thread is bound to one CPU of
  // the process's allowed set (worker i to the i-th allowed CPU; the caller, thread 0, is
  // left alone: it belongs to the embedding program), which keeps a worker's share of the
  // weights in its own core's caches across ops and stops the OS from stacking workers.
  explicit ThreadPool(int n_threads, bool pin = false);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }
  // True when pinning was asked for and every worker could be pinned.
  bool pinned() const { return pin_ && n_threads_ > 1 && pinned_.load() == n_threads_ - 1; }
  // Runs job(ith, n_threads) on every thread; returns when all have finished.
  // Not reentrant: a job must not call run() on the same pool.
  void run(const Job& job);
  // Convenience: splits [0, n) into contiguous chunks, one per thread.
  void parallel_for(int64_t n, const std::function<void(int64_t begin, int64_t end)>& body);

  // Number of threads to use when the user does not say: the cores this process may run on.
  static int default_threads();

 private:
  void worker(int ith);

  int n_threads_;
  std::vector<std::thread> threads_;
  const Job* job_ = nullptr;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  std::atomic<int> sleepers_{0};
  bool pin_ = false;
  std::atomic<int> pinned_{0};  // workers that pinned themselves
};

}  // namespace tandem::kernels::cpu
