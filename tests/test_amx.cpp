// AMX: the model of the tile instructions (kernels/cpu/amx_tiles.hpp) does what Intel's
// reference says, faults where the CPU would, and the AMX kernels for tiled weights give the
// AVX-512 VNNI kernels' bits for every tiled type, every token count 1..64, row ranges that
// cut groups, and several matrices in one call. They run on the model here: natively on any
// AVX-512 machine, and compiled against SIMDe beside the emulated AVX-512 kernels on an AVX2
// one; where the CPU has AMX, the instructions themselves are checked against it.
// (Whole forward passes through the AMX path: test_forward_reference.cpp's batch
// invariance suite.)
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/cpu/amx_tiles.hpp"
#include "kernels/cpu/matmul_impl.hpp"
#include "kernels/cpu/pack_tiles.hpp"
#include "kernels/cpu/quant.hpp"
#include "tests/support/amx_model.hpp"
#include "tests/support/isa_levels.hpp"
#include "tests/support/random_blocks.hpp"

namespace tandem {
namespace {

namespace cpu = kernels::cpu;
namespace amx = kernels::cpu::amx;
using amx::AmxModel;
using cpu::AmxPath;

const DType kTiled[] = {DType::Q4_K, DType::Q6_K, DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q8_0};

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// The AVX-512 kernel set of the Avx512 level here, which the AMX kernels' bits must equal:
// the native one, or on an AVX2 CPU the emulated one (tests/support/isa_levels.hpp installs
// it); nullptr where there is neither.
const cpu::mm::IsaKernels* vnni_set() {
  test::avx512_emulated();
  if (const cpu::mm::IsaKernels* k = cpu::mm::avx512_kernels_for_testing()) return k;
  return cpu::detected_isa() == cpu::Isa::Avx512 ? cpu::mm::avx512_kernels() : nullptr;
}

// Installs the model's kernels for that set; restores the default AMX path and kernel level
// when a test ends.
struct AmxGuard {
  AmxGuard() {
    vnni_set();
    test::install_amx_model();
  }
  ~AmxGuard() {
    cpu::force_amx(cpu::detected_amx());
    cpu::force_isa(cpu::detected_isa());
  }
};

// The AMX kernels are AVX-512 code around the tile products: without an AVX-512 level, native
// or emulated (a build without SIMDe on a CPU without AVX-512), there is nothing to run.
#define REQUIRE_AVX512()                                                                       \
  do {                                                                                          \
    if (!vnni_set()) {                                                                          \
      GTEST_SKIP() << "no AVX-512 on this CPU and no emulated AVX-512 kernels in this build";   \
    }                                                                                           \
  } while (0)

// ---- the model ---------------------------------------------------------------------------

// C (2 x 3 int32) += A (2 rows x 8 bytes) . B (2 rows x 12 bytes), tiles 0, 1, 2.
amx::TileConfig small_config() {
  amx::TileConfig c;
  amx::set_tile(c, 0, 2, 12);
  amx::set_tile(c, 1, 2, 8);
  amx::set_tile(c, 2, 2, 12);
  return c;
}

// Every byte 0xff: -1 signed, 255 unsigned; each output sums 8 products.
template <int Kind>
std::vector<int32_t> all_ones_product(int32_t start) {
  AmxModel::config(small_config());
  std::vector<int32_t> c(6, start);
  const std::vector<uint8_t> a(16, 0xff), b(24, 0xff);
  AmxModel::load<0>(c.data(), 12);
  AmxModel::load<1>(a.data(), 8);
  AmxModel::load<2>(b.data(), 12);
  if constexpr (Kind == 0) AmxModel::dpbssd<0, 1, 2>();
  if constexpr (Kind == 1) AmxModel::dpbsud<0, 1, 2>();
  if constexpr (Kind == 2) AmxModel::dpbusd<0, 1, 2>();
  if constexpr (Kind == 3) AmxModel::dpbuud<0, 1, 2>();
  AmxModel::store<0>(c.data(), 12);
  AmxModel::release();
  return c;
}

TEST(AmxModel, BytesAreSignedOrUnsignedAsTheInstructionSays) {
  EXPECT_EQ(all_ones_product<0>(5), std::vector<int32_t>(6, 5 + 8));           // (-1)(-1) x 8
  EXPECT_EQ(all_ones_product<1>(5), std::vector<int32_t>(6, 5 - 8 * 255));     // (-1)(255)
  EXPECT_EQ(all_ones_product<2>(5), std::vector<int32_t>(6, 5 - 8 * 255));     // (255)(-1)
  EXPECT_EQ(all_ones_product<3>(5), std::vector<int32_t>(6, 5 + 8 * 65025));  // (255)(255)
}

// A by hand: row m of A holds 4-byte groups k, B row k holds output n's 4 bytes at 4n.
TEST(AmxModel, EachOutputIsItsRowOfATimesItsColumnOfB) {
  AmxModel::config(small_config());
  const int8_t a[2][8] = {{1, 2, 3, 4, 5, 6, 7, 8}, {-1, 0, 0, 0, 0, 0, 0, 2}};
  int8_t b[2][12] = {};
  for (int i = 0; i < 4; ++i) {
    b[0][i] = 1;          // output 0: group 0 all ones
    b[1][4 + i] = 10;     // output 1: group 1 tens
    b[0][8 + i] = static_cast<int8_t>(i);  // output 2: group 0 weighted 0, 1, 2, 3
  }
  int32_t c[2][3] = {};
  AmxModel::zero<0>();
  AmxModel::load<1>(a, 8);
  AmxModel::load<2>(b, 12);
  AmxModel::dpbssd<0, 1, 2>();
  AmxModel::store<0>(c, 12);
  AmxModel::release();
  EXPECT_EQ(c[0][0], 1 + 2 + 3 + 4);
  EXPECT_EQ(c[0][1], 10 * (5 + 6 + 7 + 8));
  EXPECT_EQ(c[0][2], 0 * 1 + 1 * 2 + 2 * 3 + 3 * 4);
  EXPECT_EQ(c[1][0], -1);
  EXPECT_EQ(c[1][1], 20);
  EXPECT_EQ(c[1][2], 0);
}

// Bytes beyond a load's configured rows and columns are zero: a 2 x 4 A, configured as such,
// loaded from memory whose other bytes are not zero, contributes only its own.
TEST(AmxModel, LoadsTakeOnlyTheConfiguredShape) {
  amx::TileConfig c;
  amx::set_tile(c, 0, 2, 4);
  amx::set_tile(c, 1, 2, 4);
  amx::set_tile(c, 2, 1, 4);
  AmxModel::config(c);
  std::vector<uint8_t> a(64, 3), b(64, 1);
  int32_t out[4] = {-7, -7, -7, -7};
  AmxModel::zero<0>();
  AmxModel::load<1>(a.data(), 4);
  AmxModel::load<2>(b.data(), 4);
  AmxModel::dpbuud<0, 1, 2>();
  AmxModel::store<0>(out, 4);
  AmxModel::release();
  EXPECT_EQ(out[0], 12);
  EXPECT_EQ(out[1], 12);
  EXPECT_EQ(out[2], -7) << "stored past the configured rows";
}

void product_after(const amx::TileConfig& c) {
  AmxModel::config(c);
  AmxModel::dpbssd<0, 1, 2>();
}

TEST(AmxModelDeathTest, FaultsWhereTheCpuWould) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        AmxModel::release();
        AmxModel::zero<0>();
      },
      "before ldtilecfg");
  amx::TileConfig k_mismatch = small_config();
  amx::set_tile(k_mismatch, 1, 2, 12);  // A's 3 groups against B's 2 rows
  EXPECT_DEATH(product_after(k_mismatch), "B's rows differ");
  amx::TileConfig m_mismatch = small_config();
  amx::set_tile(m_mismatch, 1, 3, 8);
  EXPECT_DEATH(product_after(m_mismatch), "A's rows differ");
  amx::TileConfig too_big;
  amx::set_tile(too_big, 0, 17, 64);
  EXPECT_DEATH(AmxModel::config(too_big), "larger than 16 rows");
  EXPECT_DEATH(
      {
        const uint8_t bytes[64] = {};
        AmxModel::config(small_config());
        AmxModel::load<3>(bytes, 64);
      },
      "not configured");
}

