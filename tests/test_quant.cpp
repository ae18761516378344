// Weight types: reference dequantization against gguf-py, fast dequantization and every
// matmul kernel against the references, and the batch invariance speculative decoding
// needs (N tokens at once == N single-token calls, bit for bit).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/matmul_impl.hpp"
#include "kernels/cpu/pack_q32.hpp"
#include "kernels/cpu/pack_tiles.hpp"
#include "kernels/cpu/quant.hpp"
#include "kernels/cpu/thread_pool.hpp"
#include "tests/support/isa_levels.hpp"
#include "tests/support/paths.hpp"
#include "tests/support/random_blocks.hpp"

namespace tandem {
namespace {

using kernels::cpu::Isa;
namespace cpu = kernels::cpu;

const DType kAllTypes[] = {DType::F32,  DType::F16,  DType::BF16, DType::Q4_0, DType::Q4_1,
                           DType::Q5_0, DType::Q5_1, DType::Q8_0, DType::Q2_K, DType::Q3_K,
                           DType::Q4_K, DType::Q5_K, DType::Q6_K};

using test::avx512_emulated;
using test::IsaGuard;
using test::supported_isas;

int block_of(DType t) { return static_cast<int>(dtype_info(t).block_size); }
bool is_float(DType t) { return t == DType::F32 || t == DType::F16 || t == DType::BF16; }
// Activation quantization block: 256 for the K-quants, 32 for the other block types.
int act_block(DType t) { return block_of(t) == 256 ? 256 : 32; }

std::vector<float> random_floats(int64_t n, uint64_t seed, float sd = 1.0f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.0f, sd);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& f : v) f = nd(rng);
  return v;
}

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// Distance in units in the last place (both finite, same sign or zero).
int64_t ulp_diff(float a, float b) {
  auto key = [](float f) {
    const int64_t u = bits(f);
    return (u & 0x80000000) ? -(u & 0x7fffffff) : u;
  };
  return std::llabs(key(a) - key(b));
}

void write_file(const std::string& path, const void* data, size_t n) {
  std::ofstream f(path, std::ios::binary);
  f.write(static_cast<const char*>(data), static_cast<std::streamsize>(n));
  ASSERT_TRUE(f.good()) << path;
}

std::vector<float> read_floats(const std::string& path) {
  std::ifstream f(path, std::ios::binary | std::ios::ate);
  const auto n = static_cast<size_t>(f.tellg());
  f.seekg(0);
  std::vector<float> v(n / 4);
  f.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(n));
  return v;
}

// ---- dequantization ------------------------------------------------------------------------

TEST(Dequant, ReferenceMatchesGgufPy) {
  const std::string dir = test::scratch_dir("quant-dequant");
  constexpr int64_t kN = 2048;  // 8 K-quant blocks, 64 small blocks
  const uint64_t seeds[] = {1, 2, 3};
  struct Job {
    DType t;
    uint64_t seed;
    std::vector<uint8_t> data;
    std::string out;
  };
  std::vector<Job> jobs;
  std::string args;
  for (DType t : kAllTypes)
    for (uint64_t s : seeds) {
      Job j{t, s, test::random_blocks(t, kN, s, s == 3 ? 100.0f : 1.0f), ""};
      const std::string base = dir + "/" + dtype_name(t) + "_" + std::to_string(s);
      write_file(base + ".bin", j.data.data(), j.data.size());
      j.out = base + ".f32";
      args += std::string(" ") + dtype_name(t) + ":" + base + ".bin:" + j.out;
      jobs.push_back(std::move(j));
    }
  std::string log;
  ASSERT_EQ(test::run_python("tests/python/dequant_ref.py", args + " 2>&1", &log), 0) << log;

  for (const Job& j : jobs) {
    SCOPED_TRACE(std::string(dtype_name(j.t)) + " seed " + std::to_string(j.seed));
    const std::vector<float> want = read_floats(j.out);
    ASSERT_EQ(want.size(), static_cast<size_t>(kN));
    std::vector<float> got(kN);
    cpu::dequantize_row_ref(j.t, j.data.data(), got.data(), kN);
    int exact = 0;
    for (int64_t i = 0; i < kN; ++i) {
      ASSERT_TRUE(std::isfinite(got[i])) << "element " << i;
      // Same float operations in the same order: identical except where numpy's f16
      // handling could round differently (allowed: 1 ulp, and it has not happened).
      ASSERT_LE(ulp_diff(got[i], want[i]), 1) << "element " << i << ": " << got[i] << " vs " << want[i];
      exact += bits(got[i]) == bits(want[i]);
    }
    EXPECT_EQ(exact, kN);
  }
}

