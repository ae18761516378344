// CPU backend ops against plain double-precision references written here.
#include <gtest/gtest.h>

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <tuple>
#include <numeric>
#include <random>

#include "kernels/backend.hpp"
#include "kernels/cpu/activation_impl.hpp"
#include "kernels/cpu/fp16.hpp"
#include "kernels/cpu/quant.hpp"
#include "kernels/cpu/thread_pool.hpp"
#include "tests/support/isa_levels.hpp"

namespace tandem::kernels {
namespace {

struct Host {
  std::unique_ptr<Backend> be = make_cpu_backend(2);
  std::vector<std::unique_ptr<Buffer>> bufs;
  Tensor f32(const std::vector<float>& v, int64_t cols) {
    bufs.push_back(be->alloc(v.size() * 4));
    Tensor t = make_tensor(bufs.back().get(), DType::F32, cols, static_cast<int64_t>(v.size()) / cols);
    be->upload(t, v.data(), v.size() * 4);
    return t;
  }
  Tensor i32(const std::vector<int32_t>& v, int64_t cols) {
    bufs.push_back(be->alloc(std::max<size_t>(v.size(), 1) * 4));
    Tensor t = make_tensor(bufs.back().get(), DType::I32, cols, static_cast<int64_t>(v.size()) / cols);
    be->upload(t, v.data(), v.size() * 4);
    return t;
  }
  std::vector<float> get(const Tensor& t) {
    std::vector<float> v(static_cast<size_t>(t.numel()));
    be->download(v.data(), t, v.size() * 4);
    return v;
  }
};

std::vector<float> randn(size_t n, uint32_t seed, float s = 1.0f) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.0f, s);
  std::vector<float> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

TEST(CpuOps, RmsNormMatchesReference) {
  Host h;
  const int rows = 5, cols = 37;
  auto x = randn(rows * cols, 1), w = randn(cols, 2);
  Tensor tx = h.f32(x, cols), tw = h.f32(w, cols), ty = h.f32(std::vector<float>(x.size()), cols);
  h.be->rms_norm(ty, tx, tw, 1e-5f, 0.0f);
  auto y = h.get(ty);
  for (int r = 0; r < rows; ++r) {
    double ss = 0;
    for (int i = 0; i < cols; ++i) ss += double(x[r * cols + i]) * x[r * cols + i];
    const double inv = 1.0 / std::sqrt(ss / cols + 1e-5);
    for (int i = 0; i < cols; ++i) EXPECT_NEAR(y[r * cols + i], x[r * cols + i] * inv * w[i], 1e-5);
  }
}

TEST(CpuOps, RopeRotatesPairsOrHalves) {
  for (RopeStyle style : {RopeStyle::Normal, RopeStyle::NeoX}) {
    Host h;
    const int n_heads = 3, hd = 8, n = 4;
    auto x = randn(n * n_heads * hd, 3);
    std::vector<int32_t> pos = {0, 1, 7, 100};
    Tensor tx = h.f32(x, n_heads * hd), tp = h.i32(pos, n);
    h.be->rope(tx, tp, n_heads, hd, hd, 10000.0f, style);
    auto y = h.get(tx);
    for (int t = 0; t < n; ++t)
      for (int hh = 0; hh < n_heads; ++hh)
        for (int i = 0; i < hd / 2; ++i) {
          const double ang = pos[t] * std::pow(10000.0, -2.0 * i / hd);
          const int a = style == RopeStyle::NeoX ? i : 2 * i, b = style == RopeStyle::NeoX ? i + hd / 2 : 2 * i + 1;
          const size_t base = (size_t(t) * n_heads + hh) * hd;
          const double x0 = x[base + a], x1 = x[base + b];
          EXPECT_NEAR(y[base + a], x0 * std::cos(ang) - x1 * std::sin(ang), 1e-4);
          EXPECT_NEAR(y[base + b], x0 * std::sin(ang) + x1 * std::cos(ang), 1e-4);
        }
  }
}

// The backend keeps the last positions' cos/sin per (theta, dims) (cpu_backend_ops.cpp):
// calls that alternate thetas, dims and positions, as layers of Gemma 3 and the draft and
// target passes do, still get exactly the rotation computed afresh.
TEST(CpuOps, RopeAnglesReusedOnlyForTheSameCall) {
  Host h;
  const int n_heads = 2, hd = 8;
  struct Call {
    float theta;
    int dims;
    std::vector<int32_t> pos;
  };
  const std::vector<Call> calls = {{10000.0f, 8, {3, 4}}, {1e6f, 8, {3, 4}},  {10000.0f, 8, {3, 4}}, {10000.0f, 8, {4, 5}},
                                   {10000.0f, 4, {4, 5}}, {1e6f, 8, {4, 5}},  {500.0f, 8, {4, 5}},   {10000.0f, 8, {4, 5}},
                                   {10000.0f, 8, {4}},    {10000.0f, 8, {4, 5, 6}}};
  for (size_t k = 0; k < calls.size(); ++k) {
    const Call& c = calls[k];
    const int n = static_cast<int>(c.pos.size()), half = c.dims / 2;
    const auto x = randn(static_cast<size_t>(n) * n_heads * hd, 30 + static_cast<uint32_t>(k));
    Tensor tx = h.f32(x, n_heads * hd), tp = h.i32(c.pos, n);
    h.be->rope(tx, tp, n_heads, hd, c.dims, c.theta, RopeStyle::NeoX);
    const auto y = h.get(tx);
    for (int t = 0; t < n; ++t)
      for (int hh = 0; hh < n_heads; ++hh)
        for (int i = 0; i < half; ++i) {
          const double ang = static_cast<double>(c.pos[static_cast<size_t>(t)]) *
                             std::pow(static_cast<double>(c.theta), -2.0 * i / c.dims);
          const float cf = static_cast<float>(std::cos(ang)), sf = static_cast<float>(std::sin(ang));
          const size_t base = (static_cast<size_t>(t) * n_heads + hh) * hd;
          const float x0 = x[base + i], x1 = x[base + i + half];
          const float want0 = x0 * cf - x1 * sf, want1 = x0 * sf + x1 * cf;
          ASSERT_EQ(std::memcmp(&y[base + i], &want0, 4), 0) << "call " << k;
          ASSERT_EQ(std::memcmp(&y[base + i + half], &want1, 4), 0) << "call " << k;
        }
  }
}

TEST(CpuOps, GatedActivations) {
  Host h;
  auto g = randn(40, 4, 2.0f), u = randn(40, 5);
  for (Activation act : {Activation::SiLU, Activation::GeluTanh}) {
    Tensor tg = h.f32(g, 8), tu = h.f32(u, 8), ty = h.f32(std::vector<float>(40), 8);
    h.be->gated_act(ty, tg, tu, act);
    auto y = h.get(ty);
    for (size_t i = 0; i < g.size(); ++i) {
      const double x = g[i];
      const double a = act == Activation::SiLU
                           ? x / (1 + std::exp(-x))
                           : 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
      EXPECT_NEAR(y[i], a * u[i], 1e-5);
    }
  }
}

// A single wide row (a decode pass's feed-forward) is split over the threads by columns: it
// must give the same bits as the same row inside a two-row call (verification), and 5003
// columns leave a ragged tail for the last thread.
TEST(CpuOps, GatedActivationWideRowSplitIsExact) {
  Host h;
  constexpr int kW = 5003;
  auto g = randn(2 * kW, 6, 2.0f), u = randn(2 * kW, 7);
  for (Activation act : {Activation::SiLU, Activation::GeluTanh}) {
    Tensor tg = h.f32(g, kW), tu = h.f32(u, kW), ty = h.f32(std::vector<float>(2 * kW), kW);
    h.be->gated_act(ty, tg, tu, act);
    const auto both = h.get(ty);
    for (int r = 0; r < 2; ++r) {
      const std::vector<float> g1(g.begin() + r * kW, g.begin() + (r + 1) * kW), u1(u.begin() + r * kW, u.begin() + (r + 1) * kW);
      Tensor sg = h.f32(g1, kW), su = h.f32(u1, kW), sy = h.f32(std::vector<float>(kW), kW);
      h.be->gated_act(sy, sg, su, act);
      const auto one = h.get(sy);
      ASSERT_EQ(0, std::memcmp(one.data(), both.data() + r * kW, sizeof(float) * kW)) << "row " << r;
      for (int i = 0; i < kW; ++i) {
        const double x = g1[i];
        const double a = act == Activation::SiLU ? x / (1 + std::exp(-x))
                                                 : 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
        ASSERT_NEAR(one[i], a * u1[i], 1e-4 * (1 + std::fabs(a * u1[i]))) << "column " << i;
      }
    }
  }
}

// Both twins of the gated activations (activation_impl.hpp) against double precision, over
// g from -100 to 100 and special values. Bounds, with u the float unit roundoff: SiLU, the
// vector exp's ~2e-7 (4u) relative error plus 3 roundings: 12u of |y|; GELU, 8u of |y| plus
// 4u of |g u| (the scalar twin's 1 + tanh(z) cancels where tanh(z) is near -1: there its
// error is up to 2u of |g u|, the sigmoid form's less). A floor of 1e-38 |g u| covers the
// far tail (g below about -87), where exp(-g) overflows: libm's to inf (y = 0), the vector
// exp's to its clamp, 2.4e38 (y = g u / 2.4e38); the true value is below 5e-39 |g u|.
TEST(CpuOps, GatedActivationTwinsMatchDouble) {
  constexpr double kU = 1.0 / (1 << 24);
  std::vector<float> g, u;
  for (int i = -4000; i <= 4000; ++i) g.push_back(static_cast<float>(i) * 0.025f);  // -100 .. 100
  for (float x : {0.0f, -0.0f, 1e-30f, -1e-30f, 1e-7f, -1e-7f, 88.0f, -88.0f, 90.0f, -90.0f, 1e4f, -1e4f}) g.push_back(x);
  const auto r = randn(g.size(), 21);
  for (size_t i = 0; i < g.size(); ++i) u.push_back(0.5f + std::fabs(r[i]));
  std::vector<std::pair<const char*, cpu::GatedActFn>> twins = {{"scalar", cpu::gated_act_row_scalar}};
  if (cpu::detected_isa() >= cpu::Isa::Avx2) twins.push_back({"avx2", cpu::gated_act_row_avx2});
  for (auto [name, fn] : twins)
    for (Activation act : {Activation::SiLU, Activation::GeluTanh}) {
      SCOPED_TRACE(std::string(name) + (act == Activation::SiLU ? " silu" : " gelu"));
      std::vector<float> y(g.size());
      fn(g.data(), u.data(), y.data(), static_cast<int64_t>(g.size()), act);
      for (size_t i = 0; i < g.size(); ++i) {
        const double x = g[i], gu = std::fabs(x * u[i]);
        const double a = act == Activation::SiLU
                             ? x / (1 + std::exp(-x))
                             : 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
        const double want = a * u[i];
        const double tol = (act == Activation::SiLU ? 12 * kU * std::fabs(want) : 8 * kU * std::fabs(want) + 4 * kU * gu) +
                           1e-38 * gu;
        ASSERT_LE(std::fabs(y[i] - want), tol) << "g = " << x;
      }
      // Each element's result is its own: the same bits alone as anywhere in a row (the
      // vector kernel's tail runs on a padded copy).
      for (int64_t n : {1, 7, 8, 9, 37}) {
        std::vector<float> row(static_cast<size_t>(n));
        fn(g.data() + 3, u.data() + 3, row.data(), n, act);
        for (int64_t i = 0; i < n; ++i) {
          float one = 0.0f;
          fn(g.data() + 3 + i, u.data() + 3 + i, &one, 1, act);
          ASSERT_EQ(std::memcmp(&one, &row[static_cast<size_t>(i)], 4), 0) << "n = " << n << ", element " << i;
        }
      }
    }
}

// Pinned workers each run on exactly one CPU; unpinned ones keep the process's set.
TEST(ThreadPool, PinsWorkersOnlyWhenAsked) {
  for (bool pin : {false, true}) {
    cpu::ThreadPool pool(2, pin);
    std::atomic<int> single{-1};
    pool.run([&](int ith, int) {
      if (ith == 0) return;
      cpu_set_t s;
      CPU_ZERO(&s);
      ASSERT_EQ(pthread_getaffinity_np(pthread_self(), sizeof s, &s), 0);
      single = CPU_COUNT(&s) == 1;
    });
    EXPECT_EQ(pool.pinned(), pin);
    cpu_set_t all;
    CPU_ZERO(&all);
    ASSERT_EQ(sched_getaffinity(0, sizeof all, &all), 0);
    if (pin || CPU_COUNT(&all) > 1) {
      EXPECT_EQ(single.load(), pin ? 1 : 0);
    }
  }
}

// One attention problem: sequences with scrambled block tables, some new (query) tokens at
// the end of each, a paged F16 or F32 cache.
struct AttnCase {
  DType kv_type = DType::F16;
  int window = 0;
  float softcap = 0.0f;
  int n_heads = 4, n_kv = 2, hd = 16, bs = 4;
  std::vector<int> lens = {7, 13};  // total positions per sequence after this batch
  std::vector<int> n_new = {3, 1};  // new (query) tokens per sequence
};

struct AttnProblem {
  AttnCase c;
  Host h;
  std::vector<std::vector<float>> K, V;  // dense, position-major, per sequence
  std::vector<int32_t> pos, seq;
  std::vector<float> q;
  KVLayer layer;
  std::vector<int32_t> bt;
  int bt_cols = 0;