// ---- the kernels -------------------------------------------------------------------------

struct Tiled {
  DType t;
  int64_t R, C;
  std::vector<uint8_t> w;  // in 16-row tiles
  std::vector<float> x;
  Tiled(DType t_, int64_t R_, int64_t C_, uint64_t seed) : t(t_), R(R_), C(C_) {
    const std::vector<uint8_t> file = test::random_blocks(t, R * C, seed);
    w.resize(file.size());
    cpu::ThreadPool pool(2);
    cpu::tile_rows(pool, t, file.data(), row_bytes(t, C), w.data(), R, C);
    x.resize(static_cast<size_t>(100 * C));
    uint64_t s = seed * 0x9e3779b97f4a7c15ull + 3;
    for (auto& v : x) {
      s = s * 6364136223846793005ull + 1442695040888963407ull;
      v = static_cast<float>(static_cast<int64_t>(s >> 33) % 2001 - 1000) / 300.0f;
    }
  }
  std::vector<float> run(cpu::ThreadPool& pool, int64_t N, int64_t first = 0) const {
    std::vector<float> y(static_cast<size_t>(N * R), -1.0f);
    const cpu::MatmulJob job{t, w.data(), row_bytes(t, C), R, y.data(), R, false, true};
    cpu::matmul_multi(pool, &job, 1, C, &x[static_cast<size_t>(first * C)], C, N);
    return y;
  }
};