// ---- quantization (re-quantizing a draft's weights at load) ---------------------------------

const DType kQuantizable[] = {DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q8_0};

// Rows with what a quantizer must get right: random values at several scales, an all-zero
// block, a block of negative zeros, a negative extreme, equal magnitudes of both signs,
// values on the rounding midpoints, one huge value among small ones.
std::vector<float> quantizer_cases(uint64_t seed) {
  std::mt19937 g(static_cast<uint32_t>(seed));
  std::normal_distribution<float> n(0.0f, 1.0f);
  std::vector<float> v;
  for (float scale : {1.0f, 0.01f, 300.0f})
    for (int i = 0; i < 32 * 8; ++i) v.push_back(scale * n(g));
  for (int i = 0; i < 32; ++i) v.push_back(0.0f);
  for (int i = 0; i < 32; ++i) v.push_back(-0.0f);
  for (int i = 0; i < 32; ++i) v.push_back(i == 5 ? -4.0f : 0.25f * static_cast<float>(i % 7));
  for (int i = 0; i < 32; ++i) v.push_back(i % 2 ? 2.0f : -2.0f);
  for (int i = 0; i < 32; ++i) v.push_back(0.5f * static_cast<float>(i - 16));  // code midpoints
  for (int i = 0; i < 32; ++i) v.push_back(i == 31 ? 1e4f : 1e-3f * static_cast<float>(i));
  return v;
}

