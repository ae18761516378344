// The SIMT emulator as CUDA's race checker, under ThreadSanitizer (kernels/cuda/simt/simt.cpp;
// built by the tsan preset only, run by tests/CMakeLists.txt). `Racy.*` kernels each have one
// race a GPU could show: ctest passes them only when TSan reports it, naming the kernel.
// `Quiet.*` kernels are ordered the ways CUDA orders threads (barriers, atomics, the launch
// boundary, shared memory reused by the next block) and must produce no report at all.
#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "kernels/cuda/simt/simt.hpp"

namespace {

// ---- one race each -------------------------------------------------------------------------

// Each thread writes its slot, then reads its neighbour's without __syncthreads.
__global__ void racy_missing_syncthreads(int* out) {
  __shared__ int s[64];
  s[threadIdx.x] = static_cast<int>(threadIdx.x);
  out[threadIdx.x] = s[(threadIdx.x + 1) % blockDim.x];
}

// A shuffle moves values between lanes, but it does not order their memory accesses: the
// read of another lane's shared slot needs __syncwarp.
__global__ void racy_shuffle_instead_of_syncwarp(int* out) {
  __shared__ int s[32];
  const int lane = static_cast<int>(threadIdx.x);
  s[lane] = lane;
  const int first = __shfl_sync(0xffffffffu, lane, 0);
  out[lane] = s[(lane + 1) % 32] + first;
}

// A barrier orders what comes before it; the write after it races with the others' reads
// after it.
__global__ void racy_write_after_barrier(int* out) {
  __shared__ int s[64];
  s[threadIdx.x] = 1;
  __syncthreads();
  const int v = s[(threadIdx.x + 1) % blockDim.x];
  s[threadIdx.x] = v + 1;
  out[threadIdx.x] = v;
}

// Every block writes the same word of global memory (a GPU runs them at once).
__global__ void racy_blocks_write_one_word(int* out) {
  if (threadIdx.x == 0) out[0] = static_cast<int>(blockIdx.x);
}

// The last block to arrive reads the others' words, but their atomic count is relaxed (as
// CUDA's atomics are): without __threadfence on both sides nothing orders the words.
__global__ void racy_last_block_without_fence(int* words, int* count, int* total) {
  if (threadIdx.x != 0) return;
  words[blockIdx.x] = static_cast<int>(blockIdx.x);
  if (atomicAdd(count, 1) != static_cast<int>(gridDim.x) - 1) return;
  int sum = 0;
  for (unsigned b = 0; b < gridDim.x; ++b) sum += words[b];
  *total = sum;
}

TEST(Racy, MissingSyncthreads) {
  std::vector<int> out(64);
  TANDEM_LAUNCH(racy_missing_syncthreads, 1, 64, 0, nullptr)(out.data());
}

TEST(Racy, ShuffleInsteadOfSyncwarp) {
  std::vector<int> out(32);
  TANDEM_LAUNCH(racy_shuffle_instead_of_syncwarp, 1, 32, 0, nullptr)(out.data());
}

TEST(Racy, WriteAfterBarrier) {
  std::vector<int> out(64);
  TANDEM_LAUNCH(racy_write_after_barrier, 1, 64, 0, nullptr)(out.data());
}

TEST(Racy, BlocksWriteOneWord) {
  std::vector<int> out(1);
  TANDEM_LAUNCH(racy_blocks_write_one_word, 64, 32, 0, nullptr)(out.data());
}

TEST(Racy, LastBlockWithoutFence) {
  std::vector<int> words(64);
  int count = 0, total = 0;
  TANDEM_LAUNCH(racy_last_block_without_fence, 64, 32, 0, nullptr)(words.data(), &count, &total);
}

// ---- ordered the ways CUDA orders threads ----------------------------------------------------

// A tree reduction in shared memory, a barrier between each level; the block's result by
// its first thread, each block its own word; the same shared array reused by every block.
__global__ void quiet_block_sum(const int* x, int n, int* out) {
  __shared__ int s[128];
  int v = 0;
  for (int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x); i < n; i += static_cast<int>(blockDim.x * gridDim.x))
    v += x[i];
  s[threadIdx.x] = v;
  __syncthreads();
  for (unsigned w = blockDim.x / 2; w > 0; w /= 2) {
    if (threadIdx.x < w) s[threadIdx.x] += s[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) out[blockIdx.x] = s[0];
}

// Lanes exchange through shared memory with __syncwarp, and through shuffles; every block
// adds its total into one word atomically; threads that exit early count as arrived.
__global__ void quiet_warp_exchange(int* total, int* out) {
  __shared__ int s[64];
  const unsigned t = threadIdx.x, lane = t % 32;
  s[t] = static_cast<int>(t);
  __syncwarp();
  int v = s[(t / 32) * 32 + (lane + 1) % 32];
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  __syncwarp();
  s[t] = v;  // after the barrier that ordered the others' reads of this slot
  __syncthreads();
  if (t >= 48) return;
  out[blockIdx.x * 48 + t] = s[63 - t];
  __syncthreads();
  if (t == 0) atomicAdd(total, 1);
}

// The last-arriving block (the q/k/v epilogue's per-head norms): every thread writes its
// word, a fence, the block's barrier, one count per block; the block that completes the count
// fences again and reads every block's words, then sets the count back for the next launch.
__global__ void quiet_last_block(int* words, int* count, int* total) {
  __shared__ int last;
  words[blockIdx.x * blockDim.x + threadIdx.x] = static_cast<int>(threadIdx.x);
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) last = atomicAdd(count, 1) == static_cast<int>(gridDim.x) - 1;
  __syncthreads();
  if (!last) return;
  __threadfence();
  int sum = 0;
  for (unsigned i = threadIdx.x; i < gridDim.x * blockDim.x; i += blockDim.x) sum += words[i];
  atomicAdd(total, sum);
  __syncthreads();
  if (threadIdx.x == 0) atomicExch(count, 0);
}