// Every tiled type, 1..64 and 100 tokens (one and several A tiles, short last ones; the
// plain and the folded K-quant kernels; the driver's calls of up to 64 tokens), whole groups
// and the rows after them, odd block counts: the AMX
// kernels (on the model) against the VNNI kernels, bit for bit, on 1 and 2 threads. The
// model counts its tile products, so a pass that silently kept the VNNI kernels fails.
TEST(AmxKernels, GiveTheVnniBitsForEveryTypeAndTokenCount) {
  REQUIRE_AVX512();
  AmxGuard guard;
  cpu::force_isa(cpu::Isa::Avx512);
  cpu::ThreadPool pool1(1), pool2(2);
  for (DType t : kTiled) {
    const int64_t C = dtype_info(t).block_size == 256 ? 768 : 11 * 32;  // 3 super-blocks; 11 blocks
    const Tiled m(t, 53, C, 17);  // 3 groups of 16 and 5 rows as stored
    cpu::force_amx(AmxPath::Off);
    const std::vector<float> want = m.run(pool2, 100);
    std::vector<int64_t> counts;
    for (int64_t N = 1; N <= 64; ++N) counts.push_back(N);
    counts.push_back(100);  // two calls: 64 tokens and 36
    for (const int64_t N : counts) {
      SCOPED_TRACE(std::string(dtype_name(t)) + " N=" + std::to_string(N));
      cpu::force_amx(AmxPath::Off);
      const std::vector<float> vnni = m.run(pool1, N);
      cpu::force_amx(AmxPath::Model);
      const uint64_t before = AmxModel::products.load();
      const std::vector<float> got = m.run(N % 2 ? pool1 : pool2, N);
      const uint64_t ran = AmxModel::products.load() - before;
      if (N >= cpu::mm::kAmxMinTokens) EXPECT_GT(ran, 0u) << "the AMX kernels did not run";
      else EXPECT_EQ(ran, 0u) << "fewer tokens than kAmxMinTokens went to the tiles";
      for (size_t i = 0; i < got.size(); ++i) {
        ASSERT_EQ(bits(got[i]), bits(vnni[i])) << "element " << i << " (token " << i / 53 << ", row " << i % 53 << ")";
        ASSERT_EQ(bits(got[i]), bits(want[i])) << "not the 100-token pass's bits at element " << i;
      }
    }
  }
}

