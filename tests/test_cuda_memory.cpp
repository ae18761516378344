// The CUDA backend's device memory (kernels/cuda/cuda_backend.hpp: DevicePool) in both of
// its modes: one arena, or every buffer its own allocation (CudaOptions::separate_buffers,
// TANDEM_CUDA_SEPARATE_BUFFERS=1), where a kernel running past its buffer is seen instead of
// landing in a neighbour: by compute-sanitizer on a device, by ASan under the emulator (the
// sanitizer run sets the variable for every test).
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "kernels/backend.hpp"
#include "kernels/backend_factory.hpp"
#include "kernels/cuda/arena.hpp"
#include "kernels/cuda/cuda_backend.hpp"
#include "kernels/cuda/ops.hpp"
#include "kernels/cuda/runtime.hpp"

namespace tandem::kernels {
namespace {

using cuda_arena::Arena;

// Either way the arena does the accounting: the same offsets, limits and errors.
TEST(CudaMemory, SeparateBuffersKeepTheArenasAccounting) {
  for (bool separate : {false, true}) {
    SCOPED_TRACE(separate);
    cuda_emu::DevicePool pool(cuda_emu::make_runtime(0), size_t{1} << 20, separate);
    EXPECT_EQ(pool.base == nullptr, separate) << "no arena memory is reserved for separate buffers";
    Arena::Allocation a, b, c;
    uint8_t* pa = pool.allocate(1000, "a", &a);
    uint8_t* pb = pool.allocate(1000, "b", &b);
    EXPECT_EQ(b.offset, a.offset + 1024);
    EXPECT_EQ(pool.arena.used(), 2048u);
    if (!separate) {
      EXPECT_EQ(pb, pa + 1024);
    }
    EXPECT_EQ(pool.separate.size(), separate ? 2u : 0u);
    EXPECT_THROW(pool.allocate(size_t{1} << 20, "too much", &c), cuda_arena::ArenaOutOfMemory);
    EXPECT_EQ(pool.separate.size(), separate ? 2u : 0u) << "a refused request leaves nothing behind";
    pool.free(a.offset);
    EXPECT_EQ(pool.separate.size(), separate ? 1u : 0u);
    pool.free(b.offset);
    EXPECT_EQ(pool.arena.used(), 0u);
  }
}

// The backend reads the mode from the environment and says so; its buffers work as before.
TEST(CudaMemory, TheEnvironmentTurnsSeparateBuffersOn) {
  const char* old = std::getenv("TANDEM_CUDA_SEPARATE_BUFFERS");
  const std::string saved = old ? old : "";
  for (const char* v : {"1", "0"}) {
    setenv("TANDEM_CUDA_SEPARATE_BUFFERS", v, 1);
    auto be = make_emulated_cuda_backend(size_t{4} << 20);
    EXPECT_EQ(be->description().find("its own allocation") != std::string::npos, v[0] == '1') << v;
    auto z = be->alloc_zeroed(4096);
    std::vector<float> back(16, 1.0f);
    be->download(back.data(), make_tensor(z.get(), DType::F32, 16), 64);
    EXPECT_EQ(back, std::vector<float>(16, 0.0f)) << "zeroed memory is zero in either mode";
  }
  if (old) setenv("TANDEM_CUDA_SEPARATE_BUFFERS", saved.c_str(), 1);
  else unsetenv("TANDEM_CUDA_SEPARATE_BUFFERS");
}

#if defined(__SANITIZE_ADDRESS__)
// A kernel writing 8 bytes past a 1000-byte buffer: inside the arena it lands in the next
// buffer unseen; with separate buffers ASan stops it.
TEST(CudaMemoryDeathTest, AKernelWritingPastItsBufferIsCaught) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  auto overrun = [](bool separate) {
    cuda_emu::DevicePool pool(cuda_emu::make_runtime(0), size_t{1} << 20, separate);
    Arena::Allocation a, b;
    uint8_t* p = pool.allocate(1000, "x", &a);
    pool.allocate(1000, "y", &b);
    cuda_emu::ops::scale(pool.rt->stream(), {reinterpret_cast<float*>(p), 252}, 1, 252, 2.0f);
    pool.rt->synchronize();
  };
  overrun(false);
  EXPECT_DEATH(overrun(true), "heap-buffer-overflow");
}
#endif

}  // namespace
}  // namespace tandem::kernels
