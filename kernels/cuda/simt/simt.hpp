// The CUDA dialect tandem's kernels are written in, for two compilers.
//
// Under nvcc (__CUDACC__) this is the CUDA runtime and fp16 headers plus three macros:
//   TANDEM_LAUNCH(kernel, grid, block, shmem, stream)(args...)   ->  kernel<<<grid, block, shmem, stream>>>(args...)
//                                  (or cudaLaunchKernelEx as a programmatic dependent launch, below)
//   TANDEM_DYNAMIC_SHARED(T, name)                               ->  extern __shared__ T name[]
//   TANDEM_GRID_DEPENDENCY()       the first statement of every kernel (below)
//
// Programmatic dependent launch (sm_90, opt-in: TANDEM_CUDA_PDL=1, docs/cuda.md): a kernel
// may be scheduled while the one before it on the stream is still running, so that its
// launch does not wait for the other's end. Every kernel therefore begins with
// TANDEM_GRID_DEPENDENCY(): wait until the grids it depends on have finished and their
// writes are visible (griddepcontrol.wait; nothing when it was launched normally), then let
// the next kernel be scheduled (griddepcontrol.launch_dependents). Before sm_90, and in the
// emulator, whose launches run one after another, it is nothing.
//
// Under a host C++ compiler it is a small SIMT emulator, so the same kernel source runs on
// the CPU in CI (see docs/cuda.md): a launch runs the grid's blocks one after another (or
// on TANDEM_SIMT_WORKERS OS threads), and a block's threads as cooperative fibers (ucontext)
// on one OS thread. __syncthreads() parks the fiber until every live thread of the block
// has arrived; a warp shuffle/vote writes the lane's value into the warp's exchange slots,
// waits for the lanes of the mask, reads, and waits again before the slots are reused.
// `__shared__` is `static thread_local`: one OS thread runs one block's fibers at a time,
// so a kernel's shared arrays are shared by exactly that block's threads (uninitialised
// reuse by the next block is what CUDA does too). Dynamic shared memory is a per-block
// buffer sized at launch, reached through TANDEM_DYNAMIC_SHARED.
//
// A barrier that some live threads never reach (divergent __syncthreads) is reported as
// a std::runtime_error from the launch ("deadlock"), not a hang. Threads that have exited
// count as arrived, as on Volta and later.
//
// A launch on a stream that is being captured (capture.hpp, the emulated
// cudaStreamBeginCapture) is recorded with its converted arguments instead of run.
#pragma once

#if defined(__CUDACC__)
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <atomic>
#include <utility>

namespace tandem::simt {
// Whether launches are programmatic dependent launches: set by the CUDA runtime layer
// (runtime_cuda.cpp) when TANDEM_CUDA_PDL=1 and the device is sm_90 or later.
std::atomic<bool>& pdl_launches();
// (Named apart from the emulator's Launcher: both builds link into one program, and a
// template of one name with two definitions would be one of them for both.)
template <typename... P>
struct DeviceLauncher {
  void (*kernel)(P...);
  dim3 grid, block;
  size_t shmem;
  cudaStream_t stream;
  template <typename... A>
  void operator()(A&&... args) const {
    if (!pdl_launches().load(std::memory_order_relaxed)) {
      kernel<<<grid, block, shmem, stream>>>(std::forward<A>(args)...);
      return;
    }
    cudaLaunchAttribute attr[1] = {};
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid, cfg.blockDim = block, cfg.dynamicSmemBytes = shmem, cfg.stream = stream;
    cfg.attrs = attr, cfg.numAttrs = 1;
    (void)cudaLaunchKernelEx(&cfg, kernel, std::forward<A>(args)...);  // (its error: the launch check's cudaGetLastError)
  }
};
template <typename... P>
DeviceLauncher<P...> make_device_launcher(void (*kernel)(P...), dim3 grid, dim3 block, size_t shmem,
                                          cudaStream_t stream) {
  return DeviceLauncher<P...>{kernel, grid, block, shmem, stream};
}
}  // namespace tandem::simt

#define TANDEM_LAUNCH(kernel, grid, block, shmem, stream) \
  ::tandem::simt::make_device_launcher((kernel), dim3(grid), dim3(block), static_cast<size_t>(shmem), (stream))