  explicit AttnProblem(const AttnCase& cs) : c(cs) {
    const int kvw = c.n_kv * c.hd, n_seq = static_cast<int>(c.lens.size());
    for (int l : c.lens) bt_cols = std::max(bt_cols, (l + c.bs - 1) / c.bs);
    const int n_blocks = bt_cols * n_seq + 3;
    // Scrambled, disjoint block assignment.
    std::vector<int32_t> free(n_blocks);
    std::iota(free.begin(), free.end(), 0);
    std::shuffle(free.begin(), free.end(), std::mt19937(5));
    bt.assign(size_t(n_seq) * bt_cols, 0);
    for (int s = 0, k = 0; s < n_seq; ++s)
      for (int b = 0; b < (c.lens[s] + c.bs - 1) / c.bs; ++b) bt[size_t(s) * bt_cols + b] = free[k++];
    const size_t row = row_bytes(c.kv_type, kvw);
    std::vector<uint8_t> kc(row * n_blocks * c.bs), vc(row * n_blocks * c.bs);
    auto put = [&](std::vector<uint8_t>& cache, int slot, const float* src) {
      for (int i = 0; i < kvw; ++i) {
        if (c.kv_type == DType::F16) {
          reinterpret_cast<uint16_t*>(cache.data() + slot * row)[i] = cpu::f32_to_fp16(src[i]);
        } else {
          reinterpret_cast<float*>(cache.data() + slot * row)[i] = src[i];
        }
      }
    };
    for (int s = 0; s < n_seq; ++s) {
      K.push_back(randn(size_t(c.lens[s]) * kvw, 10 + s));
      V.push_back(randn(size_t(c.lens[s]) * kvw, 20 + s));
      for (int p = 0; p < c.lens[s]; ++p) {
        const int slot = bt[size_t(s) * bt_cols + p / c.bs] * c.bs + p % c.bs;
        put(kc, slot, &K[s][size_t(p) * kvw]);
        put(vc, slot, &V[s][size_t(p) * kvw]);
      }
      for (int i = 0; i < c.n_new[s]; ++i) {
        pos.push_back(c.lens[s] - c.n_new[s] + i);
        seq.push_back(s);
      }
    }
    h.bufs.push_back(h.be->alloc(kc.size()));
    layer.k = make_tensor(h.bufs.back().get(), c.kv_type, kvw, n_blocks * c.bs);
    h.be->upload(layer.k, kc.data(), kc.size());
    h.bufs.push_back(h.be->alloc(vc.size()));
    layer.v = make_tensor(h.bufs.back().get(), c.kv_type, kvw, n_blocks * c.bs);
    h.be->upload(layer.v, vc.data(), vc.size());
    q = randn(pos.size() * c.n_heads * c.hd, 30);
  }