// Row ranges that start and end inside groups (the RowsFn contract), on passes of 20 and 40
// tokens (full A tiles and a short one; the K-quants' plain and folded kernels).
TEST(AmxKernels, RowRangesInsideGroupsGiveTheSameBits) {
  REQUIRE_AVX512();
  AmxGuard guard;
  cpu::force_isa(cpu::Isa::Avx512);
  for (const DType t : kTiled)
    for (const int64_t N : {20, 40}) {
      SCOPED_TRACE(std::string(dtype_name(t)) + " N=" + std::to_string(N));
      const int64_t R = 53, C = dtype_info(t).block_size == 256 ? 512 : 96;
      const Tiled m(t, R, C, 5);
      const cpu::mm::RowsFn fn = test::amx_model_kernels()(t);
      ASSERT_NE(fn, nullptr);
      const cpu::mm::RowsFn vnni = vnni_set()->rows_tiled(t);
      const cpu::mm::ActLayout l = cpu::mm::act_layout(cpu::mm::family(t), C);
      std::vector<uint8_t> xq(l.row_bytes * N + 64);
      auto* xq64 = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(xq.data()) + 63) & ~uintptr_t{63});
      for (int64_t i = 0; i < N; ++i)
        vnni_set()->quant(t)(&m.x[static_cast<size_t>(i * C)], l, xq64 + l.row_bytes * i);
      cpu::mm::Args a;
      a.wt = t;
      a.w = m.w.data();
      a.w_stride = row_bytes(t, C);
      a.R = R;
      a.C = C;
      a.xq = xq64;
      a.xl = l;
      a.ldy = R;
      std::vector<float> whole(static_cast<size_t>(R * N), -1.0f), split(whole.size(), -2.0f);
      a.y = whole.data();
      for (int64_t t0 = 0; t0 < N; t0 += cpu::mm::kMaxTokens) vnni(a, 0, R, t0, std::min(N, t0 + cpu::mm::kMaxTokens));
      a.y = split.data();
      const int64_t cuts[] = {0, 5, 16, 27, 45, 50, R};
      for (size_t c = 0; c + 1 < std::size(cuts); ++c) fn(a, cuts[c], cuts[c + 1], 0, N);
      for (size_t i = 0; i < whole.size(); ++i) ASSERT_EQ(bits(split[i]), bits(whole[i])) << "element " << i;
    }
}

// q/k/v-style calls: several matrices of different types in one call (one quantization per
// activation layout), each with its own matmul's bits.
TEST(AmxKernels, SeveralMatricesInOneCall) {
  REQUIRE_AVX512();
  AmxGuard guard;
  cpu::force_isa(cpu::Isa::Avx512);
  cpu::ThreadPool pool(2);
  const int64_t C = 512, N = 9;
  const Tiled q(DType::Q4_K, 48, C, 1), k(DType::Q6_K, 32, C, 2), v(DType::Q8_0, 37, C, 3);
  const float* x = q.x.data();  // the same activations for all three
  auto jobs = [&](std::vector<float>& yq, std::vector<float>& yk, std::vector<float>& yv) {
    yq.assign(static_cast<size_t>(q.R * N), -1.0f);
    yk.assign(static_cast<size_t>(k.R * N), -1.0f);
    yv.assign(static_cast<size_t>(v.R * N), -1.0f);
    return std::vector<cpu::MatmulJob>{{q.t, q.w.data(), row_bytes(q.t, C), q.R, yq.data(), q.R, false, true},
                                       {k.t, k.w.data(), row_bytes(k.t, C), k.R, yk.data(), k.R, false, true},
                                       {v.t, v.w.data(), row_bytes(v.t, C), v.R, yv.data(), v.R, false, true}};
  };
  std::vector<float> rq, rk, rv, yq, yk, yv;
  cpu::force_amx(AmxPath::Off);
  for (const cpu::MatmulJob& j : jobs(rq, rk, rv)) cpu::matmul_multi(pool, &j, 1, C, x, C, N);
  cpu::force_amx(AmxPath::Model);
  const std::vector<cpu::MatmulJob> all = jobs(yq, yk, yv);
  cpu::matmul_multi(pool, all.data(), 3, C, x, C, N);
  for (size_t i = 0; i < yq.size(); ++i) ASSERT_EQ(bits(yq[i]), bits(rq[i])) << "Q4_K element " << i;
  for (size_t i = 0; i < yk.size(); ++i) ASSERT_EQ(bits(yk[i]), bits(rk[i])) << "Q6_K element " << i;
  for (size_t i = 0; i < yv.size(); ++i) ASSERT_EQ(bits(yv[i]), bits(rv[i])) << "Q8_0 element " << i;
}