#define TANDEM_DYNAMIC_SHARED(T, name) extern __shared__ T name[]
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define TANDEM_GRID_DEPENDENCY() \
  asm volatile("griddepcontrol.wait;\n\tgriddepcontrol.launch_dependents;" ::: "memory")
#else
#define TANDEM_GRID_DEPENDENCY() ((void)0)
#endif
#define TANDEM_SIMT_EMULATED 0
#else
#define TANDEM_SIMT_EMULATED 1

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <stdexcept>
#include <tuple>
#include <typeinfo>
#include <utility>

// ---- qualifiers --------------------------------------------------------------------------
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline __attribute__((always_inline))
#define __launch_bounds__(...)
#define __grid_constant__
#define __shared__ static thread_local
#define TANDEM_GRID_DEPENDENCY() ((void)0)
#define TANDEM_DYNAMIC_SHARED(T, name) T* name = reinterpret_cast<T*>(::tandem::simt::detail::dynamic_shared())

struct dim3 {
  unsigned x = 1, y = 1, z = 1;
  constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
struct uint3 {
  unsigned x = 0, y = 0, z = 0;
};
struct CUstream_st;
using cudaStream_t = CUstream_st*;
constexpr int warpSize = 32;

namespace tandem::simt {

// Block-level state of the current OS thread (see simt.cpp).
namespace detail {
struct ThreadCtx {
  uint3 thread_idx;
  unsigned linear = 0;  // linear thread index in the block
};
// The current fiber's and block's coordinates. Functions rather than extern thread_local
// objects: GCC's sanitizers misjudge extern TLS objects read from a fiber's stack.
const uint3& thread_idx();
const uint3& block_idx();
const dim3& block_dim();
const dim3& grid_dim();
void* dynamic_shared();
void syncthreads();
// Warp barrier over the lanes of `mask`; `value` is this lane's word, the result the word
// of lane `src` (or the ballot of every mask lane's (value != 0) when src < 0).
uint64_t warp_exchange(unsigned mask, uint64_t value, int src);
void syncwarp(unsigned mask);
// __threadfence: a sequentially consistent fence; for ThreadSanitizer (which does not model
// fences) every fence also releases to and acquires from one object, so a fence orders what
// its thread did before it with what any thread does after a later fence. That is more than
// a GPU promises (there the order also needs an atomic read of the other side's write) but
// it lets TSan follow the fence-then-atomic pattern of a grid's last-arriving block.
void threadfence();
unsigned lane_id();
// Every lane of a full warp passes n (<= kMaxGatherWords) words; each gets all 32 lanes'
// words, lane l's at all[l * n ..]. Throws when the warp has exited or missing lanes (the
// warp-wide matrix instructions modelled with it require all 32).
constexpr int kMaxGatherWords = 18;
void warp_gather(const uint32_t* mine, int n, uint32_t* all);
// The same exchange without the copies: the result is the warp's exchange slots, lane l's
// words at [l * kMaxGatherWords ..], readable until this lane meets its next warp barrier
// (shuffle, vote, __syncwarp or exchange).
const uint32_t* warp_share(const uint32_t* mine, int n);

struct LaunchConfig {
  dim3 grid, block;
  size_t shmem = 0;
  const void* kernel = nullptr;  // for the dynamic shared memory it was granted
};
// cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes): what a
// launch of `kernel` may ask for beyond the 48 KiB every kernel gets (up to 227 KiB).
void set_max_dynamic_shared(const void* kernel, size_t bytes);
void run_grid(const LaunchConfig& cfg, const std::function<void()>& body);
// Throws std::invalid_argument for a shape CUDA would refuse at launch (run_grid checks it
// too; a captured launch is checked when it is recorded, as CUDA does).
void check_config(const LaunchConfig& cfg);

// Stream capture (capture.hpp): whether any stream is capturing now (one atomic load, so
// an ordinary launch pays nothing), and the recording of a kernel launch on a capturing
// stream. `args` holds the kernel's converted parameters (a std::tuple of its parameter
// types, `args_type`), `run` runs the grid over them. False when `s` is not capturing.
bool capture_active();
bool record_kernel(cudaStream_t s, const void* kernel, const LaunchConfig& cfg, std::shared_ptr<const void> args,
                   const std::type_info& args_type, std::function<void()> run);

template <typename T>
inline uint64_t to_word(T v) {
  static_assert(sizeof(T) <= 8, "shuffle of a type wider than 64 bits");
  uint64_t w = 0;
  std::memcpy(&w, &v, sizeof(T));
  return w;
}
template <typename T>
inline T from_word(uint64_t w) {
  T v;
  std::memcpy(&v, &w, sizeof(T));
  return v;
}
}  // namespace detail

// The order in which a block's runnable fibers are resumed between barriers: Forward
// (thread 0 first), Reverse, or Shuffle (a new pseudo-random order every round, seeded by
// the block index). Code that is correct does not depend on it; running the tests under
// the other orders exposes kernels that do (a missing barrier, a write-write race).
// Default from TANDEM_SIMT_ORDER=forward|reverse|shuffle.
enum class Schedule { Forward = 0, Reverse = 1, Shuffle = 2 };
Schedule schedule();
void set_schedule(Schedule s);

// Host side of TANDEM_LAUNCH: launcher(args...) runs the grid and returns when it is done
// (the emulated stream is synchronous). On a stream that is being captured
// (capture.hpp) the launch is recorded instead: the kernel, its shape and its arguments
// converted now, as cudaStreamBeginCapture records a launch's parameter values.
template <typename... P>
struct Launcher {
  void (*kernel)(P...);
  detail::LaunchConfig cfg;
  cudaStream_t stream;
  template <typename... A>
  void operator()(A&&... args) const {
    auto k = kernel;
    if (detail::capture_active()) {
      auto params = std::make_shared<const std::tuple<P...>>(std::forward<A>(args)...);
      const detail::LaunchConfig c = cfg;
      // Each replay passes copies of the recorded values, as every launch of a graph does.
      if (detail::record_kernel(stream, reinterpret_cast<const void*>(k), c, params, typeid(std::tuple<P...>),
                                [k, c, params] { detail::run_grid(c, [&] { std::apply(k, *params); }); }))
        return;
      detail::run_grid(cfg, [&] { std::apply(k, *params); });
      return;
    }
    // Arguments are converted to the kernel's parameter types once, as a launch copies them.
    std::tuple<P...> params(std::forward<A>(args)...);
    detail::run_grid(cfg, [&] { std::apply(k, params); });
  }
};
template <typename... P>
Launcher<P...> make_launcher(void (*kernel)(P...), dim3 grid, dim3 block, size_t shmem, cudaStream_t stream) {
  return Launcher<P...>{kernel, {grid, block, shmem, reinterpret_cast<const void*>(kernel)}, stream};
}
inline dim3 as_dim3(dim3 d) { return d; }
inline dim3 as_dim3(unsigned v) { return dim3(v); }
inline dim3 as_dim3(int v) { return dim3(static_cast<unsigned>(v)); }
inline dim3 as_dim3(int64_t v) { return dim3(static_cast<unsigned>(v)); }
inline dim3 as_dim3(size_t v) { return dim3(static_cast<unsigned>(v)); }

}  // namespace tandem::simt

#define TANDEM_LAUNCH(kernel, grid, block, shmem, stream)                                             \
  ::tandem::simt::make_launcher(kernel, ::tandem::simt::as_dim3(grid), ::tandem::simt::as_dim3(block), \
                                static_cast<size_t>(shmem), (stream))

#define threadIdx (::tandem::simt::detail::thread_idx())
#define blockIdx (::tandem::simt::detail::block_idx())
#define blockDim (::tandem::simt::detail::block_dim())
#define gridDim (::tandem::simt::detail::grid_dim())

namespace tandem::simt {
// Throws std::logic_error naming the address: what a GPU faults on (kernels/cuda/common.cuh's
// aligned loads call it when an address is not a multiple of the load's width).
[[noreturn]] void misaligned(const void* p, unsigned bytes);
}  // namespace tandem::simt

// ---- function attributes ---------------------------------------------------------------------
// The one attribute kernels set: the dynamic shared memory a kernel may use above the 48 KiB
// default. The emulator enforces both (std::invalid_argument at the launch, as CUDA's
// cudaErrorInvalidValue), so a kernel that forgot to ask fails here as it would on a GPU.
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };
using cudaError_t = int;
constexpr cudaError_t cudaSuccess = 0;
template <typename... P>
inline cudaError_t cudaFuncSetAttribute(void (*kernel)(P...), cudaFuncAttribute attr, int value) {
  if (attr == cudaFuncAttributeMaxDynamicSharedMemorySize)
    ::tandem::simt::detail::set_max_dynamic_shared(reinterpret_cast<const void*>(kernel), static_cast<size_t>(value));
  return cudaSuccess;
}