TEST(Quiet, KernelsOrderedAsCudaOrdersThem) {
  std::vector<int> x(4000);
  std::iota(x.begin(), x.end(), -1500);
  std::vector<int> part(9, 0);
  TANDEM_LAUNCH(quiet_block_sum, 9, 128, 0, nullptr)(x.data(), static_cast<int>(x.size()), part.data());
  EXPECT_EQ(std::accumulate(part.begin(), part.end(), 0), std::accumulate(x.begin(), x.end(), 0));
  // The host writes the input again between launches and reads the output after them.
  for (int round = 0; round < 3; ++round) {
    x[0] += 1;
    TANDEM_LAUNCH(quiet_block_sum, 9, 128, 0, nullptr)(x.data(), static_cast<int>(x.size()), part.data());
    EXPECT_EQ(std::accumulate(part.begin(), part.end(), 0), std::accumulate(x.begin(), x.end(), 0));
  }
  int total = 0;
  std::vector<int> out(16 * 48);
  TANDEM_LAUNCH(quiet_warp_exchange, 16, 64, 0, nullptr)(&total, out.data());
  EXPECT_EQ(total, 16);
  // Thread t read slot 63 - t, written by thread u = 63 - t: its neighbour's index plus
  // the xor-1 partner's neighbour's.
  auto neighbour = [](int u) { return (u / 32) * 32 + ((u % 32) + 1) % 32; };
  for (int t = 0; t < 48; ++t) {
    const int u = 63 - t;
    EXPECT_EQ(out[15 * 48 + t], neighbour(u) + neighbour(u ^ 1)) << t;
  }
  std::vector<int> words(64 * 32);
  int count = 0;
  for (int round = 0; round < 2; ++round) {  // the count left at zero serves the next launch
    int sum = 0;
    TANDEM_LAUNCH(quiet_last_block, 64, 32, 0, nullptr)(words.data(), &count, &sum);
    EXPECT_EQ(sum, 64 * (31 * 32 / 2));
    EXPECT_EQ(count, 0);
  }
}

}  // namespace