TEST(Quantize, ReferenceMatchesGgufPyBitForBit) {
  const std::string dir = test::scratch_dir("quant-quantize");
  struct Job {
    DType t;
    std::vector<float> x;
    std::string out;
  };
  std::vector<Job> jobs;
  std::string args;
  for (DType t : kQuantizable)
    for (uint64_t s : {1u, 2u}) {
      Job j{t, quantizer_cases(s), ""};
      const std::string base = dir + "/" + dtype_name(t) + "_" + std::to_string(s);
      write_file(base + ".f32", j.x.data(), j.x.size() * sizeof(float));
      j.out = base + ".bin";
      args += std::string(" ") + dtype_name(t) + ":" + base + ".f32:" + j.out;
      jobs.push_back(std::move(j));
    }
  std::string log;
  ASSERT_EQ(test::run_python("tests/python/quantize_ref.py", args + " 2>&1", &log), 0) << log;
  for (const Job& j : jobs) {
    SCOPED_TRACE(dtype_name(j.t));
    const int64_t n = static_cast<int64_t>(j.x.size());
    std::vector<uint8_t> got(static_cast<size_t>(n / 32) * dtype_info(j.t).type_size);
    cpu::quantize_row_ref(j.t, j.x.data(), got.data(), n);
    std::ifstream f(j.out, std::ios::binary);
    const std::vector<uint8_t> want((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    ASSERT_EQ(want.size(), got.size());
    const size_t bs = dtype_info(j.t).type_size;
    for (size_t b = 0; b < got.size() / bs; ++b)
      ASSERT_TRUE(std::equal(got.begin() + b * bs, got.begin() + (b + 1) * bs, want.begin() + b * bs))
          << "block " << b;
  }
}

// The dispatched quantizer (what re-quantizing a draft at load runs) writes the reference's
// blocks at every kernel level: the quantizer cases, random rows, and the blocks the fast
// path hands back to the reference (NaN, infinities, a scale whose inverse overflows).
TEST(Quantize, DispatchedQuantizerIsTheReferenceBitForBit) {
  std::vector<float> x = quantizer_cases(3);
  std::mt19937 g(5);
  std::uniform_real_distribution<float> u(-3.0f, 3.0f);
  for (int i = 0; i < 32 * 64; ++i) x.push_back(u(g));
  for (int i = 0; i < 32; ++i) x.push_back(i == 9 ? 2.5f : i == 4 ? -2.5f : u(g));  // equal magnitudes: the first wins
  for (int i = 0; i < 32; ++i) x.push_back(i == 0 ? -0.0f : 0.0f);
  for (int i = 0; i < 32; ++i) x.push_back(1e-44f * static_cast<float>(i % 3));  // subnormal: 1/d overflows
  for (int i = 0; i < 32; ++i) x.push_back(i == 7 ? std::nanf("") : 1.0f);
  for (int i = 0; i < 32; ++i) x.push_back(i == 0 ? -INFINITY : 0.5f);
  for (int i = 0; i < 32; ++i) x.push_back(3e38f * (i % 2 ? 1.0f : -0.75f));
  const int64_t n = static_cast<int64_t>(x.size());
  struct Restore {
    ~Restore() { cpu::force_isa(cpu::detected_isa()); }
  } restore;
  for (Isa isa : test::supported_isas()) {
    cpu::force_isa(isa);
    for (DType t : kQuantizable) {
      SCOPED_TRACE(cpu::isa_name(isa) + " " + dtype_name(t));
      const size_t bytes = static_cast<size_t>(n / 32) * dtype_info(t).type_size;
      std::vector<uint8_t> want(bytes), got(bytes, 0xAA);
      cpu::quantize_row_ref(t, x.data(), want.data(), n);
      cpu::quantize_row(t, x.data(), got.data(), n);
      for (int64_t b = 0; b < n / 32; ++b)
        ASSERT_EQ(0, std::memcmp(got.data() + b * dtype_info(t).type_size, want.data() + b * dtype_info(t).type_size,
                                 dtype_info(t).type_size))
            << "block " << b;
    }
  }
}

// Quantize, dequantize: every value within one step of the block's scale (half a step but
// for the clipped extreme of the symmetric types), and quantizing the result again gives
// the same blocks (the codes are a fixed point).
TEST(Quantize, RoundTripStaysWithinAStepAndIsStable) {
  const std::vector<float> x = quantizer_cases(9);
  const int64_t n = static_cast<int64_t>(x.size());
  for (DType t : kQuantizable) {
    SCOPED_TRACE(dtype_name(t));
    std::vector<uint8_t> q(static_cast<size_t>(n / 32) * dtype_info(t).type_size), q2(q.size());
    std::vector<float> y(x.size()), y2(x.size());
    cpu::quantize_row_ref(t, x.data(), q.data(), n);
    cpu::dequantize_row_ref(t, q.data(), y.data(), n);
    const float levels = t == DType::Q8_0 ? 127.0f : (t == DType::Q5_0 || t == DType::Q5_1) ? 15.5f : 7.5f;
    for (int64_t b = 0; b < n / 32; ++b) {
      float lo = x[b * 32], hi = lo, amax = 0;
      for (int j = 0; j < 32; ++j) {
        lo = std::min(lo, x[b * 32 + j]);
        hi = std::max(hi, x[b * 32 + j]);
        amax = std::max(amax, std::fabs(x[b * 32 + j]));
      }
      const bool minmax = t == DType::Q4_1 || t == DType::Q5_1;
      // One step, plus the f16 rounding of the scale (and minimum) over the whole range.
      const float step = minmax ? (hi - lo) / (2 * levels) : amax / levels;
      const float slack = 2e-3f * std::max(amax, hi - lo) + 1e-30f;
      for (int j = 0; j < 32; ++j)
        ASSERT_LE(std::fabs(y[b * 32 + j] - x[b * 32 + j]), step + slack) << "block " << b << " element " << j;
    }
    cpu::quantize_row_ref(t, y.data(), q2.data(), n);
    cpu::dequantize_row_ref(t, q2.data(), y2.data(), n);
    EXPECT_EQ(y2, y);
  }
  std::vector<uint8_t> out(256);
  EXPECT_THROW(cpu::quantize_row_ref(DType::Q6_K, x.data(), out.data(), 256), std::invalid_argument);
  EXPECT_THROW(cpu::quantize_row_ref(DType::Q8_0, x.data(), out.data(), 33), std::invalid_argument);
  EXPECT_THROW(cpu::quantize_row_ref(DType::Q4_K, x.data(), out.data(), 288), std::invalid_argument);
  EXPECT_FALSE(cpu::can_quantize_to(DType::Q6_K));
  EXPECT_TRUE(cpu::can_quantize_to(DType::Q4_0));
  EXPECT_TRUE(cpu::can_quantize_to(DType::Q4_K));
}

// Q4_K has no gguf-py quantizer to match: its blocks decode (through the reference
// dequantizer, so the packing of scales and codes is checked too) within a step of each
// 32-element group's range plus the 6-bit rounding of its scale and minimum, and as close
// overall as Q4_1's per-32 blocks (which keep full fp16 scales) on weight-like rows.
TEST(Quantize, Q4KDecodesWithinAStepAndAsCloseAsQ4_1) {
  std::mt19937 g(11);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  std::vector<float> x;
  for (int i = 0; i < 256 * 64; ++i) x.push_back(normal(g) * (i % 2048 < 256 ? 8.0f : 1.0f));  // a block of outliers
  for (int i = 0; i < 256; ++i) x.push_back(0.0f);
  for (int i = 0; i < 256; ++i) x.push_back(i < 32 ? 1.0f : 0.25f);  // positive groups: a minimum of zero
  const int64_t n = static_cast<int64_t>(x.size());
  std::vector<uint8_t> qk(static_cast<size_t>(n / 256) * dtype_info(DType::Q4_K).type_size);
  std::vector<uint8_t> q1(static_cast<size_t>(n / 32) * dtype_info(DType::Q4_1).type_size);
  std::vector<float> yk(x.size()), y1(x.size());
  cpu::quantize_row_ref(DType::Q4_K, x.data(), qk.data(), n);
  cpu::dequantize_row_ref(DType::Q4_K, qk.data(), yk.data(), n);
  cpu::quantize_row_ref(DType::Q4_1, x.data(), q1.data(), n);
  cpu::dequantize_row_ref(DType::Q4_1, q1.data(), y1.data(), n);
  double ek = 0, e1 = 0;
  for (int64_t b = 0; b < n / 256; ++b) {
    float range_max = 0, min_max = 0;
    for (int j = 0; j < 8; ++j) {
      float lo = 0, hi = x[b * 256 + j * 32];
      for (int i = 0; i < 32; ++i) lo = std::min(lo, x[b * 256 + j * 32 + i]), hi = std::max(hi, x[b * 256 + j * 32 + i]);
      range_max = std::max(range_max, hi - lo);
      min_max = std::max(min_max, -lo);
    }
    for (int j = 0; j < 8; ++j) {
      float lo = 0, hi = x[b * 256 + j * 32];
      for (int i = 0; i < 32; ++i) lo = std::min(lo, x[b * 256 + j * 32 + i]), hi = std::max(hi, x[b * 256 + j * 32 + i]);
      // Half a step of the group, the scale's 6-bit rounding over 15 steps, the minimum's.
      const float bound = (hi - lo) / 30.0f + 15.0f * range_max / 15.0f / 63.0f / 2.0f + min_max / 63.0f / 2.0f +
                          1e-3f * range_max + 1e-30f;
      for (int i = 0; i < 32; ++i) {
        const int64_t e = b * 256 + j * 32 + i;
        ASSERT_LE(std::fabs(yk[e] - x[e]), bound) << "block " << b << " group " << j << " element " << i;
      }
    }
  }
  for (size_t i = 0; i < x.size(); ++i) {
    ek += (yk[i] - x[i]) * (yk[i] - x[i]);
    e1 += (y1[i] - x[i]) * (y1[i] - x[i]);
  }
  EXPECT_LE(ek, 1.25 * e1) << "Q4_K RMS error " << std::sqrt(ek / n) << " vs Q4_1 " << std::sqrt(e1 / n);
  for (int64_t i = n - 512; i < n - 256; ++i) EXPECT_EQ(yk[i], 0.0f);
}

TEST(Dequant, FastMatchesReferenceOnEveryIsa) {
  IsaGuard guard;
  for (Isa isa : supported_isas()) {
    cpu::force_isa(isa);
    for (DType t : kAllTypes)
      for (uint64_t seed : {7u, 8u}) {
        SCOPED_TRACE(cpu::isa_name(isa) + " " + dtype_name(t));
        const int64_t n = 1024 + (block_of(t) == 1 ? 5 : 0);  // float types: odd tail too
        const auto data = test::random_blocks(t, n, seed);
        std::vector<float> want(n), got(n, -1.0f);
        cpu::dequantize_row_ref(t, data.data(), want.data(), n);
        cpu::dequantize_row(t, data.data(), got.data(), n);
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(bits(got[i]), bits(want[i])) << "element " << i;
      }
  }
}

TEST(Dequant, RejectsBadInput) {
  std::vector<uint8_t> buf(64);
  std::vector<float> out(64);
  EXPECT_THROW(cpu::dequantize_row_ref(DType::Q4_0, buf.data(), out.data(), 33), std::invalid_argument);
  EXPECT_THROW(cpu::dequantize_row_ref(DType::Q8_K, buf.data(), out.data(), 256), std::invalid_argument);
}

// ---- matmul against the reference ---------------------------------------------------------

// The integer paths quantize each activation block to int8: d = amax/127, codes
// round(x * 127/amax). The test repeats that (a design fact, see matmul_impl.hpp) to get
// xq = d*code, and then requires the kernel to match sum(w * xq) up to float rounding, and
// the exact product sum(w * x) within the quantization's hard error bound.
struct Expect {
  DType t;
  int64_t C;
  std::vector<float> xq, step;

  Expect(DType t_, const float* x, int64_t C_) : t(t_), C(C_), xq(x, x + C_), step(static_cast<size_t>(C_), 0.0f) {
    if (is_float(t)) return;
    const int ab = act_block(t);
    for (int64_t b = 0; b < C / ab; ++b) {
      float amax = 0.0f;
      for (int i = 0; i < ab; ++i) amax = std::max(amax, std::fabs(x[b * ab + i]));
      const float id = amax > 1e-30f ? 127.0f / amax : 0.0f, d = amax > 1e-30f ? amax / 127.0f : 0.0f;
      for (int i = 0; i < ab; ++i) {
        const size_t c = static_cast<size_t>(b * ab + i);
        xq[c] = d * std::nearbyint(x[c] * id);
        step[c] = d;
      }
    }
  }
  // Returns |y - sum(w*xq)| / allowance (must be <= 1), and checks the hard bound against
  // the exact product `exact`.
  double ratio(float y, double exact, const float* wrow) const {
    double dot = 0.0, abs_sum = 0.0, amax_w = 0.0, abs_x = 0.0, hard = 0.0;
    for (int64_t c = 0; c < C; ++c) {
      const double w = wrow[c], xv = xq[static_cast<size_t>(c)];
      dot += w * xv;
      abs_sum += std::fabs(w * xv);
      amax_w = std::max(amax_w, std::fabs(w));
      abs_x += std::fabs(xv);
      hard += std::fabs(w) * step[static_cast<size_t>(c)] * 0.5;
    }
    // float32 accumulation (8-16 lanes, then per-block scale products; the K-quants
    // subtract a min term whose size is bounded by max|w| * sum|x|).
    const double allow = (static_cast<double>(C) / 8 + 16) * 1.2e-7 * (abs_sum + amax_w * abs_x) + 1e-30;
    EXPECT_LE(std::fabs(y - exact), hard * 1.001 + 2 * allow) << "outside the int8 rounding bound";
    return std::fabs(y - dot) / allow;
  }
};

struct Problem {
  DType t;
  int64_t R, C, N, ldx, ldy;
  size_t w_stride;
  std::vector<uint8_t> w;
  std::vector<uint8_t> wp;  // w in the CPU backend's packed rows (pack_rows); empty for types without them
  std::vector<uint8_t> wt;  // w in its 16-row tiles (tile_rows); empty for types without them
  std::vector<float> x, want, wdeq;

  Problem(DType t_, int64_t R_, int64_t C_, int64_t N_, uint64_t seed, int pad = 0)
      : t(t_), R(R_), C(C_), N(N_), ldx(C_ + pad), ldy(R_ + pad) {
    const size_t rb = row_bytes(t, C);
    w_stride = rb + static_cast<size_t>(pad);  // pad > 0: rows not packed, odd addresses
    const auto packed = test::random_blocks(t, R * C, seed);
    w.assign(w_stride * static_cast<size_t>(R) + 1, 0xee);
    for (int64_t r = 0; r < R; ++r) std::memcpy(&w[w_stride * r], &packed[rb * r], rb);
    x = random_floats(ldx * N, seed + 1000);
    want.assign(static_cast<size_t>(ldy * N), 0.0f);
    cpu::matmul_ref(t, w.data(), w_stride, R, C, x.data(), ldx, N, want.data(), ldy);
    wdeq.resize(static_cast<size_t>(R * C));
    for (int64_t r = 0; r < R; ++r) cpu::dequantize_row_ref(t, &w[w_stride * r], &wdeq[C * r], C);
    static cpu::ThreadPool pack_pool(2);
    if (pad == 0 && cpu::mm::q32_packs(t)) {
      wp.assign(rb * static_cast<size_t>(R), 0);
      cpu::pack_rows(pack_pool, t, w.data(), rb, wp.data(), R, C);
    }
    if (pad == 0 && cpu::mm::has_tiles(t)) {
      wt.assign(rb * static_cast<size_t>(R), 0);
      cpu::tile_rows(pack_pool, t, w.data(), rb, wt.data(), R, C);
    }
  }

  // The same product from packed rows or tiles (every level multiplies them: the levels
  // without kernels of their own for the layout through the scalar one, each row unpacked).
  std::vector<float> run_layout(cpu::ThreadPool& pool, bool tiled) const {
    std::vector<float> y(static_cast<size_t>(ldy * N), 12345.0f);
    const cpu::MatmulJob job{t, (tiled ? wt : wp).data(), w_stride, R, y.data(), ldy, !tiled, tiled};
    cpu::matmul_multi(pool, &job, 1, C, x.data(), ldx, N);
    return y;
  }
  // The layouts this type has, as (tiled?) flags.
  std::vector<bool> layouts() const {
    std::vector<bool> v;
    if (!wp.empty()) v.push_back(false);
    if (!wt.empty()) v.push_back(true);
    return v;
  }

  std::vector<float> run(cpu::ThreadPool& pool) const {
    std::vector<float> y(static_cast<size_t>(ldy * N), 12345.0f);
    cpu::matmul(pool, t, w.data(), w_stride, R, C, x.data(), ldx, N, y.data(), ldy);
    return y;
  }

  void check(const std::vector<float>& y) const {
    for (int64_t i = 0; i < N; ++i) {
      const Expect e(t, &x[i * ldx], C);
      for (int64_t r = 0; r < R; ++r) {
        const double ratio = e.ratio(y[i * ldy + r], want[i * ldy + r], &wdeq[C * r]);
        ASSERT_LE(ratio, 1.0) << "token " << i << " row " << r << ": got " << y[i * ldy + r] << " want "
                              << want[i * ldy + r];
        if (::testing::Test::HasFailure()) return;
      }
      for (int64_t r = R; r < ldy; ++r) ASSERT_EQ(y[i * ldy + r], 12345.0f) << "wrote past R";
    }
  }
};

TEST(Matmul, MatchesReferenceAllTypesIsasShapes) {
  IsaGuard guard;
  cpu::ThreadPool pool1(1), pool2(2);
  for (DType t : kAllTypes) {
    const int bs = block_of(t) == 1 ? 32 : block_of(t);
    for (int64_t nblk : {1, 2, 3})
      for (int64_t R : {1, 3, 7, 33})
        for (int64_t N = 1; N <= 17; ++N) {
          const int64_t C = nblk * bs + (block_of(t) == 1 ? 3 : 0);  // float types: ragged C
          const Problem p(t, R, C, N, 100 * nblk + 10 * R + N, (R == 7) ? 3 : 0);
          for (Isa isa : supported_isas()) {
            cpu::force_isa(isa);
            for (cpu::ThreadPool* pool : {&pool1, &pool2}) {
              SCOPED_TRACE(std::string(dtype_name(t)) + " " + cpu::isa_name(isa) + " R=" + std::to_string(R) +
                           " C=" + std::to_string(C) + " N=" + std::to_string(N) +
                           " threads=" + std::to_string(pool->size()));
              p.check(p.run(*pool));
              for (bool tiled : p.layouts()) {
                SCOPED_TRACE(tiled ? "tiled layout" : "packed rows");
                p.check(p.run_layout(*pool, tiled));
              }
              if (HasFatalFailure()) return;
            }
          }
        }
  }
}

// The float kernels compute the same bits at every SIMD level (AVX-512's register tiles hold
// the AVX2 kernel's two accumulators lane for lane): a float model gives the same logits on
// every AVX2 and AVX-512 CPU. Row counts and token counts around the 4 × 4 tile, columns with an 8-column step and a
// scalar tail, padded strides.
TEST(Matmul, FloatKernelsGiveTheSameBitsOnEveryIsa) {
#if !defined(TANDEM_HAVE_AVX512_EMULATION)
  if (cpu::detected_isa() != Isa::Avx512)
    GTEST_SKIP() << "one SIMD level on this CPU and no emulated AVX-512 kernels in this build (the asan preset "
                    "leaves them out): the release run compares the levels";
#endif
  IsaGuard guard;
  cpu::ThreadPool pool(2);
  for (DType t : {DType::F32, DType::F16, DType::BF16})
    for (int64_t C : {5, 16, 24, 27, 64, 200})
      for (int64_t R : {1, 3, 4, 6, 9})
        for (int64_t N : {1, 2, 4, 5, 9, 33}) {
          const Problem p(t, R, C, N, 1000 * C + 10 * R + N, R == 6 ? 3 : 0);
          std::vector<std::vector<float>> got;
          for (Isa isa : supported_isas()) {
            if (isa == Isa::Scalar) continue;  // the scalar level sums in its own order
            cpu::force_isa(isa);
            got.push_back(p.run(pool));
          }
          ASSERT_GE(got.size(), 2u) << "no two SIMD levels to compare on this machine";
          for (size_t i = 1; i < got.size(); ++i)
            for (size_t k = 0; k < got[0].size(); ++k)
              ASSERT_EQ(bits(got[i][k]), bits(got[0][k]))
                  << dtype_name(t) << " C=" << C << " R=" << R << " N=" << N << " level " << i << " element " << k;
        }
}

TEST(Matmul, WideRowsAndLongBatches) {
  IsaGuard guard;
  cpu::ThreadPool pool(2);
  for (DType t : kAllTypes) {
    const Problem wide(t, 9, 4096, 5, 77);
    const Problem longb(t, 5, 512, 70, 78);  // more tokens than one kernel chunk
    // 11 blocks: kernels that take blocks in groups of 8 and in pairs meet a partial group
    // and an odd last block.
    const Problem odd(t, 6, 11 * std::max(32, block_of(t)) + (block_of(t) == 1 ? 5 : 0), 9, 79);
    for (Isa isa : supported_isas()) {
      cpu::force_isa(isa);
      SCOPED_TRACE(std::string(dtype_name(t)) + " " + cpu::isa_name(isa));
      for (const Problem* p : {&wide, &longb, &odd}) {
        p->check(p->run(pool));
        for (bool tiled : p->layouts()) {
          SCOPED_TRACE(tiled ? "tiled layout" : "packed rows");
          p->check(p->run_layout(pool, tiled));
        }
      }
      if (HasFatalFailure()) return;
    }
  }
}

// Speculative decoding verifies k drafted tokens in one call and must reproduce what
// one-token decoding would have produced: every token's result must not depend on N, on
// its position in the batch, or on the thread count.
TEST(Matmul, BatchGivesBitIdenticalResultsToSingleTokens) {
  IsaGuard guard;
  cpu::ThreadPool pool1(1), pool2(2);
  for (DType t : kAllTypes) {
    const int64_t C = block_of(t) == 1 ? 200 : 2 * std::max(256, block_of(t));
    const Problem p(t, 37, C, 40, 4242);
    for (Isa isa : supported_isas()) {
      cpu::force_isa(isa);
      SCOPED_TRACE(std::string(dtype_name(t)) + " " + cpu::isa_name(isa));
      const std::vector<float> batch = p.run(pool2);
      const std::vector<float> batch1 = p.run(pool1);
      for (int64_t i = 0; i < p.N; ++i) {
        std::vector<float> single(static_cast<size_t>(p.R));
        cpu::matmul(i % 2 ? pool1 : pool2, t, p.w.data(), p.w_stride, p.R, p.C, &p.x[i * p.ldx], p.ldx, 1,
                    single.data(), p.R);
        for (int64_t r = 0; r < p.R; ++r) {
          ASSERT_EQ(bits(batch[i * p.ldy + r]), bits(single[r])) << "token " << i << " row " << r;
          ASSERT_EQ(bits(batch1[i * p.ldy + r]), bits(single[r])) << "token " << i << " row " << r;
        }
      }
      // Packed rows and tiles: their own kernels, batch-invariant the same way.
      for (bool tiled : p.layouts()) {
        const std::vector<float> pbatch = p.run_layout(pool2, tiled), pbatch1 = p.run_layout(pool1, tiled);
        for (int64_t i = 0; i < p.N; ++i) {
          std::vector<float> single(static_cast<size_t>(p.R));
          const cpu::MatmulJob job{t, (tiled ? p.wt : p.wp).data(), p.w_stride, p.R, single.data(), p.R, !tiled, tiled};
          cpu::matmul_multi(i % 2 ? pool1 : pool2, &job, 1, p.C, &p.x[i * p.ldx], p.ldx, 1);
          for (int64_t r = 0; r < p.R; ++r) {
            ASSERT_EQ(bits(pbatch[i * p.ldy + r]), bits(single[r])) << (tiled ? "tiled" : "packed") << ": token " << i << " row " << r;
            ASSERT_EQ(bits(pbatch1[i * p.ldy + r]), bits(single[r])) << (tiled ? "tiled" : "packed") << ": token " << i << " row " << r;
          }
        }
      }
    }
  }
}

// q/k/v and gate/up share one call (one activation quantization per kernel layout, one
// pool job): every matrix's result must be the same bits as its own matmul.
TEST(Matmul, SharedActivationsMatchSeparateCalls) {
  IsaGuard guard;
  cpu::ThreadPool pool(2);
  const int64_t C = 512;
  // Mixed families and code orders (Q4_K and Q6_K quantize differently on AVX2).
  const DType types[] = {DType::Q4_K, DType::Q6_K, DType::Q8_0, DType::F16, DType::Q4_K, DType::Q5_0};
  const int64_t rows[] = {37, 5, 64, 9, 0, 130};
  for (int64_t N : {1, 3, 40}) {
    std::vector<Problem> ps;
    for (int j = 0; j < 6; ++j) ps.emplace_back(types[j], rows[j], C, N, 500 + j);
    for (auto& p : ps) p.x = ps[0].x;  // the same activations
    for (Isa isa : supported_isas()) {
      cpu::force_isa(isa);
      SCOPED_TRACE(std::string(cpu::isa_name(isa)) + " N=" + std::to_string(N));
      std::vector<std::vector<float>> together(6);
      std::vector<cpu::MatmulJob> jobs;
      for (int j = 0; j < 6; ++j) {
        together[j].assign(static_cast<size_t>(std::max<int64_t>(1, rows[j]) * N), 777.0f);
        jobs.push_back({types[j], ps[j].w.data(), ps[j].w_stride, rows[j], together[j].data(), rows[j]});
      }
      cpu::matmul_multi(pool, jobs.data(), 6, C, ps[0].x.data(), C, N);
      for (int j = 0; j < 6; ++j) {
        if (rows[j] == 0) {
          EXPECT_EQ(together[j][0], 777.0f);
          continue;
        }
        const std::vector<float> alone = ps[j].run(pool);
        for (int64_t i = 0; i < N * rows[j]; ++i)
          ASSERT_EQ(bits(together[j][static_cast<size_t>(i)]), bits(alone[static_cast<size_t>(i)])) << "matrix " << j;
      }
    }
  }
  cpu::MatmulJob nine[9] = {};
  EXPECT_THROW(cpu::matmul_multi(pool, nine, 9, C, nullptr, C, 1), std::invalid_argument);
}

TEST(Matmul, DegenerateAndInvalidShapes) {
  cpu::ThreadPool pool(2);
  std::vector<uint8_t> w(1024);
  std::vector<float> x(64, 1.0f), y(64, 5.0f);
  cpu::matmul(pool, DType::Q4_0, w.data(), 18, 0, 32, x.data(), 32, 1, y.data(), 1);  // R = 0
  cpu::matmul(pool, DType::Q4_0, w.data(), 18, 1, 32, x.data(), 32, 0, y.data(), 1);  // N = 0
  EXPECT_EQ(y[0], 5.0f);
  EXPECT_THROW(cpu::matmul(pool, DType::Q4_K, w.data(), 144, 1, 32, x.data(), 32, 1, y.data(), 1),
               std::invalid_argument);
  EXPECT_THROW(cpu::matmul(pool, DType::Q8_K, w.data(), 292, 1, 256, x.data(), 256, 1, y.data(), 1),
               std::invalid_argument);
}

TEST(Isa, NamesAndForcing) {
  IsaGuard guard;
  EXPECT_EQ(cpu::isa_name(Isa::Scalar), "scalar");
  EXPECT_EQ(cpu::isa_name(Isa::Avx2), "avx2");
  EXPECT_EQ(cpu::isa_name(Isa::Avx512), "avx512");
  cpu::force_isa(Isa::Scalar);
  EXPECT_EQ(cpu::active_isa(), Isa::Scalar);
  if (cpu::detected_isa() != Isa::Avx512) {
    const cpu::mm::IsaKernels* installed = cpu::mm::avx512_kernels_for_testing();
    cpu::mm::install_avx512_kernels_for_testing(nullptr);
    EXPECT_THROW(cpu::force_isa(Isa::Avx512), std::invalid_argument);
    cpu::mm::install_avx512_kernels_for_testing(installed);
  }
}

// Says (in the test log) how the AVX-512 kernels were tested on this machine, and fails
// if a machine that could test them does not.
TEST(Isa, Avx512KernelsAreTestedNativelyOrEmulated) {
  (void)supported_isas();  // installs the emulated set where it is wanted
  if (cpu::detected_isa() == Isa::Avx512 && cpu::mm::avx512_kernels_for_testing()) {
    std::printf("AVX-512 kernels: tested through SIMDe emulation (TANDEM_TEST_AVX512_EMULATED=1)\n");
  } else if (cpu::detected_isa() == Isa::Avx512) {
    std::printf("AVX-512 kernels: tested natively\n");
  } else if (avx512_emulated()) {
    std::printf("AVX-512 kernels: tested through SIMDe emulation (this CPU has no AVX-512 VNNI)\n");
  } else {
#if defined(TANDEM_HAVE_AVX512_EMULATION)
    if (cpu::detected_isa() == Isa::Avx2) FAIL() << "emulated AVX-512 kernels were not installed";
#endif
    GTEST_SKIP() << "skipped: no AVX-512 CPU and no SIMDe emulation";
  }
  const std::vector<Isa> isas = supported_isas();
  EXPECT_NE(std::find(isas.begin(), isas.end(), Isa::Avx512), isas.end());
}

}  // namespace
}  // namespace tandem