// ---- barriers, shuffles, votes -------------------------------------------------------------
inline void __syncthreads() { ::tandem::simt::detail::syncthreads(); }
inline void __syncwarp(unsigned mask = 0xffffffffu) { ::tandem::simt::detail::syncwarp(mask); }

template <typename T>
inline T __shfl_sync(unsigned mask, T v, int src_lane, int width = 32) {
  const int lane = static_cast<int>(::tandem::simt::detail::lane_id());
  const int src = (lane & ~(width - 1)) + (src_lane & (width - 1));
  using namespace ::tandem::simt::detail;
  return from_word<T>(warp_exchange(mask, to_word(v), src));
}
template <typename T>
inline T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32) {
  const int lane = static_cast<int>(::tandem::simt::detail::lane_id());
  int src = lane ^ lane_mask;
  if ((src & ~(width - 1)) != (lane & ~(width - 1))) src = lane;
  using namespace ::tandem::simt::detail;
  return from_word<T>(warp_exchange(mask, to_word(v), src));
}
template <typename T>
inline T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  const int lane = static_cast<int>(::tandem::simt::detail::lane_id());
  int src = lane + static_cast<int>(delta);
  if ((src & ~(width - 1)) != (lane & ~(width - 1))) src = lane;  // beyond the segment: own value
  using namespace ::tandem::simt::detail;
  return from_word<T>(warp_exchange(mask, to_word(v), src));
}
template <typename T>
inline T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  const int lane = static_cast<int>(::tandem::simt::detail::lane_id());
  int src = lane - static_cast<int>(delta);
  if (src < (lane & ~(width - 1))) src = lane;
  using namespace ::tandem::simt::detail;
  return from_word<T>(warp_exchange(mask, to_word(v), src));
}
inline unsigned __ballot_sync(unsigned mask, int pred) {
  return static_cast<unsigned>(::tandem::simt::detail::warp_exchange(mask, pred != 0 ? 1u : 0u, -1));
}
inline int __any_sync(unsigned mask, int pred) { return __ballot_sync(mask, pred) != 0; }
inline int __all_sync(unsigned mask, int pred) { return __ballot_sync(mask, pred) == mask; }
inline unsigned __activemask() { return 0xffffffffu; }  // the emulator never splits a warp
inline void __threadfence() { ::tandem::simt::detail::threadfence(); }
inline void __threadfence_block() { ::tandem::simt::detail::threadfence(); }

