// The SIMT emulator (kernels/cuda/simt/) on its own: kernels written as CUDA source,
// compiled here as host C++, launched through TANDEM_LAUNCH.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "kernels/cuda/simt/capture.hpp"
#include "kernels/cuda/simt/simt.hpp"

namespace {

// Block reduction through static shared memory and __syncthreads (tree in shared memory).
__global__ void block_sum(const int* x, int n, int* out) {
  __shared__ int s[256];
  int v = 0;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) v += x[i];
  s[threadIdx.x] = v;
  __syncthreads();
  for (unsigned w = blockDim.x / 2; w > 0; w /= 2) {
    if (threadIdx.x < w) s[threadIdx.x] += s[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) out[blockIdx.x] = s[0];
}

TEST(Simt, SharedMemoryReductionWithSyncthreads) {
  std::vector<int> x(5000);
  std::iota(x.begin(), x.end(), -1000);
  std::vector<int> part(7, -1);
  TANDEM_LAUNCH(block_sum, 7, 256, 0, nullptr)(x.data(), static_cast<int>(x.size()), part.data());
  EXPECT_EQ(std::accumulate(part.begin(), part.end(), 0), std::accumulate(x.begin(), x.end(), 0));
}

// Without the barrier a reader sees the other threads' values missing: the emulator must
// really interleave threads at __syncthreads (a fiber runs until it blocks).
__global__ void neighbour(int* out) {
  __shared__ int s[64];
  s[threadIdx.x] = static_cast<int>(threadIdx.x) * 10;
  __syncthreads();
  out[threadIdx.x] = s[(threadIdx.x + 1) % blockDim.x];
}

TEST(Simt, SyncthreadsOrdersWritesBeforeReads) {
  std::vector<int> out(64);
  TANDEM_LAUNCH(neighbour, 1, 64, 0, nullptr)(out.data());
  for (int i = 0; i < 64; ++i) EXPECT_EQ(out[i], ((i + 1) % 64) * 10);
}

__global__ void shuffles(int* out) {
  const int lane = threadIdx.x % 32;
  const int base = static_cast<int>(threadIdx.x) * 8;
  out[base + 0] = __shfl_xor_sync(0xffffffffu, lane * 3, 5);
  out[base + 1] = __shfl_down_sync(0xffffffffu, lane + 100, 4);
  out[base + 2] = __shfl_up_sync(0xffffffffu, lane + 200, 2);
  out[base + 3] = __shfl_sync(0xffffffffu, lane * 7 + static_cast<int>(threadIdx.x / 32), 9);
  out[base + 4] = static_cast<int>(__ballot_sync(0xffffffffu, lane % 3 == 0));
  out[base + 5] = __any_sync(0xffffffffu, lane == 17);
  out[base + 6] = __all_sync(0xffffffffu, lane < 31);
  float f = static_cast<float>(lane);
  for (int o = 16; o >= 1; o /= 2) f += __shfl_xor_sync(0xffffffffu, f, o);
  out[base + 7] = static_cast<int>(f);
}

TEST(Simt, WarpShufflesAndVotes) {
  std::vector<int> out(64 * 8);
  TANDEM_LAUNCH(shuffles, 1, 64, 0, nullptr)(out.data());
  unsigned ballot = 0;
  for (int l = 0; l < 32; l += 3) ballot |= 1u << l;
  for (int t = 0; t < 64; ++t) {
    const int lane = t % 32, w = t / 32;
    const int* o = &out[t * 8];
    EXPECT_EQ(o[0], (lane ^ 5) * 3);
    EXPECT_EQ(o[1], lane + 4 < 32 ? lane + 4 + 100 : lane + 100);
    EXPECT_EQ(o[2], lane >= 2 ? lane - 2 + 200 : lane + 200);
    EXPECT_EQ(o[3], 9 * 7 + w);
    EXPECT_EQ(static_cast<unsigned>(o[4]), ballot);
    EXPECT_EQ(o[5], 1);
    EXPECT_EQ(o[6], 0);
    EXPECT_EQ(o[7], 31 * 32 / 2);
  }
}

// Shuffles in a warp whose block is not a multiple of 32 threads: absent lanes are skipped.
__global__ void partial_warp(int* out) {
  out[threadIdx.x] = static_cast<int>(__ballot_sync(0xffffffffu, 1));
}

TEST(Simt, PartialLastWarp) {
  std::vector<int> out(40);
  TANDEM_LAUNCH(partial_warp, 1, 40, 0, nullptr)(out.data());
  for (int t = 0; t < 32; ++t) EXPECT_EQ(static_cast<unsigned>(out[t]), 0xffffffffu);
  for (int t = 32; t < 40; ++t) EXPECT_EQ(static_cast<unsigned>(out[t]), 0xffu);
}

__global__ void atomics(int* counter, float* fsum, int* mx, unsigned* bits) {
  atomicAdd(counter, 1);
  atomicAdd(fsum, 0.5f);
  const unsigned t = threadIdx.x + blockDim.x * threadIdx.y;  // 0..31
  atomicMax(mx, static_cast<int>(blockIdx.x * 32 + t));
  atomicOr(bits, 1u << t);
}

TEST(Simt, Atomics) {
  int counter = 0, mx = -5;
  float fsum = 0.0f;
  unsigned bits = 0;
  TANDEM_LAUNCH(atomics, dim3(3, 2), dim3(8, 4), 0, nullptr)(&counter, &fsum, &mx, &bits);
  EXPECT_EQ(counter, 6 * 32);
  EXPECT_EQ(fsum, 96.0f);
  EXPECT_EQ(mx, 2 * 32 + 31);  // grid 3x2: blockIdx.x in 0..2
  EXPECT_EQ(bits, 0xffffffffu);
}

// Dynamic shared memory sized at launch, 3-D blocks and 2-D grids.
__global__ void dyn_shared(int* out) {
  TANDEM_DYNAMIC_SHARED(int, s);
  const unsigned t = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  const unsigned nt = blockDim.x * blockDim.y * blockDim.z;
  s[t] = static_cast<int>(t + 1000 * (blockIdx.x + gridDim.x * blockIdx.y));
  __syncthreads();
  out[(blockIdx.x + gridDim.x * blockIdx.y) * nt + t] = s[nt - 1 - t];
}

TEST(Simt, DynamicSharedMemoryAndMultiDimensionalShapes) {
  const unsigned nt = 4 * 3 * 2, nb = 2 * 3;
  std::vector<int> out(nt * nb);
  TANDEM_LAUNCH(dyn_shared, dim3(2, 3), dim3(4, 3, 2), nt * sizeof(int), nullptr)(out.data());
  for (unsigned b = 0; b < nb; ++b)
    for (unsigned t = 0; t < nt; ++t) EXPECT_EQ(out[b * nt + t], static_cast<int>(nt - 1 - t + 1000 * b));
}

__global__ void divergent_barrier(int* out) {
  if (threadIdx.x < 16) __syncthreads();  // half the block never arrives... but they exit
  out[threadIdx.x] = 1;
}
__global__ void deadlock(int* out) {
  if (threadIdx.x < 16) {
    __syncthreads();
  } else {
    __shfl_sync(0xffffffffu, 1, 0);  // waits for lanes that wait at the block barrier
  }
  out[threadIdx.x] = 1;
}

// Exited threads count as arrived (as on Volta+); a real cycle is an error, not a hang.
TEST(Simt, DivergentBarriers) {
  std::vector<int> out(64);
  TANDEM_LAUNCH(divergent_barrier, 1, 64, 0, nullptr)(out.data());
  EXPECT_EQ(std::accumulate(out.begin(), out.end(), 0), 64);
  EXPECT_THROW(TANDEM_LAUNCH(deadlock, 1, 32, 0, nullptr)(out.data()), std::runtime_error);
  // The emulator is usable after the failed launch.
  std::vector<int> part(1);
  std::vector<int> x(10, 2);
  TANDEM_LAUNCH(block_sum, 1, 256, 0, nullptr)(x.data(), 10, part.data());
  EXPECT_EQ(part[0], 20);
}

// A write-write race: every thread stores its index into one shared cell, then reads it
// after the barrier. The winner is whoever ran last, so the result depends on the
// schedule, which the emulator lets tests vary (TANDEM_SIMT_ORDER) to expose such races.
__global__ void racy(int* out) {
  __shared__ int cell;
  cell = static_cast<int>(threadIdx.x);
  __syncthreads();
  out[threadIdx.x] = cell;
}

struct ScheduleGuard {
  tandem::simt::Schedule saved = tandem::simt::schedule();
  ~ScheduleGuard() { tandem::simt::set_schedule(saved); }
};

TEST(Simt, ScheduleOrderExposesRaces) {
  ScheduleGuard guard;
  std::vector<int> out(64);
  tandem::simt::set_schedule(tandem::simt::Schedule::Forward);
  TANDEM_LAUNCH(racy, 1, 64, 0, nullptr)(out.data());
  EXPECT_EQ(out[0], 63);
  tandem::simt::set_schedule(tandem::simt::Schedule::Reverse);
  TANDEM_LAUNCH(racy, 1, 64, 0, nullptr)(out.data());
  EXPECT_EQ(out[0], 0);
  tandem::simt::set_schedule(tandem::simt::Schedule::Shuffle);
  TANDEM_LAUNCH(racy, 1, 64, 0, nullptr)(out.data());
  EXPECT_NE(out[0], 0);  // the shuffle's last thread (fixed seed): neither end
  EXPECT_NE(out[0], 63);
  // A correct kernel gives the same result under every order.
  std::vector<int> x(3000);
  std::iota(x.begin(), x.end(), 1);
  for (auto sc : {tandem::simt::Schedule::Forward, tandem::simt::Schedule::Reverse, tandem::simt::Schedule::Shuffle}) {
    tandem::simt::set_schedule(sc);
    std::vector<int> part(3);
    TANDEM_LAUNCH(block_sum, 3, 256, 0, nullptr)(x.data(), 3000, part.data());
    EXPECT_EQ(part[0] + part[1] + part[2], 3000 * 3001 / 2);
    std::vector<int> sh(64 * 8);
    TANDEM_LAUNCH(shuffles, 1, 64, 0, nullptr)(sh.data());
    EXPECT_EQ(sh[7], 31 * 32 / 2);
  }
}

TEST(Simt, Dp4aIsTheSignedByteDotProduct) {
  // bytes of a: 1, -2, 127, -128; of b: -1, 3, 2, -128
  const int a = static_cast<int>(0x807F'FE01u), b = static_cast<int>(0x8002'03FFu);
  EXPECT_EQ(__dp4a(a, b, 0), 1 * -1 + -2 * 3 + 127 * 2 + -128 * -128);
  EXPECT_EQ(__dp4a(a, b, -7), -7 + 1 * -1 + -2 * 3 + 127 * 2 + -128 * -128);
  EXPECT_EQ(__dp4a(0x01010101, a, 0), 1 - 2 + 127 - 128);
}

// mma.sync's integer shapes: each lane packs the bytes the PTX ISA assigns it (A 16 x K
// row-major, B K x 8 column-major, as a list of (row, k) per register byte), and the
// results land where the ISA says; the product must be the plain one.
template <int K>
__global__ void mma_tile(const int8_t* A, const int8_t* B, const int* C, int* D) {
  const int lane = static_cast<int>(threadIdx.x), gid = lane / 4, tid = lane % 4;
  uint32_t a[K / 8], b[K / 16];
  for (int r = 0; r < K / 8; ++r) {  // a[r]: rows gid (r even) / gid + 8 (r odd), k from 16 (r / 2) + 4 tid
    uint32_t w = 0;
    for (int j = 0; j < 4; ++j)
      w |= uint32_t(uint8_t(A[(gid + 8 * (r % 2)) * K + 16 * (r / 2) + 4 * tid + j])) << (8 * j);
    a[r] = w;
  }
  for (int r = 0; r < K / 16; ++r) {  // b[r]: column gid, k from 16 r + 4 tid
    uint32_t w = 0;
    for (int j = 0; j < 4; ++j) w |= uint32_t(uint8_t(B[gid * K + 16 * r + 4 * tid + j])) << (8 * j);
    b[r] = w;
  }
  int c[4], d[4];
  for (int i = 0; i < 4; ++i) c[i] = C[(gid + 8 * (i / 2)) * 8 + 2 * tid + i % 2];
  tandem::simt::mma_s8<K>(d, a, b, c);
  for (int i = 0; i < 4; ++i) D[(gid + 8 * (i / 2)) * 8 + 2 * tid + i % 2] = d[i];
}

template <int K>
void check_mma(uint32_t seed) {
  std::mt19937 g(seed);
  std::uniform_int_distribution<int> byte(-128, 127), acc(-100000, 100000);
  std::vector<int8_t> A(16 * K), B(8 * K);  // B column-major: column n at B[n * K ..]
  std::vector<int> C(16 * 8), D(16 * 8, 0);
  for (auto& v : A) v = static_cast<int8_t>(byte(g));
  for (auto& v : B) v = static_cast<int8_t>(byte(g));
  for (auto& v : C) v = acc(g);
  TANDEM_LAUNCH(mma_tile<K>, 1, 32, 0, nullptr)(A.data(), B.data(), C.data(), D.data());
  for (int m = 0; m < 16; ++m)
    for (int n = 0; n < 8; ++n) {
      int want = C[m * 8 + n];
      for (int k = 0; k < K; ++k) want += int(A[m * K + k]) * int(B[n * K + k]);
      ASSERT_EQ(D[m * 8 + n], want) << "K=" << K << " (" << m << ", " << n << ")";
    }
}

TEST(Simt, IntegerMmaIsTheMatrixProductInThePtxFragmentLayout) {
  for (uint32_t seed = 1; seed <= 5; ++seed) {
    check_mma<32>(seed);
    check_mma<16>(seed + 100);
  }
}

// One m16n8k8 TF32 product, each lane loading its fragments by the PTX ISA's layout written
// out here independently: A row-major 16 x 8, B column-major (column n at B[n * 8 ..]).
__global__ void mma_tf32_tile(const float* A, const float* B, const float* C, float* D) {
  const int lane = static_cast<int>(threadIdx.x), gid = lane / 4, tid = lane % 4;
  auto bits = [](float f) { return __float_as_uint(f); };
  const uint32_t a[4] = {bits(A[gid * 8 + tid]), bits(A[(gid + 8) * 8 + tid]), bits(A[gid * 8 + tid + 4]),
                         bits(A[(gid + 8) * 8 + tid + 4])};
  const uint32_t b[2] = {bits(B[gid * 8 + tid]), bits(B[gid * 8 + tid + 4])};
  float c[4], d[4];
  for (int i = 0; i < 4; ++i) c[i] = C[(gid + 8 * (i / 2)) * 8 + 2 * tid + i % 2];
  tandem::simt::mma_tf32(d, a, b, c);
  for (int i = 0; i < 4; ++i) D[(gid + 8 * (i / 2)) * 8 + 2 * tid + i % 2] = d[i];
}

// Small integers: every product and sum is exact in float, so the model must give the plain
// product exactly, whatever order it adds in.
TEST(Simt, Tf32MmaIsTheMatrixProductInThePtxFragmentLayout) {
  std::mt19937 g(7);
  std::uniform_int_distribution<int> small(-50, 50), acc(-10000, 10000);
  for (int round = 0; round < 5; ++round) {
    std::vector<float> A(16 * 8), B(8 * 8), C(16 * 8), D(16 * 8, 0.0f);
    for (auto& v : A) v = static_cast<float>(small(g));
    for (auto& v : B) v = static_cast<float>(small(g)) * 0.25f;
    for (auto& v : C) v = static_cast<float>(acc(g));
    TANDEM_LAUNCH(mma_tf32_tile, 1, 32, 0, nullptr)(A.data(), B.data(), C.data(), D.data());
    for (int m = 0; m < 16; ++m)
      for (int n = 0; n < 8; ++n) {
        double want = C[m * 8 + n];
        for (int k = 0; k < 8; ++k) want += double(A[m * 8 + k]) * B[n * 8 + k];
        ASSERT_EQ(D[m * 8 + n], static_cast<float>(want)) << "(" << m << ", " << n << ")";
      }
  }
}

// The emulator's one-exchange model of a split-TF32 step (what the device issues as 3 or 6
// mma instructions) against those instructions one by one: the same bits.
template <int AParts, int BParts>
__global__ void split_step_both_ways(const float* in, float* out) {
  const int lane = static_cast<int>(threadIdx.x);
  uint32_t a[3][4], b[3][2];
  for (int p = 0; p < 3; ++p) {
    for (int i = 0; i < 4; ++i) a[p][i] = tandem::simt::tf32_rna(in[(p * 6 + i) * 32 + lane]);
    for (int i = 0; i < 2; ++i) b[p][i] = tandem::simt::tf32_rna(in[(p * 6 + 4 + i) * 32 + lane]);
  }
  float main1[4] = {1.0f, -2.0f, 0.5f, 3.0f}, small1[4] = {0.25f, 0.0f, -0.125f, 1e-3f};
  float main2[4] = {1.0f, -2.0f, 0.5f, 3.0f}, small2[4] = {0.25f, 0.0f, -0.125f, 1e-3f};
  tandem::simt::mma_tf32_split<AParts, BParts>(main1, small1, a, b);
  tandem::simt::mma_tf32(main2, a[0], b[0], main2);
  if (BParts == 3) tandem::simt::mma_tf32(small2, a[0], b[1], small2);
  if (BParts == 3) tandem::simt::mma_tf32(small2, a[0], b[2], small2);
  if (AParts == 3) tandem::simt::mma_tf32(small2, a[1], b[0], small2);
  if (AParts == 3 && BParts == 3) tandem::simt::mma_tf32(small2, a[1], b[1], small2);
  if (AParts == 3) tandem::simt::mma_tf32(small2, a[2], b[0], small2);
  for (int i = 0; i < 4; ++i) {
    out[(0 * 4 + i) * 32 + lane] = main1[i], out[(1 * 4 + i) * 32 + lane] = small1[i];
    out[(2 * 4 + i) * 32 + lane] = main2[i], out[(3 * 4 + i) * 32 + lane] = small2[i];
  }
}

TEST(Simt, SplitTf32StepIsItsProductsOneByOne) {
  std::mt19937 g(11);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> in(18 * 32), out(16 * 32);
  for (auto& v : in) v = nd(g);
  for (int form = 0; form < 3; ++form) {  // A parts, B parts: (1, 3) (3, 3) (3, 1)
    void (*kernel)(const float*, float*) = form == 0   ? split_step_both_ways<1, 3>
                                           : form == 1 ? split_step_both_ways<3, 3>
                                                       : split_step_both_ways<3, 1>;
    TANDEM_LAUNCH(kernel, 1, 32, 0, nullptr)(in.data(), out.data());
    for (int i = 0; i < 8 * 32; ++i) ASSERT_EQ(out[i], out[8 * 32 + i]) << "form " << form << ", value " << i;
  }
}

// cvt.rna.tf32.f32: 10 fraction bits kept, to nearest, ties away from zero (in magnitude,
// for either sign); infinities and NaNs unchanged.
TEST(Simt, Tf32RoundingIsToNearestWithTiesAway) {
  auto f = [](uint32_t u) {
    float x;
    std::memcpy(&x, &u, 4);
    return x;
  };
  using tandem::simt::tf32_rna;
  EXPECT_EQ(tf32_rna(1.0f), 0x3f800000u);
  EXPECT_EQ(tf32_rna(f(0x3f800fffu)), 0x3f800000u);  // below half of the last kept bit
  EXPECT_EQ(tf32_rna(f(0x3f801000u)), 0x3f802000u);  // a tie: away from zero
  EXPECT_EQ(tf32_rna(f(0xbf801000u)), 0xbf802000u);  // negative tie: away from zero too
  EXPECT_EQ(tf32_rna(f(0x3f801001u)), 0x3f802000u);
  EXPECT_EQ(tf32_rna(f(0x3fffffffu)), 0x40000000u);  // carries into the exponent
  EXPECT_EQ(tf32_rna(f(0x7f800000u)), 0x7f800000u);  // +inf
  EXPECT_EQ(tf32_rna(f(0x7fc00001u)), 0x7fc00001u);  // NaN (payload kept)
  // A value and its TF32 rounding differ by at most half of 2^-10 relative.
  for (float x : {3.14159265f, -2.7182818f, 1e-30f, 6.5e4f}) {
    const float r = f(tf32_rna(x));
    EXPECT_LE(std::fabs(double(r) - x), std::ldexp(std::fabs(double(x)), -11)) << x;
  }
}

__global__ void mma_in_partial_warp(int* out) {
  const uint32_t a[4] = {1, 1, 1, 1}, b[2] = {1, 1};
  const int c[4] = {0, 0, 0, 0};
  int d[4];
  tandem::simt::mma_s8<32>(d, a, b, c);
  out[threadIdx.x] = d[0];
}

TEST(Simt, MmaNeedsTheWholeWarp) {
  std::vector<int> out(20);
  EXPECT_THROW(TANDEM_LAUNCH(mma_in_partial_warp, 1, 20, 0, nullptr)(out.data()), std::logic_error);
}

__global__ void fill_dynamic_shared(int* out) {
  TANDEM_DYNAMIC_SHARED(int, buf);
  buf[threadIdx.x] = static_cast<int>(threadIdx.x);
  __syncthreads();
  out[threadIdx.x] = buf[(threadIdx.x + 1) % blockDim.x];
}
__global__ void fill_dynamic_shared_granted(int* out) {
  TANDEM_DYNAMIC_SHARED(int, buf);
  buf[threadIdx.x] = static_cast<int>(threadIdx.x);
  __syncthreads();
  out[threadIdx.x] = buf[(threadIdx.x + 1) % blockDim.x];
}

// 48 KiB of dynamic shared memory without asking; more only after cudaFuncSetAttribute,
// per kernel, up to 227 KiB: what a GPU enforces.
TEST(Simt, DynamicSharedMemoryAbove48KiBMustBeGranted) {
  std::vector<int> out(64);
  TANDEM_LAUNCH(fill_dynamic_shared, 1, 64, 48 * 1024, nullptr)(out.data());
  EXPECT_EQ(out[63], 0);
  EXPECT_THROW(TANDEM_LAUNCH(fill_dynamic_shared, 1, 64, 48 * 1024 + 4, nullptr)(out.data()), std::invalid_argument);
  EXPECT_EQ(cudaFuncSetAttribute(fill_dynamic_shared_granted, cudaFuncAttributeMaxDynamicSharedMemorySize, 100 * 1024),
            cudaSuccess);
  TANDEM_LAUNCH(fill_dynamic_shared_granted, 1, 64, 100 * 1024, nullptr)(out.data());
  EXPECT_EQ(out[0], 1);
  EXPECT_THROW(TANDEM_LAUNCH(fill_dynamic_shared_granted, 1, 64, 100 * 1024 + 4, nullptr)(out.data()),
               std::invalid_argument);
  EXPECT_THROW(TANDEM_LAUNCH(fill_dynamic_shared, 1, 64, 100 * 1024, nullptr)(out.data()), std::invalid_argument)
      << "the grant is the other kernel's";
  EXPECT_THROW(cudaFuncSetAttribute(fill_dynamic_shared, cudaFuncAttributeMaxDynamicSharedMemorySize, 228 * 1024),
               std::invalid_argument);
}

TEST(Simt, HalfConversionsAreRoundToNearestEven) {
  EXPECT_EQ(__half_as_ushort(__float2half_rn(1.0f)), 0x3c00);
  EXPECT_EQ(__half_as_ushort(__float2half_rn(65504.0f)), 0x7bff);
  EXPECT_EQ(__half_as_ushort(__float2half_rn(65520.0f)), 0x7c00);  // rounds up to inf
  EXPECT_EQ(__half_as_ushort(__float2half_rn(1.0f + 1.0f / 2048)), 0x3c00);  // tie to even
  EXPECT_EQ(__half_as_ushort(__float2half_rn(1.0f + 3.0f / 2048)), 0x3c02);  // tie to even (up)
  EXPECT_EQ(__half_as_ushort(__float2half_rn(5.960464477539063e-08f)), 0x0001);  // smallest subnormal
  EXPECT_EQ(__half2float(__ushort_as_half(0x0001)), 5.960464477539063e-08f);
  EXPECT_EQ(__half2float(__ushort_as_half(0xc000)), -2.0f);
  EXPECT_TRUE(std::isnan(__half2float(__float2half_rn(NAN))));
  // Round trip of every half value.
  for (unsigned h = 0; h < 0x10000; ++h) {
    if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff)) continue;  // NaN payloads
    ASSERT_EQ(__half_as_ushort(__float2half_rn(__half2float(__ushort_as_half(static_cast<unsigned short>(h))))), h);
  }
  EXPECT_EQ(__float2int_rn(2.5f), 2);
  EXPECT_EQ(__float2int_rn(-3.5f), -4);
}