  // Runs tokens [t0, t1) in one call; returns their outputs.
  std::vector<float> run(size_t t0, size_t t1) {
    const int n = static_cast<int>(t1 - t0), w = c.n_heads * c.hd;
    std::vector<int32_t> p(pos.begin() + t0, pos.begin() + t1), s(seq.begin() + t0, seq.begin() + t1);
    std::vector<float> qq(q.begin() + t0 * w, q.begin() + t1 * w);
    PagedAttnMeta meta{h.i32(p, n), h.i32(s, n), h.i32(bt, bt_cols), h.i32(std::vector<int32_t>(n, 0), n), c.bs};
    Tensor tq = h.f32(qq, w), to = h.f32(std::vector<float>(qq.size()), w);
    h.be->paged_attention(to, tq, layer, meta, c.n_heads, c.n_kv, c.hd, 1.0f / std::sqrt(float(c.hd)), c.window,
                          c.softcap);
    return h.get(to);
  }
  std::vector<float> run_all() { return run(0, pos.size()); }

  // Dense double-precision softmax attention.
  void check(const std::vector<float>& out, double tol = 1e-4) {
    const int kvw = c.n_kv * c.hd;
    auto rounded = [&](float x) { return c.kv_type == DType::F16 ? cpu::fp16_to_f32(cpu::f32_to_fp16(x)) : x; };
    const double scale = 1.0 / std::sqrt(double(float(c.hd)));
    for (size_t t = 0; t < pos.size(); ++t)
      for (int head = 0; head < c.n_heads; ++head) {
        const int s = seq[t], kvh = head / (c.n_heads / c.n_kv);
        const int j0 = c.window > 0 ? std::max(0, pos[t] - c.window + 1) : 0;
        std::vector<double> sc;
        for (int j = j0; j <= pos[t]; ++j) {
          double d = 0;
          for (int i = 0; i < c.hd; ++i)
            d += double(q[(t * c.n_heads + head) * c.hd + i]) * rounded(K[s][size_t(j) * kvw + kvh * c.hd + i]);
          d *= double(float(scale));
          if (c.softcap > 0) d = c.softcap * std::tanh(d / c.softcap);
          sc.push_back(d);
        }
        const double mx = *std::max_element(sc.begin(), sc.end());
        double z = 0;
        for (auto& x : sc) z += (x = std::exp(x - mx));
        for (int i = 0; i < c.hd; ++i) {
          double acc = 0;
          for (int j = j0; j <= pos[t]; ++j)
            acc += sc[j - j0] / z * rounded(V[s][size_t(j) * kvw + kvh * c.hd + i]);
          ASSERT_NEAR(out[(t * c.n_heads + head) * c.hd + i], acc, tol) << "token " << t << " head " << head;
        }
      }
  }
};

// Every attention path (portable, AVX2, AVX-512 natively or through SIMDe), each against
// the dense reference.
std::vector<cpu::Isa> attention_isas() { return test::supported_isas(); }
using test::IsaGuard;

void check_attention(const AttnCase& c) {
  IsaGuard guard;
  for (cpu::Isa isa : attention_isas()) {
    SCOPED_TRACE(cpu::isa_name(isa));
    cpu::force_isa(isa);
    AttnProblem pr(c);
    pr.check(pr.run_all());
  }
}

TEST(CpuOps, PagedAttentionF32) { check_attention({DType::F32, 0, 0.0f}); }
TEST(CpuOps, PagedAttentionF16) { check_attention({DType::F16, 0, 0.0f}); }
TEST(CpuOps, PagedAttentionSlidingWindowAndSoftcap) { check_attention({DType::F16, 3, 5.0f}); }

// Real-model shapes: GQA groups of 3, 6 and 7 heads, head_dim 64 and 128 (tiles of 8
// positions with ragged ends), a head_dim that is no multiple of 8, and contexts long
// enough to be split into several spans that are merged (1100 positions).
TEST(CpuOps, PagedAttentionModelShapesAndLongContexts) {
  AttnCase c;
  c.kv_type = DType::F16;
  c.bs = 16;
  c.lens = {1100, 37, 9};
  c.n_new = {5, 37, 1};
  for (auto [nh, nkv, hd] : {std::tuple{9, 3, 64}, {12, 2, 128}, {14, 2, 64}, {4, 1, 12}}) {
    SCOPED_TRACE(testing::Message() << nh << " heads, " << nkv << " kv, hd " << hd);
    c.n_heads = nh;
    c.n_kv = nkv;
    c.hd = hd;
    check_attention(c);
  }
  c.window = 600;  // a window that still spans two parts
  c.n_heads = 6;
  c.n_kv = 2;
  c.hd = 64;
  check_attention(c);
}

// A token's output must be the same bits whether it is attended alone (decode) or with
// others (verification, prefill): the greedy speculative output depends on it. Tokens of
// one sequence share their cached rows in groups (attention_span_avx2_multi), so the cases
// cover tokens whose last tiles end at different rows, tokens on both sides of a split
// into parts (512 positions), a prefill of more tokens than a group holds, two heads
// sizes, a window (every token its own lo: no groups), and sequences whose tokens are
// interleaved in the batch.
TEST(CpuOps, PagedAttentionIsBatchInvariant) {
  struct Case {
    std::vector<int> lens, n_new;
    int n_heads, n_kv, hd, window;
  };
  const Case cases[] = {
      {{700, 40}, {9, 4}, 6, 2, 64, 0},
      {{520, 30}, {12, 30}, 12, 2, 128, 0},
      {{45, 300}, {45, 7}, 14, 2, 64, 0},
      {{90, 20}, {6, 5}, 6, 2, 64, 5},
  };
  IsaGuard guard;
  for (const Case& k : cases) {
    AttnCase c;
    c.bs = 16;
    c.n_heads = k.n_heads;
    c.n_kv = k.n_kv;
    c.hd = k.hd;
    c.lens = k.lens;
    c.n_new = k.n_new;
    c.window = k.window;
    for (cpu::Isa isa : attention_isas()) {
      SCOPED_TRACE(testing::Message() << cpu::isa_name(isa) << ", lens " << k.lens[0] << "/" << k.lens[1]);
      cpu::force_isa(isa);
      AttnProblem pr(c);
      const auto all = pr.run_all();
      pr.check(all);
      const size_t w = size_t(c.n_heads) * c.hd;
      for (size_t t = 0; t < pr.pos.size(); ++t) {
        const auto one = pr.run(t, t + 1);
        ASSERT_EQ(0, std::memcmp(one.data(), all.data() + t * w, w * sizeof(float))) << "token " << t;
      }
      // The same tokens with the two sequences' tokens interleaved in the batch.
      const size_t n0 = size_t(k.n_new[0]), n1 = size_t(k.n_new[1]);
      std::vector<size_t> order;
      for (size_t i = 0; i < std::max(n0, n1); ++i) {
        if (i < n0) order.push_back(i);
        if (i < n1) order.push_back(n0 + i);
      }
      AttnProblem mixed(c);
      for (size_t i = 0; i < order.size(); ++i) {
        mixed.pos[i] = pr.pos[order[i]];
        mixed.seq[i] = pr.seq[order[i]];
        std::copy_n(pr.q.begin() + order[i] * w, w, mixed.q.begin() + i * w);
      }
      const auto m = mixed.run_all();
      for (size_t i = 0; i < order.size(); ++i)
        ASSERT_EQ(0, std::memcmp(m.data() + i * w, all.data() + order[i] * w, w * sizeof(float))) << "token " << order[i];
    }
  }
}

// Bad metadata is an error on the caller's thread, not a crash in a worker.
TEST(CpuOps, PagedAttentionRejectsBadTables) {
  AttnProblem pr(AttnCase{});
  pr.bt[0] = 1000;  // a block beyond the cache
  EXPECT_THROW(pr.run_all(), std::out_of_range);
  AttnProblem pr2(AttnCase{});
  pr2.pos[0] = 4 * 4 * 100;  // beyond the block table
  EXPECT_THROW(pr2.run_all(), std::out_of_range);
}

TEST(CpuOps, KvStoreWritesTheMappedSlots) {
  Host h;
  const int kvw = 8;
  auto k = randn(2 * kvw, 40), v = randn(2 * kvw, 41);
  h.bufs.push_back(h.be->alloc(16 * kvw * 4));
  KVLayer layer;
  layer.k = make_tensor(h.bufs.back().get(), DType::F32, kvw, 8);
  layer.v = make_tensor(h.bufs.back().get(), DType::F32, kvw, 8, 8 * kvw * 4);
  h.be->fill_zero(layer.k);
  h.be->fill_zero(layer.v);
  PagedAttnMeta meta;
  meta.slot_mapping = h.i32({6, 1}, 2);
  h.be->kv_store(layer, h.f32(k, kvw), h.f32(v, kvw), meta);
  auto kc = h.get(layer.k);
  for (int i = 0; i < kvw; ++i) {
    EXPECT_EQ(kc[6 * kvw + i], k[i]);
    EXPECT_EQ(kc[1 * kvw + i], k[kvw + i]);
    EXPECT_EQ(kc[0 * kvw + i], 0.0f);
  }
  meta.slot_mapping = h.i32({8, 0}, 2);  // out of range: refused, not written
  EXPECT_THROW(h.be->kv_store(layer, h.f32(k, kvw), h.f32(v, kvw), meta), std::logic_error);
}

}  // namespace
}  // namespace tandem::kernels