// ---- tensor-core matrix multiply-accumulate ------------------------------------------------
// Models of PTX's integer mma.sync.aligned.m16n8k{32,16}.row.col.s32.s8.s8.s32 (d = A B + c,
// A 16 x K row-major int8, B K x 8 column-major int8, exact int32 sums), with the fragment
// layouts the PTX ISA documents; gid = lane / 4, tid = lane % 4, registers hold 4 int8 of
// consecutive k, lowest byte first:
//   k = 32:  a[0] = A[gid][4tid..],  a[1] = A[gid+8][4tid..],
//            a[2] = A[gid][16+4tid..], a[3] = A[gid+8][16+4tid..];
//            b[0] = B[4tid..][gid],  b[1] = B[16+4tid..][gid]
//   k = 16:  a[0] = A[gid][4tid..],  a[1] = A[gid+8][4tid..];  b[0] = B[4tid..][gid]
//   d, c:    [0] = (gid, 2tid), [1] = (gid, 2tid+1), [2] = (gid+8, 2tid), [3] = (gid+8, 2tid+1)
// Every lane of the warp must take part (kMaxGatherWords' exchange checks it).
namespace tandem::simt {
namespace detail {
inline int s8_at(uint32_t word, int byte) { return static_cast<int8_t>(static_cast<uint8_t>(word >> (8 * byte))); }
}  // namespace detail
template <int K>
inline void mma_s8(int (&d)[4], const uint32_t* a, const uint32_t* b, const int (&c)[4]) {
  static_assert(K == 16 || K == 32, "m16n8k16 or m16n8k32");
  constexpr int na = K / 8, nb = K / 16, n = na + nb;  // registers of A and B per lane
  uint32_t mine[n], all[32 * n];
  for (int i = 0; i < na; ++i) mine[i] = a[i];
  for (int i = 0; i < nb; ++i) mine[na + i] = b[i];
  detail::warp_gather(mine, n, all);
  const int lane = static_cast<int>(detail::lane_id()), gid = lane / 4, tid = lane % 4;
  for (int i = 0; i < 4; ++i) {
    const int row = gid + 8 * (i / 2), col = 2 * tid + (i % 2);
    int s = c[i];
    for (int k = 0; k < K; ++k) {
      // A[row][k] is byte k % 4 of register (row >= 8) + 2 (k >= 16) of lane 4 (row % 8) + (k % 16) / 4;
      // B[k][col] byte k % 4 of register (k >= 16) of lane 4 col + (k % 16) / 4.
      const int la = 4 * (row % 8) + (k % 16) / 4, ra = (row >= 8 ? 1 : 0) + (k >= 16 ? 2 : 0);
      const int lb = 4 * col + (k % 16) / 4, rb = k >= 16 ? 1 : 0;
      s += detail::s8_at(all[la * n + ra], k % 4) * detail::s8_at(all[lb * n + na + rb], k % 4);
    }
    d[i] = s;
  }
}

// PTX's cvt.rna.tf32.f32: x rounded to TF32 (10 fraction bits, float's exponent), to nearest
// with ties away from zero, as a float's bits with the 13 low bits zero; infinities and NaNs
// as they are.
inline uint32_t tf32_rna(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  if ((u & 0x7f800000u) == 0x7f800000u) return u;
  return (u + 0x1000u) & 0xffffe000u;
}

// mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 (d = A B + c; A 16 x 8, B 8 x 8, TF32
// values as float bits, which the kernels round with cvt.rna first): gid = lane / 4,
// tid = lane % 4;
//   a[0] = A[gid][tid], a[1] = A[gid+8][tid], a[2] = A[gid][tid+4], a[3] = A[gid+8][tid+4];
//   b[0] = B[tid][gid], b[1] = B[tid+4][gid];   d, c as the integer forms above.
// A product of two TF32 values is exact in float; the model adds the eight to c in k order,
// each sum rounded to float. The tensor core's own order and rounding of the sum are its
// own (one fixed way per element, whatever the other columns hold), so a GPU's results differ
// from these in the last bits.
namespace detail {
inline float word_as_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
// This lane's operands of an m16n8k8 TF32 product from the warp's gathered registers (`all`:
// n words a lane): its rows' A[gid + 8h][k] (A's four registers at a_off) and its columns'
// B[k][2tid + h] (B's two at b_off), k = 0..7.
//   A[row][k]: lane 4 (row % 8) + k % 4, register (row >= 8) + 2 (k >= 4);
//   B[k][col]: lane 4 col + k % 4, register (k >= 4).
struct Tf32Rows {
  float v[2][8];
};
inline Tf32Rows tf32_a_rows(const uint32_t* all, int n, int a_off) {
  const int gid = static_cast<int>(lane_id()) / 4;
  Tf32Rows a;
  for (int h = 0; h < 2; ++h)
    for (int k = 0; k < 8; ++k) a.v[h][k] = word_as_float(all[(4 * gid + k % 4) * n + a_off + h + (k >= 4 ? 2 : 0)]);
  return a;
}
inline Tf32Rows tf32_b_cols(const uint32_t* all, int n, int b_off) {
  const int tid = static_cast<int>(lane_id()) % 4;
  Tf32Rows b;
  for (int h = 0; h < 2; ++h)
    for (int k = 0; k < 8; ++k) b.v[h][k] = word_as_float(all[(4 * (2 * tid + h) + k % 4) * n + b_off + (k >= 4 ? 1 : 0)]);
  return b;
}
// One lane's four results (d[i] at row gid + 8 (i / 2), column 2 tid + i % 2): c plus the
// eight products in k order, each sum rounded to float.
inline void tf32_product(float (&d)[4], const Tf32Rows& a, const Tf32Rows& b, const float (&c)[4]) {
  float s[4] = {c[0], c[1], c[2], c[3]};
  for (int k = 0; k < 8; ++k)  // the four sums side by side (one vector), each in k order
    for (int i = 0; i < 4; ++i) s[i] = s[i] + a.v[i / 2][k] * b.v[i % 2][k];
  for (int i = 0; i < 4; ++i) d[i] = s[i];
}
}  // namespace detail

inline void mma_tf32(float (&d)[4], const uint32_t* a, const uint32_t* b, const float (&c)[4]) {
  uint32_t mine[6];
  for (int i = 0; i < 4; ++i) mine[i] = a[i];
  for (int i = 0; i < 2; ++i) mine[4 + i] = b[i];
  const uint32_t* all = detail::warp_share(mine, 6);
  constexpr int stride = detail::kMaxGatherWords;
  detail::tf32_product(d, detail::tf32_a_rows(all, stride, 0), detail::tf32_b_cols(all, stride, 4), c);
}

// The products of one step of a split-TF32 product (kernels/cuda/mma.cuh mma_tf32_split),
// from one exchange of fragments where the device issues one mma instruction per product
// (the emulator's time is in the exchanges): main = A0 B0 + main, then small = Ai Bj + small
// for (i, j) = (0, 1), (0, 2), (1, 0), (1, 1), (2, 0) where A has part i and B part j, each
// as mma_tf32 computes it.
template <int AParts, int BParts>
inline void mma_tf32_split(float (&main)[4], float (&small)[4], const uint32_t (&a)[3][4],
                           const uint32_t (&b)[3][2]) {
  static_assert((AParts == 1 || AParts == 3) && (BParts == 1 || BParts == 3), "one or three parts");
  constexpr int n = 4 * AParts + 2 * BParts, stride = detail::kMaxGatherWords;
  uint32_t mine[n];
  for (int p = 0; p < AParts; ++p)
    for (int i = 0; i < 4; ++i) mine[4 * p + i] = a[p][i];
  for (int p = 0; p < BParts; ++p)
    for (int i = 0; i < 2; ++i) mine[4 * AParts + 2 * p + i] = b[p][i];
  const uint32_t* all = detail::warp_share(mine, n);
  detail::Tf32Rows ar[AParts], bc[BParts];
  for (int p = 0; p < AParts; ++p) ar[p] = detail::tf32_a_rows(all, stride, 4 * p);
  for (int p = 0; p < BParts; ++p) bc[p] = detail::tf32_b_cols(all, stride, 4 * AParts + 2 * p);
  detail::tf32_product(main, ar[0], bc[0], main);
  for (auto [i, j] : {std::pair{0, 1}, {0, 2}, {1, 0}, {1, 1}, {2, 0}})
    if (i < AParts && j < BParts) detail::tf32_product(small, ar[i], bc[j], small);
}
}  // namespace tandem::simt