// Q6_K's kernel, off by one ulp in one element of calls of 24 tokens or more (the folded
// kernel's): what the check before using the CPU's tiles must catch.
void off_when_folded(const cpu::mm::Args& a, int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
  test::amx_model_kernels()(DType::Q6_K)(a, r0, r1, t0, t1);
  if (t1 - t0 >= 24) a.y[t0 * a.ldy + r0] = std::nextafter(a.y[t0 * a.ldy + r0], 1e30f);
}
cpu::mm::RowsFn model_but_q6k_folded(DType t) {
  return t == DType::Q6_K ? off_when_folded : test::amx_model_kernels()(t);
}
cpu::mm::RowsFn vnni_tiles(DType t) { return vnni_set()->rows_tiled(t); }

// The check amx.cpp runs before using the CPU's tiles (against the VNNI kernels): the model's
// kernels pass it, and a kernel off by one ulp in its folded calls only fails it.
TEST(AmxPath, TheCheckBeforeUseTellsKernelsApart) {
  REQUIRE_AVX512();
  EXPECT_TRUE(cpu::mm::tiled_kernels_agree(test::amx_model_kernels(), vnni_tiles, vnni_set()));
  EXPECT_FALSE(cpu::mm::tiled_kernels_agree(model_but_q6k_folded, vnni_tiles, vnni_set()));
}

// The path's choice: TANDEM_AMX=0 and CPUs without AMX default to the VNNI kernels; the
// model never runs unless asked for; Hardware cannot be forced where there is none.
TEST(AmxPath, DefaultsAndForcing) {
  AmxGuard guard;
  const char* env = std::getenv("TANDEM_AMX");
  const bool off = env && std::string(env) == "0";
  const bool hw = cpu::amx_available() && cpu::detected_isa() == cpu::Isa::Avx512;
  EXPECT_EQ(cpu::detected_amx(), !off && hw ? AmxPath::Hardware : AmxPath::Off);
  EXPECT_NE(cpu::detected_amx(), AmxPath::Model);
  if (!cpu::amx_available()) {
    EXPECT_THROW(cpu::force_amx(AmxPath::Hardware), std::invalid_argument);
  }
  // The model needs an AVX-512 level: the CPU's, or the tests' emulated one.
  if (cpu::detected_isa() != cpu::Isa::Avx512 && !cpu::mm::avx512_kernels_for_testing()) {
    EXPECT_THROW(cpu::force_amx(AmxPath::Model), std::invalid_argument);
  } else {
    EXPECT_NO_THROW(cpu::force_amx(AmxPath::Model));
  }
  EXPECT_EQ(cpu::amx_name(AmxPath::Hardware), "amx");
}

// Where the CPU has AMX: the instructions against the model, on the kernels' own shapes.
TEST(AmxHardware, MatchesTheModel) {
  if (!cpu::amx_available() || cpu::detected_isa() != cpu::Isa::Avx512)
    GTEST_SKIP() << "no AMX on this CPU: the tile instructions themselves are not run here";
  AmxGuard guard;
  cpu::force_isa(cpu::Isa::Avx512);
  cpu::ThreadPool pool(2);
  for (DType t : kTiled) {
    const Tiled m(t, 64, 512, 9);
    for (int64_t N : {4, 9, 16, 17, 32}) {
      cpu::force_amx(AmxPath::Model);
      const auto want = m.run(pool, N);
      cpu::force_amx(AmxPath::Hardware);
      const auto got = m.run(pool, N);
      for (size_t i = 0; i < got.size(); ++i)
        ASSERT_EQ(bits(got[i]), bits(want[i])) << dtype_name(t) << " N=" << N << " element " << i;
    }
  }
}

}  // namespace
}  // namespace tandem