// ---- stream capture (simt/capture.hpp) -------------------------------------------------------

// y[i] = y[i] * a + b over n elements: the order of two launches matters, and a scalar
// argument shows whether the value recorded at capture or the one at replay is used.
__global__ void axpb(float* y, float a, float b, int n) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) y[i] = y[i] * a + b;
}

// A stream handle of the test's own (never dereferenced).
cudaStream_t test_stream(char& tag) { return reinterpret_cast<cudaStream_t>(&tag); }

TEST(Simt, CaptureRecordsLaunchesAndReplayRunsThemInOrder) {
  char tag = 0;
  cudaStream_t s = test_stream(tag);
  std::vector<float> y(70, 1.0f), direct(70, 1.0f);
  float a = 2.0f;
  tandem::simt::begin_capture(s);
  EXPECT_TRUE(tandem::simt::is_capturing(s));
  TANDEM_LAUNCH(axpb, 3, 32, 16, s)(y.data(), a, 1.0f, 70);
  a = 100.0f;  // changed after the launch was recorded: the recorded 2.0 counts
  TANDEM_LAUNCH(axpb, dim3(1), dim3(64), 0, s)(y.data(), 3.0f, -1, 64);  // -1 converted to the float parameter
  // Another stream is not captured: this launch runs now.
  TANDEM_LAUNCH(axpb, 3, 32, 0, nullptr)(direct.data(), 2.0f, 1.0f, 70);
  const tandem::simt::Graph g = tandem::simt::end_capture(s);
  EXPECT_FALSE(tandem::simt::is_capturing(s));
  EXPECT_EQ(y, std::vector<float>(70, 1.0f)) << "a captured launch must not run";
  EXPECT_EQ(direct[0], 3.0f);

  ASSERT_EQ(g.nodes().size(), 2u);
  const tandem::simt::GraphNode& n0 = g.nodes()[0];
  EXPECT_EQ(n0.kind, tandem::simt::GraphNode::Kind::Kernel);
  EXPECT_EQ(n0.kernel, reinterpret_cast<const void*>(&axpb));
  EXPECT_EQ(n0.cfg.grid.x, 3u);
  EXPECT_EQ(n0.cfg.block.x, 32u);
  EXPECT_EQ(n0.cfg.shmem, 16u);
  const auto* args = n0.arguments<float*, float, float, int>();
  ASSERT_NE(args, nullptr);
  EXPECT_EQ(std::get<0>(*args), y.data());
  EXPECT_EQ(std::get<1>(*args), 2.0f);
  EXPECT_EQ(std::get<3>(*args), 70);
  EXPECT_EQ(n0.arguments<int>(), nullptr) << "other parameter types";
  const auto* args1 = g.nodes()[1].arguments<float*, float, float, int>();
  ASSERT_NE(args1, nullptr);
  EXPECT_EQ(std::get<2>(*args1), -1.0f);

  // Replay == the same launches run directly, in the recorded order; twice == twice.
  g.replay();
  g.replay();
  std::vector<float> want(70, 1.0f);
  for (int rep = 0; rep < 2; ++rep)
    for (int i = 0; i < 70; ++i) {
      want[i] = want[i] * 2.0f + 1.0f;
      if (i < 64) want[i] = want[i] * 3.0f - 1.0f;
    }
  EXPECT_EQ(y, want);
}