// ---- atomics (real atomics: blocks may run on several OS threads) ---------------------------
template <typename T>
inline T atomicAdd(T* p, T v) {
  return std::atomic_ref<T>(*p).fetch_add(v, std::memory_order_relaxed);
}
template <typename T>
inline T atomicSub(T* p, T v) {
  return std::atomic_ref<T>(*p).fetch_sub(v, std::memory_order_relaxed);
}
template <typename T>
inline T atomicExch(T* p, T v) {
  return std::atomic_ref<T>(*p).exchange(v, std::memory_order_relaxed);
}
template <typename T>
inline T atomicCAS(T* p, T expected, T desired) {
  std::atomic_ref<T>(*p).compare_exchange_strong(expected, desired, std::memory_order_relaxed);
  return expected;  // the old value either way
}
template <typename T>
inline T atomicMax(T* p, T v) {
  std::atomic_ref<T> a(*p);
  T old = a.load(std::memory_order_relaxed);
  while (old < v && !a.compare_exchange_weak(old, v, std::memory_order_relaxed)) {
  }
  return old;
}
template <typename T>
inline T atomicMin(T* p, T v) {
  std::atomic_ref<T> a(*p);
  T old = a.load(std::memory_order_relaxed);
  while (v < old && !a.compare_exchange_weak(old, v, std::memory_order_relaxed)) {
  }
  return old;
}
template <typename T>
inline T atomicOr(T* p, T v) {
  return std::atomic_ref<T>(*p).fetch_or(v, std::memory_order_relaxed);
}
template <typename T>
inline T atomicAnd(T* p, T v) {
  return std::atomic_ref<T>(*p).fetch_and(v, std::memory_order_relaxed);
}

