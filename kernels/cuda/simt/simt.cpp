// The SIMT emulator's scheduler (see simt.hpp): blocks of a grid on one or a few OS
// threads, a block's threads as fibers switched at barriers. On x86-64 the switch is a few
// instructions of our own (callee-saved registers, MXCSR and the x87 control word: what
// the System V ABI says survives a call); elsewhere, or with TANDEM_SIMT_UCONTEXT defined,
// ucontext (swapcontext also saves the signal mask: a system call per switch, ~10x slower).
#include "kernels/cuda/simt/simt.hpp"

#include <ucontext.h>

#if defined(__x86_64__) && !defined(TANDEM_SIMT_UCONTEXT)
#define TANDEM_SIMT_ASM_SWITCH 1
// tandem_simt_switch(save, to): pushes the callee-saved state on the current stack, stores
// the stack pointer in *save, loads `to` and pops the state saved there.
extern "C" void tandem_simt_switch(void** save, void* to);
asm(R"(
  .text
  .globl tandem_simt_switch
  .type tandem_simt_switch, @function
tandem_simt_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $16, %rsp
  stmxcsr 8(%rsp)
  fnstcw 12(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr 8(%rsp)
  fldcw 12(%rsp)
  addq $16, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size tandem_simt_switch, .-tandem_simt_switch
  .section .note.GNU-stack,"",@progbits
  .text
)");
#endif

#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

// AddressSanitizer must be told about stack switches, or it reports the fibers' frames as
// overflows of the scheduler's stack (and its fake stacks get mixed up).
#if defined(__SANITIZE_ADDRESS__)
#define TANDEM_SIMT_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TANDEM_SIMT_ASAN 1
#endif
#endif
#ifdef TANDEM_SIMT_ASAN
extern "C" {
void __sanitizer_start_switch_fiber(void** fake_stack_save, const void* bottom, size_t size);
void __sanitizer_finish_switch_fiber(void* fake_stack_save, const void** bottom_old, size_t* size_old);
void __asan_unpoison_memory_region(void const volatile* addr, size_t size);
}
#endif

// ThreadSanitizer as CUDA's race checker. Each of a block's threads is a TSan fiber, and a
// switch between them orders nothing (the cooperative schedule is an accident of the
// emulator): what orders memory between threads is only what orders it on a GPU, told to
// TSan as acquire/release on sync objects: the block's start (the launch before it) and
// end, __syncthreads and __syncwarp. A shuffle, vote or matrix fragment exchange moves
// registers only. So a shared-memory read that needs a missing barrier is reported
// whichever thread happened to run first. Blocks on different OS threads
// (TANDEM_SIMT_WORKERS >= 2) are unordered until the launch ends, so two blocks touching one
// word, one of them writing, are reported too. Blocks on one OS thread are ordered: they
// reuse its shared arrays. This file is compiled without TSan's instrumentation in that
// build (kernels/cuda/CMakeLists.txt, which defines TANDEM_SIMT_TSAN): the scheduler's
// bookkeeping, touched by every fiber, is not kernel memory.
#ifndef TANDEM_SIMT_TSAN
#if defined(__SANITIZE_THREAD__)
#define TANDEM_SIMT_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define TANDEM_SIMT_TSAN 1
#endif
#endif
#endif
#ifdef TANDEM_SIMT_TSAN
extern "C" {
void* __tsan_get_current_fiber(void);
void* __tsan_create_fiber(unsigned flags);
void __tsan_destroy_fiber(void* fiber);
void __tsan_switch_to_fiber(void* fiber, unsigned flags);
void __tsan_acquire(void* addr);
void __tsan_release(void* addr);
}
#endif

namespace tandem::simt::detail {

namespace {

#ifdef TANDEM_SIMT_TSAN
constexpr unsigned kTsanNoSync = 1;  // __tsan_switch_to_fiber_no_sync
void tsan_acquire(void* sync) { __tsan_acquire(sync); }
void tsan_release(void* sync) { __tsan_release(sync); }
void tsan_switch(void* fiber) { __tsan_switch_to_fiber(fiber, kTsanNoSync); }
// One TSan fiber for the life of a fiber's stack.
struct TsanFiber {
  void* handle = nullptr;
  TsanFiber() = default;
  TsanFiber(TsanFiber&& o) noexcept : handle(std::exchange(o.handle, nullptr)) {}
  TsanFiber& operator=(TsanFiber&& o) noexcept {
    std::swap(handle, o.handle);
    return *this;
  }
  ~TsanFiber() {
    if (handle) __tsan_destroy_fiber(handle);
  }
};
#else
void tsan_acquire(void*) {}
void tsan_release(void*) {}
#endif

thread_local ThreadCtx* t_thread = nullptr;
thread_local uint3 t_block_idx;
thread_local dim3 t_block_dim;
thread_local dim3 t_grid_dim;


constexpr size_t kStackBytes = 64 * 1024;
constexpr unsigned kMaxThreads = 1024;

enum class State { Runnable, AtBlockBarrier, AtWarpBarrier, Done };

struct Fiber {
  ThreadCtx ctx;
#ifdef TANDEM_SIMT_ASM_SWITCH
  void* sp = nullptr;  // saved stack pointer while switched out
#else
  ucontext_t uc;
#endif
  State state = State::Runnable;
  std::unique_ptr<char[]> stack;
  void* asan_fake = nullptr;  // the fiber's fake stack while it is switched out (ASan)
#ifdef TANDEM_SIMT_TSAN
  TsanFiber tsan;
#endif
};

// A whole warp's exchanges use two sets of slots, by the parity of the barrier they meet at:
// a lane reads set p after barrier p is released and before it arrives at p + 1, and set p is
// written again only at barrier p + 2, which no lane reaches before every lane has passed
// p + 1. So one barrier an exchange is enough. An exchange over part of a warp waits a second
// time (the other lanes may meet barriers of their own in between, and the parity would not
// say which set is whose).
struct Warp {
  uint64_t slots[2][32] = {};
  uint32_t frags[2][32][kMaxGatherWords] = {};  // warp_share's exchange (mma fragments)
  unsigned took_part[2] = {};  // the lanes released together from a barrier, by parity (a
                               // lane may exit before the others read its slot)
  unsigned live = 0;     // lanes not exited
  unsigned arrived = 0;  // lanes waiting at the current warp barrier
  unsigned mask = 0;     // the mask they wait on
  unsigned phase = 0;    // warp barriers released so far
  char sync[2] = {};     // TSan sync objects of __syncwarp, by the phase's parity
};

// Everything one OS thread needs to run blocks; reused across blocks and launches.
struct Runner {
  std::vector<Fiber> fibers;
  std::vector<Warp> warps;
  std::vector<unsigned char> shared;  // dynamic shared memory of the block
  std::vector<unsigned> order;        // the order fibers are resumed in
#ifdef TANDEM_SIMT_ASM_SWITCH
  void* sched_sp = nullptr;
#else
  ucontext_t sched;
#endif
  const void* sched_stack = nullptr;  // the scheduler's stack (ASan annotations)
  bool from_scheduler = false;        // the running fiber was resumed by the scheduler
#ifdef TANDEM_SIMT_TSAN
  void* sched_tsan = nullptr;  // the scheduler's TSan fiber (the launching thread's)
#endif
  size_t sched_stack_size = 0;
  unsigned n_threads = 0, live = 0, at_barrier = 0;
  unsigned block_phase = 0;  // __syncthreads barriers released in this block
  // TSan sync objects (only their addresses matter): the block's start and end, and
  // __syncthreads by the phase's parity (a thread released from barrier p acquires before
  // it can arrive at p + 1, and no thread releases for p + 2 before every live one has).
  char sync_start = 0, sync_end = 0, sync_barrier[2] = {};
  unsigned pos = 0;  // where the running fiber is in `order` (this round)
  Fiber* current = nullptr;
  const std::function<void()>* body = nullptr;
  std::exception_ptr error;
};
thread_local Runner* t_runner = nullptr;

Runner& runner() {
  if (!t_runner) throw std::logic_error("simt: a device function was called outside a kernel launch");
  return *t_runner;
}

// A fiber resumed (in park, or at its start): ASan learns that its stack is the one in use
// again; the stack it came from is the scheduler's when the scheduler resumed it (the
// bounds the switches back to the scheduler name).
void resumed(Runner& r, void* fake) {
#ifdef TANDEM_SIMT_ASAN
  const void* from = nullptr;
  size_t from_size = 0;
  __sanitizer_finish_switch_fiber(fake, &from, &from_size);
  if (r.from_scheduler) r.sched_stack = from, r.sched_stack_size = from_size;
#else
  (void)r, (void)fake;
#endif
}

// Fiber -> the next fiber of the round, or the scheduler, and back. The scheduler's loop
// (run_block) resumes the runnable fibers in the round's order; a parking fiber resumes the
// next of them itself, which is what the scheduler would do, in one switch instead of two
// (the switches are most of the emulator's time in warp-synchronous kernels). The switches
// are told to the sanitizers either way (ASan: the stack switched to; TSan: the fiber).
void park(Runner& r, Fiber& f, State s) {
  f.state = s;
#ifdef TANDEM_SIMT_ASM_SWITCH
  if (!r.error)
    for (unsigned oi = r.pos + 1; oi < r.n_threads; ++oi) {
      Fiber& next = r.fibers[r.order[oi]];
      if (next.state != State::Runnable) continue;
      r.pos = oi;
      r.current = &next;
      t_thread = &next.ctx;
      r.from_scheduler = false;
#ifdef TANDEM_SIMT_ASAN
      __sanitizer_start_switch_fiber(&f.asan_fake, next.stack.get(), kStackBytes);
#endif
#ifdef TANDEM_SIMT_TSAN
      tsan_switch(next.tsan.handle);
#endif
      tandem_simt_switch(&f.sp, next.sp);
      resumed(r, f.asan_fake);
      return;  // resumed: by the scheduler or another fiber, which made this one current
    }
  r.pos = r.n_threads;  // the round is over: the scheduler starts the next
#endif
#ifdef TANDEM_SIMT_ASAN
  __sanitizer_start_switch_fiber(&f.asan_fake, r.sched_stack, r.sched_stack_size);
#endif
#ifdef TANDEM_SIMT_TSAN
  tsan_switch(r.sched_tsan);
#endif
#ifdef TANDEM_SIMT_ASM_SWITCH
  tandem_simt_switch(&f.sp, r.sched_sp);
#else
  swapcontext(&f.uc, &r.sched);
#endif
  resumed(r, f.asan_fake);
}

void release_block(Runner& r) {
  r.at_barrier = 0;
  ++r.block_phase;
  for (unsigned i = 0; i < r.n_threads; ++i)
    if (r.fibers[i].state == State::AtBlockBarrier) r.fibers[i].state = State::Runnable;
}

// Releases a warp barrier once every live lane of the mask is there.
bool try_release_warp(Runner& r, unsigned w) {
  Warp& wp = r.warps[w];
  const unsigned need = wp.mask & wp.live;
  if ((wp.arrived & need) != need || wp.arrived == 0) return false;
  for (unsigned l = 0; l < 32; ++l) {
    const unsigned i = w * 32 + l;
    if (i < r.n_threads && (wp.arrived >> l & 1u) && r.fibers[i].state == State::AtWarpBarrier)
      r.fibers[i].state = State::Runnable;
  }
  wp.took_part[wp.phase & 1] = need;
  wp.arrived = 0;
  ++wp.phase;
  return true;
}

// `orders_memory`: __syncwarp (the lanes' memory accesses before it happen before theirs
// after it); a shuffle, vote or fragment exchange only moves values.
void warp_barrier(unsigned mask, bool orders_memory) {
  Runner& r = runner();
  Fiber& f = *r.current;
  const unsigned w = f.ctx.linear / 32, l = f.ctx.linear % 32;
  Warp& wp = r.warps[w];
  if (!(mask >> l & 1u)) throw std::logic_error("simt: a lane used a warp mask that does not include itself");
  char* sync = &wp.sync[wp.phase & 1];
  if (orders_memory) tsan_release(sync);
  wp.arrived |= 1u << l;
  wp.mask = mask;
  f.state = State::AtWarpBarrier;
  if (try_release_warp(r, w))
    f.state = State::Runnable;
  else
    park(r, f, State::AtWarpBarrier);
  if (orders_memory) tsan_acquire(sync);
}

// A fiber never returns from this frame (its last switch leaves it): were it instrumented,
// each run would leave one frame on the TSan fiber's shadow stack, which overflows after
// some 65,000 blocks (this file is not; the attribute keeps it so should that change).
#ifdef TANDEM_SIMT_TSAN
__attribute__((no_sanitize("thread")))
#endif
void fiber_entry() {
  Runner& r = *t_runner;
  Fiber& f = *r.current;
  resumed(r, nullptr);
  tsan_acquire(&r.sync_start);
  try {
    (*r.body)();
  } catch (...) {
    if (!r.error) r.error = std::current_exception();
  }
  // What this thread did happens before the barrier the others reach next (an exited
  // thread counts as arrived) and before the block's end.
  tsan_release(&r.sync_barrier[r.block_phase & 1]);
  tsan_release(&r.sync_end);
  f.state = State::Done;
  --r.live;
  Warp& wp = r.warps[f.ctx.linear / 32];
  wp.live &= ~(1u << (f.ctx.linear % 32));
  wp.arrived &= ~(1u << (f.ctx.linear % 32));
  // An exited thread counts as arrived at the barriers the others wait on.
  if (r.at_barrier > 0 && r.at_barrier == r.live) release_block(r);
  try_release_warp(r, f.ctx.linear / 32);
#ifdef TANDEM_SIMT_ASAN
  __sanitizer_start_switch_fiber(nullptr, r.sched_stack, r.sched_stack_size);  // this fiber ends
#endif
#ifdef TANDEM_SIMT_TSAN
  tsan_switch(r.sched_tsan);
#endif
#ifdef TANDEM_SIMT_ASM_SWITCH
  tandem_simt_switch(&f.sp, r.sched_sp);  // never resumed
  __builtin_unreachable();
#endif
  // Returning resumes uc_link (the scheduler).
}

#ifdef TANDEM_SIMT_ASM_SWITCH
// A fresh fiber's stack: the frame tandem_simt_switch pops (zero registers, this thread's
// MXCSR and x87 control word), returning into fiber_entry as if it had been called.
void prepare_stack(Fiber& f) {
#ifdef TANDEM_SIMT_ASAN
  // Frames of the stack's previous fiber (one abandoned by a failed launch, too) leave
  // their redzones poisoned.
  __asan_unpoison_memory_region(f.stack.get(), kStackBytes);
#endif
  auto top = reinterpret_cast<uintptr_t>(f.stack.get() + kStackBytes) & ~uintptr_t{15};
  auto* p = reinterpret_cast<uint64_t*>(top);
  *--p = 0;                                              // fiber_entry's "return address"
  *--p = reinterpret_cast<uint64_t>(&fiber_entry);       // where the switch returns to
  for (int i = 0; i < 6; ++i) *--p = 0;                  // rbp rbx r12 r13 r14 r15
  p -= 2;                                                // mxcsr at +8, x87 cw at +12
  uint32_t mxcsr;
  uint16_t fpcw;
  asm volatile("stmxcsr %0" : "=m"(mxcsr));
  asm volatile("fnstcw %0" : "=m"(fpcw));
  std::memcpy(reinterpret_cast<char*>(p) + 8, &mxcsr, 4);
  std::memcpy(reinterpret_cast<char*>(p) + 12, &fpcw, 2);
  f.sp = p;
}
#endif

void run_block(Runner& r, const LaunchConfig& cfg, uint3 bidx) {
  t_block_idx = bidx;
  t_block_dim = cfg.block;
  t_grid_dim = cfg.grid;
  const unsigned n = cfg.block.x * cfg.block.y * cfg.block.z;
  r.n_threads = n;
  r.live = n;
  r.at_barrier = 0;
  if (r.fibers.size() < n) r.fibers.resize(n);
  r.warps.assign((n + 31) / 32, Warp{});
  for (unsigned w = 0; w < r.warps.size(); ++w) {
    const unsigned lanes = std::min(32u, n - 32 * w);
    r.warps[w].live = lanes == 32 ? 0xffffffffu : (1u << lanes) - 1;
  }
  for (unsigned i = 0; i < n; ++i) {
    Fiber& f = r.fibers[i];
    f.ctx.linear = i;
    f.ctx.thread_idx = {i % cfg.block.x, (i / cfg.block.x) % cfg.block.y, i / (cfg.block.x * cfg.block.y)};
    f.state = State::Runnable;
    if (!f.stack) f.stack.reset(new char[kStackBytes]);
#ifdef TANDEM_SIMT_TSAN
    if (!f.tsan.handle) f.tsan.handle = __tsan_create_fiber(0);
#endif
#ifdef TANDEM_SIMT_ASM_SWITCH
    prepare_stack(f);
#else
    getcontext(&f.uc);
    f.uc.uc_stack.ss_sp = f.stack.get();
    f.uc.uc_stack.ss_size = kStackBytes;
    f.uc.uc_link = &r.sched;
    makecontext(&f.uc, fiber_entry, 0);
#endif
  }
#ifdef TANDEM_SIMT_TSAN
  r.sched_tsan = __tsan_get_current_fiber();  // where the fibers switch back to
#endif
  r.block_phase = 0;
  tsan_release(&r.sync_start);  // the launch (and this thread's earlier blocks) before the block
  // Round robin over runnable fibers until all are done, in the schedule's order.
  const Schedule sched = schedule();
  r.order.resize(n);
  for (unsigned i = 0; i < n; ++i) r.order[i] = sched == Schedule::Reverse ? n - 1 - i : i;
  uint64_t rng = 0x9e3779b97f4a7c15ull * (1 + bidx.x + 65536ull * (bidx.y + 65536ull * bidx.z));
  while (r.live > 0) {
    bool ran = false;
    if (sched == Schedule::Shuffle)
      for (unsigned i = n; i > 1; --i) {  // a new order every round (splitmix64 steps)
        uint64_t z = (rng += 0x9e3779b97f4a7c15ull);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        std::swap(r.order[i - 1], r.order[(z ^ (z >> 31)) % i]);
      }
    // r.pos moves on when a parking fiber resumes the next one itself (park).
    for (r.pos = 0; r.pos < n; ++r.pos) {
      Fiber& f = r.fibers[r.order[r.pos]];
      if (f.state != State::Runnable) continue;
      ran = true;
      r.current = &f;
      t_thread = &f.ctx;
      r.from_scheduler = true;
#ifdef TANDEM_SIMT_ASAN
      void* fake = nullptr;
      __sanitizer_start_switch_fiber(&fake, f.stack.get(), kStackBytes);
#endif
#ifdef TANDEM_SIMT_TSAN
      tsan_switch(f.tsan.handle);
#endif
#ifdef TANDEM_SIMT_ASM_SWITCH
      tandem_simt_switch(&r.sched_sp, f.sp);
#else
      swapcontext(&r.sched, &f.uc);
#endif
#ifdef TANDEM_SIMT_ASAN
      __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#endif
      if (r.error) break;
    }
    if (r.error) break;
    if (!ran) {
      unsigned at_block = 0, at_warp = 0;
      for (unsigned i = 0; i < n; ++i) {
        at_block += r.fibers[i].state == State::AtBlockBarrier;
        at_warp += r.fibers[i].state == State::AtWarpBarrier;
      }
      throw std::runtime_error("simt: deadlock in block (" + std::to_string(bidx.x) + "," + std::to_string(bidx.y) +
                               "," + std::to_string(bidx.z) + "): " + std::to_string(at_block) +
                               " threads wait at __syncthreads and " + std::to_string(at_warp) +
                               " at a warp barrier that the others never reach (divergent barrier)");
    }
  }
  t_thread = nullptr;
  r.current = nullptr;
  tsan_acquire(&r.sync_end);
  if (r.error) {
    // The block is abandoned; its fibers' stacks are reset at the next launch.
    std::exception_ptr e = r.error;
    r.error = nullptr;
    std::rethrow_exception(e);
  }
}

std::atomic<int> g_schedule{-1};  // -1: not read from the environment yet

}  // namespace
}  // namespace tandem::simt::detail

namespace tandem::simt {

Schedule schedule() {
  using detail::g_schedule;
  int v = g_schedule.load(std::memory_order_relaxed);
  if (v < 0) {
    const char* e = std::getenv("TANDEM_SIMT_ORDER");
    v = !e ? 0 : (std::strcmp(e, "reverse") == 0 ? 1 : (std::strcmp(e, "shuffle") == 0 ? 2 : 0));
    g_schedule.store(v, std::memory_order_relaxed);
  }
  return static_cast<Schedule>(v);
}
void set_schedule(Schedule s) { detail::g_schedule.store(static_cast<int>(s), std::memory_order_relaxed); }

}  // namespace tandem::simt

namespace tandem::simt::detail {
namespace {

unsigned worker_count() {
  static const unsigned n = [] {
    const char* s = std::getenv("TANDEM_SIMT_WORKERS");
    const int v = s ? std::atoi(s) : 1;
    return static_cast<unsigned>(v < 1 ? 1 : (v > 64 ? 64 : v));
  }();
  return n;
}

void run_blocks(const LaunchConfig& cfg, const std::function<void()>& body, std::atomic<uint64_t>& next,
                uint64_t total) {
  thread_local Runner own;
  Runner* saved = t_runner;
  t_runner = &own;
  own.body = &body;
  own.shared.assign(cfg.shmem + 16, 0xcd);  // not zero: CUDA leaves shared memory uninitialised
  try {
    // Relaxed: handing out block indices must not order the blocks (TSan would see it).
    for (uint64_t b; (b = next.fetch_add(1, std::memory_order_relaxed)) < total;) {
      const uint3 bidx{static_cast<unsigned>(b % cfg.grid.x), static_cast<unsigned>((b / cfg.grid.x) % cfg.grid.y),
                       static_cast<unsigned>(b / (uint64_t(cfg.grid.x) * cfg.grid.y))};
      run_block(own, cfg, bidx);
    }
  } catch (...) {
    t_runner = saved;
    next.store(total);
    throw;
  }
  t_runner = saved;
}

}  // namespace

const uint3& thread_idx() { return t_thread->thread_idx; }
const uint3& block_idx() { return t_block_idx; }
const dim3& block_dim() { return t_block_dim; }
const dim3& grid_dim() { return t_grid_dim; }

void* dynamic_shared() {
  Runner& r = runner();
  auto p = reinterpret_cast<uintptr_t>(r.shared.data());
  return reinterpret_cast<void*>((p + 15) & ~uintptr_t{15});
}

unsigned lane_id() { return runner().current->ctx.linear % 32; }

void syncthreads() {
  Runner& r = runner();
  Fiber& f = *r.current;
  char* sync = &r.sync_barrier[r.block_phase & 1];
  tsan_release(sync);
  ++r.at_barrier;
  if (r.at_barrier == r.live)
    release_block(r);
  else
    park(r, f, State::AtBlockBarrier);
  tsan_acquire(sync);
}

void syncwarp(unsigned mask) { warp_barrier(mask, true); }

namespace {
char g_fence_sync;  // __threadfence's object for TSan
}  // namespace

void threadfence() {
  tsan_release(&g_fence_sync);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  tsan_acquire(&g_fence_sync);
}

namespace {
// The barrier a lane met at `phase` was the one released next: the warp's lanes met their
// barriers in one sequence, so the slots' parity names the exchange.
void check_one_release(const Warp& wp, unsigned phase) {
  if (wp.phase != phase + 1)
    throw std::logic_error("simt: a warp's lanes met different warp barriers at once (divergent shuffles or syncs)");
}
}  // namespace

uint64_t warp_exchange(unsigned mask, uint64_t value, int src) {
  Runner& r = runner();
  const unsigned linear = r.current->ctx.linear;
  Warp& wp = r.warps[linear / 32];
  const bool whole = (mask & wp.live) == wp.live;  // every live lane takes part
  const unsigned phase = wp.phase;
  const uint64_t* slots = wp.slots[phase & 1];
  wp.slots[phase & 1][linear % 32] = value;
  warp_barrier(mask, false);
  if (whole) check_one_release(wp, phase);
  uint64_t out;
  const unsigned present = whole ? wp.took_part[phase & 1] : mask & wp.live;
  if (src < 0) {
    out = 0;
    for (unsigned l = 0; l < 32; ++l)
      if (present >> l & 1u) out |= (slots[l] != 0 ? 1ull : 0ull) << l;
  } else {
    out = (present >> src & 1u) ? slots[src] : value;  // an absent lane: own value
  }
  if (!whole) warp_barrier(mask, false);
  return out;
}

const uint32_t* warp_share(const uint32_t* mine, int n) {
  Runner& r = runner();
  const unsigned linear = r.current->ctx.linear;
  Warp& wp = r.warps[linear / 32];
  if (n < 0 || n > kMaxGatherWords)
    throw std::logic_error("simt: a fragment exchange of more than " + std::to_string(kMaxGatherWords) + " words a lane");
  // The .aligned warp-wide instructions this models need every lane of the warp.
  if (wp.live != 0xffffffffu)
    throw std::logic_error("simt: a warp-wide matrix instruction in a warp with exited or missing lanes");
  const unsigned phase = wp.phase;
  uint32_t(&frags)[32][kMaxGatherWords] = wp.frags[phase & 1];
  std::memcpy(frags[linear % 32], mine, sizeof(uint32_t) * static_cast<size_t>(n));
  warp_barrier(0xffffffffu, false);
  check_one_release(wp, phase);
  return &frags[0][0];
}

void warp_gather(const uint32_t* mine, int n, uint32_t* all) {
  const uint32_t* shared = warp_share(mine, n);
  for (int l = 0; l < 32; ++l)
    std::memcpy(all + l * n, shared + l * kMaxGatherWords, sizeof(uint32_t) * static_cast<size_t>(n));
}

namespace {
std::mutex g_shared_mu;
std::unordered_map<const void*, size_t>& granted_shared() {
  static std::unordered_map<const void*, size_t> m;
  return m;
}
constexpr size_t kDefaultDynamicShared = 48 * 1024, kMaxDynamicShared = 227 * 1024;
}  // namespace

void set_max_dynamic_shared(const void* kernel, size_t bytes) {
  if (bytes > kMaxDynamicShared)
    throw std::invalid_argument("simt: cudaFuncSetAttribute(MaxDynamicSharedMemorySize) of " + std::to_string(bytes) +
                                " bytes, above the 227 KiB a block can have");
  std::lock_guard<std::mutex> lk(g_shared_mu);
  granted_shared()[kernel] = bytes;
}

void check_config(const LaunchConfig& cfg) {
  const unsigned nthreads = cfg.block.x * cfg.block.y * cfg.block.z;
  if (nthreads == 0 || nthreads > kMaxThreads)
    throw std::invalid_argument("simt: block of " + std::to_string(nthreads) + " threads (1..1024)");
  if (cfg.block.z > 64) throw std::invalid_argument("simt: blockDim.z above 64");
  if (cfg.grid.y > 65535 || cfg.grid.z > 65535) throw std::invalid_argument("simt: gridDim.y/z above 65535");
  if (cfg.shmem > kMaxDynamicShared) throw std::invalid_argument("simt: more than 227 KiB of dynamic shared memory");
  if (cfg.shmem > kDefaultDynamicShared) {
    size_t granted = 0;
    {
      std::lock_guard<std::mutex> lk(g_shared_mu);
      auto it = granted_shared().find(cfg.kernel);
      if (it != granted_shared().end()) granted = it->second;
    }
    if (cfg.shmem > granted)
      throw std::invalid_argument("simt: " + std::to_string(cfg.shmem) +
                                  " bytes of dynamic shared memory, above the 48 KiB default, and the kernel was "
                                  "granted " + std::to_string(granted) +
                                  " (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes))");
  }
  if (uint64_t(cfg.grid.x) * cfg.grid.y * cfg.grid.z == 0) throw std::invalid_argument("simt: empty grid");
}

namespace {
// The OS threads beside the launching one when TANDEM_SIMT_WORKERS >= 2: started at the first
// such launch and kept, so each keeps its fibers and stacks across launches (starting
// threads and fibers per launch cost more than small grids do, under TSan most of all). One
// grid at a time; the launching thread runs blocks too. The pool is never destroyed: its
// threads wait for work until the process ends.
class WorkerPool {
 public:
  explicit WorkerPool(unsigned threads) : n_(threads) {
    for (unsigned i = 0; i < threads; ++i) std::thread([this] { serve(); }).detach();
  }
  void run(const LaunchConfig& cfg, const std::function<void()>& body, uint64_t total) {
    std::lock_guard<std::mutex> one_grid(launch_mu_);
    std::atomic<uint64_t> next{0};
    {
      std::lock_guard<std::mutex> lk(mu_);
      job_ = Job{&cfg, &body, &next, total};
      pending_ = n_;
      err_ = nullptr;
      ++generation_;
    }
    work_.notify_all();
    std::exception_ptr mine;
    try {
      run_blocks(cfg, body, next, total);
    } catch (...) {
      mine = std::current_exception();
    }
    std::unique_lock<std::mutex> lk(mu_);
    done_.wait(lk, [&] { return pending_ == 0; });
    if (mine) std::rethrow_exception(mine);
    if (err_) std::rethrow_exception(err_);
  }

 private:
  struct Job {
    const LaunchConfig* cfg = nullptr;
    const std::function<void()>* body = nullptr;
    std::atomic<uint64_t>* next = nullptr;
    uint64_t total = 0;
  };
  void serve() {
    uint64_t seen = 0;
    for (;;) {
      Job job;
      {
        std::unique_lock<std::mutex> lk(mu_);
        work_.wait(lk, [&] { return generation_ != seen; });
        seen = generation_;
        job = job_;
      }
      std::exception_ptr e;
      try {
        run_blocks(*job.cfg, *job.body, *job.next, job.total);
      } catch (...) {
        e = std::current_exception();
      }
      std::lock_guard<std::mutex> lk(mu_);
      if (e && !err_) err_ = e;
      if (--pending_ == 0) done_.notify_all();
    }
  }
  std::mutex launch_mu_, mu_;
  std::condition_variable work_, done_;
  Job job_;
  uint64_t generation_ = 0;
  const unsigned n_;
  unsigned pending_ = 0;
  std::exception_ptr err_;
};
}  // namespace

void run_grid(const LaunchConfig& cfg, const std::function<void()>& body) {
  check_config(cfg);
  const uint64_t total = uint64_t(cfg.grid.x) * cfg.grid.y * cfg.grid.z;
  if (worker_count() <= 1 || total <= 1 || t_runner) {  // a launch from inside a kernel never happens; inline anyway
    std::atomic<uint64_t> next{0};
    run_blocks(cfg, body, next, total);
    return;
  }
  static WorkerPool* pool = new WorkerPool(worker_count() - 1);
  pool->run(cfg, body, total);
}

}  // namespace tandem::simt::detail

namespace tandem::simt {
void misaligned(const void* p, unsigned bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%p", p);
  throw std::logic_error("simt: misaligned " + std::to_string(bytes) + "-byte load at " + buf +
                         " (a GPU faults on it: the kernel assumed an alignment the data does not have)");
}
}  // namespace tandem::simt