TEST(Simt, CaptureRecordsCopiesAndMemsetsAndRefusesMisuse) {
  char tag = 0;
  cudaStream_t s = test_stream(tag);
  std::vector<int> a{1, 2, 3, 4}, b(4, 0);
  EXPECT_FALSE(tandem::simt::record_copy(s, b.data(), a.data(), sizeof(int) * 4)) << "not capturing: the caller copies";
  EXPECT_THROW(tandem::simt::end_capture(s), std::logic_error);
  tandem::simt::begin_capture(s);
  EXPECT_THROW(tandem::simt::begin_capture(s), std::logic_error);
  EXPECT_TRUE(tandem::simt::record_copy(s, b.data(), a.data(), sizeof(int) * 4));
  EXPECT_TRUE(tandem::simt::record_memset(s, a.data(), 0, sizeof(int) * 2));
  const tandem::simt::Graph g = tandem::simt::end_capture(s);
  ASSERT_EQ(g.nodes().size(), 2u);
  EXPECT_EQ(g.nodes()[0].kind, tandem::simt::GraphNode::Kind::Copy);
  EXPECT_EQ(g.nodes()[1].kind, tandem::simt::GraphNode::Kind::Memset);
  EXPECT_EQ(b, std::vector<int>(4, 0));
  a[3] = 40;  // a copy node reads its source when it runs
  g.replay();
  EXPECT_EQ(b, (std::vector<int>{1, 2, 3, 40}));
  EXPECT_EQ(a, (std::vector<int>{0, 0, 3, 40}));

  // A launch CUDA would refuse fails at the call and spoils the capture.
  tandem::simt::begin_capture(s);
  EXPECT_THROW(TANDEM_LAUNCH(axpb, 1, 2048, 0, s)(static_cast<float*>(nullptr), 1.0f, 0.0f, 0), std::invalid_argument);
  EXPECT_THROW(tandem::simt::end_capture(s), std::logic_error);
  EXPECT_FALSE(tandem::simt::is_capturing(s));
  // An invalidated capture, then aborted: the stream captures anew.
  tandem::simt::begin_capture(s);
  tandem::simt::invalidate_capture(s, "a test");
  tandem::simt::abort_capture(s);
  tandem::simt::begin_capture(s);
  EXPECT_TRUE(tandem::simt::end_capture(s).nodes().empty());
}

}  // namespace