// ---- bits and conversions -------------------------------------------------------------------
inline unsigned __float_as_uint(float f) {
  unsigned u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float __uint_as_float(unsigned u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline int __float_as_int(float f) { return static_cast<int>(__float_as_uint(f)); }
inline float __int_as_float(int i) { return __uint_as_float(static_cast<unsigned>(i)); }
inline int __popc(unsigned v) { return __builtin_popcount(v); }
// c + the dot product of a's and b's four signed bytes (the sm_61+ integer instruction).
inline int __dp4a(int a, int b, int c) {
  for (int i = 0; i < 4; ++i)
    c += static_cast<int>(static_cast<int8_t>(static_cast<uint32_t>(a) >> (8 * i))) *
         static_cast<int>(static_cast<int8_t>(static_cast<uint32_t>(b) >> (8 * i)));
  return c;
}
inline int __popcll(unsigned long long v) { return __builtin_popcountll(v); }
inline int __clz(unsigned v) { return v ? __builtin_clz(v) : 32; }
inline int __ffs(unsigned v) { return __builtin_ffs(static_cast<int>(v)); }
template <typename T>
inline T __ldg(const T* p) {
  return *p;
}
// A load that bypasses the SM's L1 (ld.global.cg): what another SM wrote since.
template <typename T>
inline T __ldcg(const T* p) {
  return *p;
}
// Round to nearest even, as the device's cvt.rni (the host's default rounding mode).
inline int __float2int_rn(float f) { return static_cast<int>(std::nearbyint(f)); }
inline int __float2int_rz(float f) { return static_cast<int>(f); }

// IEEE-rounded arithmetic that the compiler must not contract (the device's __f*_rn). The
// emulated build is compiled with -ffp-contract=off, so these are the plain operations.
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fmaf_rn(float a, float b, float c) { return std::fma(a, b, c); }
inline float __frcp_rn(float a) { return 1.0f / a; }
inline float __fsqrt_rn(float a) { return std::sqrt(a); }
inline double __dadd_rn(double a, double b) { return a + b; }
inline double __dmul_rn(double a, double b) { return a * b; }
// Device-only math. The host versions are the correctly rounded (or libm) results; the
// device's are approximations with documented error (rsqrtf: 2 ulp; __expf, __logf,
// __fdividef: fast hardware paths). Kernels that must match the CPU avoid them.
inline float rsqrtf(float a) { return 1.0f / std::sqrt(a); }
inline float __expf(float a) { return std::exp(a); }
inline float __logf(float a) { return std::log(a); }
inline float __fdividef(float a, float b) { return a / b; }
inline float __saturatef(float a) { return a < 0.0f ? 0.0f : (a > 1.0f ? 1.0f : a); }

// ---- half precision ---------------------------------------------------------------------------
// Bit-exact IEEE binary16: conversions round to nearest even, overflow to inf, keep NaN.
struct __half {
  uint16_t x;
};
inline __half __ushort_as_half(unsigned short u) { return __half{u}; }
inline unsigned short __half_as_ushort(__half h) { return h.x; }
inline float __half2float(__half h) {
  const uint32_t sign = static_cast<uint32_t>(h.x & 0x8000u) << 16;
  uint32_t exp = (h.x >> 10) & 0x1fu, mant = h.x & 0x3ffu, bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {
      exp = 127 - 15 + 1;
      while ((mant & 0x400u) == 0) mant <<= 1, --exp;
      bits = sign | (exp << 23) | ((mant & 0x3ffu) << 13);
    }
  } else if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  return __uint_as_float(bits);
}
inline __half __float2half_rn(float f) {
  const uint32_t x = __float_as_uint(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t a = x & 0x7fffffffu;
  if (a >= 0x7f800000u) return __half{static_cast<uint16_t>(sign | (a > 0x7f800000u ? 0x7e00u : 0x7c00u))};
  if (a >= 0x477ff000u) return __half{static_cast<uint16_t>(sign | 0x7c00u)};
  if (a < 0x38800000u) {
    if (a < 0x33000000u) return __half{sign};
    const uint32_t e = a >> 23, m = (a & 0x7fffffu) | 0x800000u, shift = 126 - e;
    const uint32_t rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
    uint32_t r = m >> shift;
    if (rem > half || (rem == half && (r & 1u))) ++r;
    return __half{static_cast<uint16_t>(sign | r)};
  }
  uint32_t r = (a >> 13) - (112u << 10);
  const uint32_t rem = a & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (r & 1u))) ++r;
  return __half{static_cast<uint16_t>(sign | r)};
}
inline __half __float2half(float f) { return __float2half_rn(f); }

#endif  // !__CUDACC__
