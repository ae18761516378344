// The CUDA backend's kernels, run under the SIMT emulator (make_emulated_cuda_backend),
// against the CPU backend (make_cpu_backend) on the CPU op tests' cases, plus batch
// invariance and the host-only logic (arena accounting, backend choice). The emulated
// backend runs the same host code and the same kernel source as the nvcc build.
//
// Tolerances follow from the arithmetic of the two implementations (unit roundoff
// u = 2^-24); where both compute the same operations in the same order the results must
// be bit-identical and the test says so.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <tuple>

#include "tests/support/cuda_under_test.hpp"
#include "kernels/backend.hpp"
#include "kernels/backend_factory.hpp"
#include "kernels/cpu/fp16.hpp"
#include "kernels/cpu/quant.hpp"
#include "kernels/cpu/thread_pool.hpp"
#include "kernels/cuda/arena.hpp"
#include "tests/support/random_blocks.hpp"

namespace tandem::kernels {
namespace {

constexpr double kU = 1.0 / (1 << 24);  // unit roundoff of float

using test::cuda_under_test;

std::vector<float> randn(size_t n, uint32_t seed, float s = 1.0f) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.0f, s);
  std::vector<float> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

// The same data on both backends.
struct Dual {
  std::unique_ptr<Backend> cpu = make_cpu_backend(1);
  std::unique_ptr<Backend> gpu = cuda_under_test(size_t{96} << 20);
  std::vector<std::unique_ptr<Buffer>> bufs;  // destroyed before the backends
  struct T {
    Tensor c, g;
  };
  T raw(DType type, int64_t cols, int64_t rows, const void* data) {
    const size_t bytes = row_bytes(type, cols) * static_cast<size_t>(rows);
    T t;
    bufs.push_back(cpu->alloc(std::max<size_t>(bytes, 4)));
    t.c = make_tensor(bufs.back().get(), type, cols, rows);
    bufs.push_back(gpu->alloc(std::max<size_t>(bytes, 4)));
    t.g = make_tensor(bufs.back().get(), type, cols, rows);
    if (data && bytes) {
      cpu->upload(t.c, data, bytes);
      gpu->upload(t.g, data, bytes);
    }
    return t;
  }
  T f32(const std::vector<float>& v, int64_t cols) {
    return raw(DType::F32, cols, static_cast<int64_t>(v.size()) / cols, v.data());
  }
  T i32(const std::vector<int32_t>& v, int64_t cols) {
    return raw(DType::I32, cols, static_cast<int64_t>(v.size()) / cols, v.data());
  }
  T zeros(int64_t cols, int64_t rows) { return f32(std::vector<float>(static_cast<size_t>(cols * rows)), cols); }
  static std::vector<float> get(Backend& be, const Tensor& t) {
    std::vector<float> v(static_cast<size_t>(t.numel()));
    be.download(v.data(), t, v.size() * 4);
    return v;
  }
  std::vector<float> getc(const T& t) { return get(*cpu, t.c); }
  std::vector<float> getg(const T& t) { return get(*gpu, t.g); }
};

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}
#define EXPECT_SAME_BITS(a, b) EXPECT_TRUE(same_bits(a, b)) << "first difference at " << first_diff(a, b)
size_t first_diff(const std::vector<float>& a, const std::vector<float>& b) {
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i)
    if (std::memcmp(&a[i], &b[i], 4) != 0) return i;
  return std::min(a.size(), b.size());
}

const DType kWeightTypes[] = {DType::F32,  DType::F16,  DType::BF16, DType::Q4_0, DType::Q4_1,
                              DType::Q5_0, DType::Q5_1, DType::Q8_0, DType::Q2_K, DType::Q3_K,
                              DType::Q4_K, DType::Q5_K, DType::Q6_K};

// ---- host-only logic ----------------------------------------------------------------------

TEST(CudaArena, AllocatesFirstFitAndCoalesces) {
  cuda_arena::Arena a(4096);
  auto x = a.allocate(100), y = a.allocate(256), z = a.allocate(1000);
  EXPECT_EQ(x.offset, 0u);
  EXPECT_EQ(x.size, 256u);  // 256-byte granules
  EXPECT_EQ(y.offset, 256u);
  EXPECT_EQ(z.offset, 512u);
  EXPECT_EQ(z.size, 1024u);
  EXPECT_TRUE(x.fresh && y.fresh && z.fresh);
  EXPECT_EQ(a.used(), 1536u);
  a.free(y.offset);
  auto w = a.allocate(200);  // reuses y's hole: not fresh memory
  EXPECT_EQ(w.offset, 256u);
  EXPECT_FALSE(w.fresh);
  a.free(w.offset);
  a.free(x.offset);
  EXPECT_EQ(a.largest_free(), 4096u - 1536u);  // [0, 512) coalesced, the tail after z larger
  a.free(z.offset);
  EXPECT_EQ(a.largest_free(), 4096u);  // everything merged back
  EXPECT_EQ(a.used(), 0u);
  EXPECT_EQ(a.peak(), 1536u);
  EXPECT_THROW(a.free(12345), std::logic_error);
}

TEST(CudaArena, OutOfMemoryNamesTheRequestAndAFittingSize) {
  cuda_arena::Arena a(size_t{1} << 20);
  auto x = a.allocate(600 << 10, "weights");
  try {
    a.allocate(700 << 10, "KV cache");
    FAIL() << "no error";
  } catch (const cuda_arena::ArenaOutOfMemory& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("KV cache"), std::string::npos) << m;
    EXPECT_NE(m.find("--gpu-mem"), std::string::npos) << m;
    // The largest hole is 424 KiB, so 276 KiB more would have fitted it.
    EXPECT_EQ(e.would_fit(), (size_t{1} << 20) + (700u << 10) - (424u << 10));
    cuda_arena::Arena bigger(e.would_fit());
    bigger.allocate(600 << 10);
    EXPECT_NO_THROW(bigger.allocate(700 << 10));
  }
  a.free(x.offset);
}

TEST(CudaBackend, BuffersComeFromOneArena) {
  auto be = cuda_under_test(size_t{4} << 20);
  EXPECT_EQ(be->kind(), DeviceKind::CUDA);
  EXPECT_NE(be->name().find("cuda"), std::string::npos);
  EXPECT_NE(be->description().find("paged attention"), std::string::npos);
  auto a = be->alloc(1 << 20);
  auto z = be->alloc_zeroed(2 << 20);
  std::vector<float> back(16, 1.0f);
  be->download(back.data(), make_tensor(z.get(), DType::F32, 16), 64);
  EXPECT_EQ(back, std::vector<float>(16, 0.0f));
  EXPECT_THROW(be->alloc(2 << 20), cuda_arena::ArenaOutOfMemory);
  a.reset();
  EXPECT_NO_THROW(be->alloc(1 << 20));
  // Freed memory handed out again as a zeroed reserve is cleared.
  auto b = be->alloc(1 << 20);
  std::vector<float> ones(256, 1.0f);
  be->upload(make_tensor(b.get(), DType::F32, 256), ones.data(), 1024);
  b.reset();
  auto z2 = be->alloc_zeroed(1 << 20);
  be->download(back.data(), make_tensor(z2.get(), DType::F32, 16), 64);
  EXPECT_EQ(back, std::vector<float>(16, 0.0f));
  // A tensor of another backend is refused.
  auto cpu = make_cpu_backend(1);
  auto cb = cpu->alloc(64);
  Tensor ct = make_tensor(cb.get(), DType::F32, 16);
  EXPECT_THROW(be->scale(ct, 2.0f), std::logic_error);
  // A buffer may outlive its backend (it keeps the device memory alive; ASan checks).
  auto be2 = cuda_under_test(size_t{1} << 20);
  auto keep = be2->alloc(4096);
  be2.reset();
  keep.reset();
}

TEST(BackendFactory, ChoosesAndExplains) {
  BackendOptions o;
  o.device = "cpu";
  o.cpu_threads = 1;
  EXPECT_EQ(make_backend(o)->kind(), DeviceKind::CPU);
  o.device = "cuda-emulated";
  o.gpu_mem_bytes = 1 << 20;
  EXPECT_EQ(make_backend(o)->kind(), DeviceKind::CUDA);
  o.device = "tpu";
  EXPECT_THROW(make_backend(o), std::invalid_argument);
  // This machine has no GPU (CI): auto falls back with one line, cuda is an error. With
  // a device present, both give the CUDA backend.
  o.device = "auto";
  std::string reason;
  auto be = make_backend(o, &reason);
  if (be->kind() == DeviceKind::CPU) {
    EXPECT_NE(reason.find("using the CPU backend"), std::string::npos) << reason;
    EXPECT_EQ(reason.find('\n'), std::string::npos);
    o.device = "cuda";
    EXPECT_THROW(make_backend(o), std::runtime_error);
  } else {
    EXPECT_TRUE(reason.empty());
  }
  EXPECT_EQ(parse_memory_size("24G"), size_t{24} << 30);
  EXPECT_EQ(parse_memory_size("512MiB"), size_t{512} << 20);
  EXPECT_EQ(parse_memory_size("1.5g"), size_t{3} << 29);
  EXPECT_EQ(parse_memory_size("4096"), 4096u);
  EXPECT_THROW(parse_memory_size("lots"), std::invalid_argument);
  EXPECT_THROW(parse_memory_size("3X"), std::invalid_argument);
}

// ---- row-wise ops -------------------------------------------------------------------------

// Dequantization performs the reference's float operations in its order (no contraction):
// identical bits for every weight type.
TEST(CudaOps, GetRowsEveryWeightTypeBitIdentical) {
  for (DType t : kWeightTypes) {
    SCOPED_TRACE(dtype_name(t));
    Dual d;
    const int64_t cols = 512, rows = 7;
    const auto blob = test::random_blocks(t, cols * rows, 77);
    auto table = d.raw(t, cols, rows, blob.data());
    auto ids = d.i32({3, 0, 6, 3, 1}, 5);
    auto out = d.zeros(cols, 5);
    d.cpu->get_rows(out.c, table.c, ids.c);
    d.gpu->get_rows(out.g, table.g, ids.g);
    EXPECT_SAME_BITS(d.getc(out), d.getg(out));
  }
  Dual d;
  auto table = d.f32(randn(4 * 8, 1), 8);
  auto bad = d.i32({1, 4}, 2);
  auto out = d.zeros(8, 2);
  d.gpu->get_rows(out.g, table.g, bad.g);
  EXPECT_THROW(d.gpu->synchronize(), std::out_of_range);
  EXPECT_NO_THROW(d.gpu->synchronize());  // reported once
}

// Both accumulate the sum of squares in double (in different orders: relative difference
// ~n 2^-53), so 1/rms rounds to the same float or a neighbour; with the two roundings of
// x*inv*(w+off) the results differ by at most 2 ulp.
TEST(CudaOps, RmsNorm) {
  for (auto [rows, cols, off] : {std::tuple{5, 37, 0.0f}, {3, 1000, 1.0f}, {1, 4097, 0.0f}}) {
    Dual d;
    auto x = d.f32(randn(size_t(rows) * cols, 1, 3.0f), cols);
    auto w = d.f32(randn(cols, 2), cols);
    auto y = d.zeros(cols, rows);
    d.cpu->rms_norm(y.c, x.c, w.c, 1e-5f, off);
    d.gpu->rms_norm(y.g, x.g, w.g, 1e-5f, off);
    const auto a = d.getc(y), b = d.getg(y);
    for (size_t i = 0; i < a.size(); ++i) ASSERT_LE(std::fabs(a[i] - b[i]), 4 * kU * std::fabs(a[i])) << i;
    d.gpu->rms_norm(x.g, x.g, w.g, 1e-5f, off);  // in place
    EXPECT_SAME_BITS(d.getg(x), b);
  }
}

// One rounding per element, same operation: identical.
TEST(CudaOps, AddMulScaleBroadcastBitIdentical) {
  Dual d;
  const int cols = 300, rows = 4;
  auto a = d.f32(randn(rows * cols, 3), cols), b = d.f32(randn(rows * cols, 4), cols), b1 = d.f32(randn(cols, 5), cols);
  for (int op = 0; op < 2; ++op)
    for (auto* bb : {&b, &b1}) {
      auto y = d.zeros(cols, rows);
      if (op == 0) d.cpu->add(y.c, a.c, bb->c), d.gpu->add(y.g, a.g, bb->g);
      else d.cpu->mul(y.c, a.c, bb->c), d.gpu->mul(y.g, a.g, bb->g);
      EXPECT_SAME_BITS(d.getc(y), d.getg(y));
    }
  d.cpu->add(a.c, a.c, b1.c);  // dst aliasing a
  d.gpu->add(a.g, a.g, b1.g);
  d.cpu->scale(a.c, 0.37f);
  d.gpu->scale(a.g, 0.37f);
  EXPECT_SAME_BITS(d.getc(a), d.getg(a));
}

// expf/tanhf: the host's libm here, CUDA's (<= 2 ulp) on a device. SiLU g/(1+e^-g)*u: a
// 2-ulp exp error gives <= 2 ulp in 1+e^-g, and with three roundings <= 6 ulp of y. GELU:
// the error of tanh (<= 2 ulp of a value <= 1) is multiplied by 0.5|g u|, plus 4 roundings.
TEST(CudaOps, GatedActivations) {
  Dual d;
  const int cols = 257, rows = 3;
  auto g = d.f32(randn(rows * cols, 6, 3.0f), cols), u = d.f32(randn(rows * cols, 7), cols);
  const auto gv = d.getc(g), uv = d.getc(u);
  for (Activation act : {Activation::SiLU, Activation::GeluTanh}) {
    auto y = d.zeros(cols, rows);
    d.cpu->gated_act(y.c, g.c, u.c, act);
    d.gpu->gated_act(y.g, g.g, u.g, act);
    const auto a = d.getc(y), b = d.getg(y);
    for (size_t i = 0; i < a.size(); ++i) {
      const double tol = act == Activation::SiLU ? 12 * kU * std::fabs(a[i])
                                                 : 8 * kU * std::fabs(a[i]) + 4 * kU * std::fabs(gv[i] * uv[i]);
      ASSERT_LE(std::fabs(a[i] - b[i]), tol) << i;
    }
  }
}

// Angles, cos and sin in double on both; a device's double cos/sin (<= 2 ulp of double)
// can round to the neighbouring float at most, so each rotated value differs by at most
// 1 ulp of |x0| + |x1| (plus the two roundings of the products and the sum).
TEST(CudaOps, RopeNormalNeoxPartial) {
  for (auto [style, rope_dims] : {std::tuple{RopeStyle::Normal, 16}, {RopeStyle::NeoX, 16}, {RopeStyle::NeoX, 6},
                                  {RopeStyle::Normal, 10}}) {
    Dual d;
    const int n_heads = 3, hd = 16, n = 5;
    const auto xv = randn(n * (n_heads * hd + 4), 8);  // rows longer than the heads
    auto x = d.f32(xv, n_heads * hd + 4);
    auto pos = d.i32({0, 1, 17, 1000, 32767}, 5);
    d.cpu->rope(x.c, pos.c, n_heads, hd, rope_dims, 10000.0f, style);
    d.gpu->rope(x.g, pos.g, n_heads, hd, rope_dims, 10000.0f, style);
    const auto a = d.getc(x), b = d.getg(x);
    for (size_t i = 0; i < a.size(); ++i) ASSERT_LE(std::fabs(a[i] - b[i]), 4 * kU * (std::fabs(a[i]) + 8)) << i;
  }
}

TEST(CudaOps, KvStoreF32AndF16BitIdentical) {
  for (DType ct : {DType::F32, DType::F16}) {
    SCOPED_TRACE(dtype_name(ct));
    Dual d;
    const int kvw = 24, slots = 10;
    auto kc = d.raw(ct, kvw, slots, nullptr), vc = d.raw(ct, kvw, slots, nullptr);
    d.cpu->fill_zero(kc.c), d.cpu->fill_zero(vc.c), d.gpu->fill_zero(kc.g), d.gpu->fill_zero(vc.g);
    auto k = d.f32(randn(3 * kvw, 9, 100.0f), kvw), v = d.f32(randn(3 * kvw, 10), kvw);
    // The second token's K and V are not stored (a padding lane): not an error.
    auto sm = d.i32({7, kNoKvSlot, 2}, 3);
    PagedAttnMeta mc, mg;
    mc.slot_mapping = sm.c;
    mg.slot_mapping = sm.g;
    d.cpu->kv_store({kc.c, vc.c}, k.c, v.c, mc);
    d.gpu->kv_store({kc.g, vc.g}, k.g, v.g, mg);
    EXPECT_NO_THROW(d.gpu->synchronize());
    const size_t row = row_bytes(ct, kvw), bytes = row * slots;
    std::vector<uint8_t> a(bytes), b(bytes);
    for (auto* t : {&kc, &vc}) {
      d.cpu->download(a.data(), t->c, bytes);
      d.gpu->download(b.data(), t->g, bytes);
      EXPECT_EQ(a, b);
      for (size_t s = 0; s < size_t(slots); ++s) {
        if (s == 7 || s == 2) continue;
        EXPECT_EQ(std::count(a.begin() + s * row, a.begin() + (s + 1) * row, 0), ptrdiff_t(row)) << "slot " << s;
      }
    }
    auto bad = d.i32({10, 0, 1}, 3);
    mg.slot_mapping = bad.g;
    d.gpu->kv_store({kc.g, vc.g}, k.g, v.g, mg);
    EXPECT_THROW(d.gpu->synchronize(), std::out_of_range);
  }
}

// The fused attention inputs (one launch: biases, rope of q and k, the KV store) give the bits
// of the ops one by one (Backend::attention_inputs, the default), on every variant the models
// use: Qwen2's biases or none, NeoX or normal rotation, partial rotary dims, F16 or F32
// caches, GQA; a slot outside the cache is still reported.
TEST(CudaOps, AttentionInputsFusedGivesTheOpsBits) {
  struct Case {
    bool biases;
    RopeStyle style;
    int rope_dims;
    DType cache;
    bool norms = false;  // Gemma 3's per-head q and k norms
  };
  for (const Case& c : {Case{true, RopeStyle::NeoX, 16, DType::F16}, Case{false, RopeStyle::Normal, 16, DType::F32},
                        Case{true, RopeStyle::Normal, 8, DType::F32}, Case{false, RopeStyle::NeoX, 12, DType::F16},
                        Case{false, RopeStyle::NeoX, 16, DType::F16, true}, Case{true, RopeStyle::Normal, 12, DType::F32, true}}) {
    SCOPED_TRACE(std::to_string(c.biases) + " " + std::to_string(c.rope_dims) + " " + dtype_name(c.cache) +
                 (c.norms ? " norms" : ""));
    Dual d;
    const int nh = 6, nkv = 2, hd = 16, n = 5, slots = 12;
    Tensor kc[2], vc[2], q[2], k[2], v[2];
    std::vector<Dual::T> keep;
    for (int r = 0; r < 2; ++r) {  // 0: fused, 1: the default's ops
      keep.push_back(d.raw(c.cache, nkv * hd, slots, nullptr));
      kc[r] = keep.back().g;
      keep.push_back(d.raw(c.cache, nkv * hd, slots, nullptr));
      vc[r] = keep.back().g;
      d.gpu->fill_zero(kc[r]), d.gpu->fill_zero(vc[r]);
      keep.push_back(d.f32(randn(n * nh * hd, 20, 3.0f), nh * hd));
      q[r] = keep.back().g;
      keep.push_back(d.f32(randn(n * nkv * hd, 21, 3.0f), nkv * hd));
      k[r] = keep.back().g;
      keep.push_back(d.f32(randn(n * nkv * hd, 22), nkv * hd));
      v[r] = keep.back().g;
    }
    auto bq = d.f32(randn(nh * hd, 23), nh * hd), bk = d.f32(randn(nkv * hd, 24), nkv * hd),
         bv = d.f32(randn(nkv * hd, 25), nkv * hd);
    auto qn = d.f32(randn(hd, 26), hd), kn = d.f32(randn(hd, 27), hd);
    auto pos = d.i32({0, 7, 300, 4095, 65000}, n);
    auto sm = d.i32({3, kNoKvSlot, 11, 6, 1}, n);  // token 1: a padding lane, stores nothing
    PagedAttnMeta meta;
    meta.slot_mapping = sm.g;
    for (int r = 0; r < 2; ++r) {
      Backend::AttnInputs a;
      a.q = q[r], a.k = k[r], a.v = v[r];
      if (c.biases) a.bq = bq.g, a.bk = bk.g, a.bv = bv.g;
      if (c.norms) a.q_norm = qn.g, a.k_norm = kn.g, a.norm_eps = 1e-6f;
      a.positions = pos.g;
      a.n_heads = nh, a.n_kv_heads = nkv, a.head_dim = hd, a.rope_dims = c.rope_dims;
      a.theta = 1e6f, a.style = c.style;
      const int64_t before = cuda_launch_count(*d.gpu);
      if (r == 0) d.gpu->attention_inputs(a, {kc[r], vc[r]}, meta);
      else d.gpu->Backend::attention_inputs(a, {kc[r], vc[r]}, meta);
      EXPECT_EQ(cuda_launch_count(*d.gpu) - before, r == 0 ? 1 : (c.biases ? 6 : 3) + (c.norms ? 2 : 0));
    }
    auto get = [&](const Tensor& t) {
      std::vector<uint8_t> b(t.bytes());
      d.gpu->download(b.data(), t, b.size());
      return b;
    };
    EXPECT_EQ(get(q[0]), get(q[1]));
    EXPECT_EQ(get(k[0]), get(k[1]));
    EXPECT_EQ(get(kc[0]), get(kc[1]));
    EXPECT_EQ(get(vc[0]), get(vc[1]));
    EXPECT_NO_THROW(d.gpu->synchronize());
    auto bad = d.i32({3, 0, 12, 6, 1}, n);
    meta.slot_mapping = bad.g;
    Backend::AttnInputs a;
    a.q = q[0], a.k = k[0], a.v = v[0], a.positions = pos.g;
    a.n_heads = nh, a.n_kv_heads = nkv, a.head_dim = hd, a.rope_dims = c.rope_dims, a.theta = 1e6f;
    d.gpu->attention_inputs(a, {kc[0], vc[0]}, meta);
    EXPECT_THROW(d.gpu->synchronize(), std::out_of_range);
  }
}

// ---- matmul -----------------------------------------------------------------------------------

// Byte ranges holding the codes of a block: zeroing them leaves each element at its
// group's offset (the value of code 0: -8d, m, -ml, -4dl, -32dl, ...).
std::pair<int, int> code_bytes(DType t) {
  switch (t) {
    case DType::Q4_0: return {2, 18};
    case DType::Q4_1: return {4, 20};
    case DType::Q5_0: return {2, 22};
    case DType::Q5_1: return {4, 24};
    case DType::Q2_K: return {16, 80};
    case DType::Q3_K: return {0, 96};
    case DType::Q4_K: return {16, 144};
    case DType::Q5_K: return {16, 176};
    case DType::Q6_K: return {0, 192};
    default: return {0, 0};
  }
}

// Both backends compute each weight block's contribution from the same int8 activations
// and the same exact integer dot products, with the same float operations; they differ in
// the order the nb = C/block contributions are summed (CPU: in order; CUDA: 32 lanes,
// then a tree). Each contribution is d*dx*sum(q*xq) (+ offset terms) whose magnitude is at
// most sum_c (|w_c - o_c| + |o_c|) |x'_c| (o_c: the element's offset, x' the quantized
// activation, |x'| <= |x| + amax/254); summing nb of them in two orders differs by at most
// 2 (nb + 4) u times that sum (4: the roundings inside a contribution). Float weights:
// C products summed in two orders: 2 C u sum |w x|.
double matmul_tolerance(DType t, const std::vector<uint8_t>& blob, int64_t r, int64_t C, const float* x) {
  const auto& info = dtype_info(t);
  const size_t rb = row_bytes(t, C);
  std::vector<float> w(C), o(C, 0.0f);
  cpu::dequantize_row_ref(t, blob.data() + r * rb, w.data(), C);
  const auto [c0, c1] = code_bytes(t);
  if (c1 > c0) {
    std::vector<uint8_t> z(blob.begin() + r * rb, blob.begin() + (r + 1) * rb);
    for (int64_t b = 0; b < C / info.block_size; ++b)
      std::memset(z.data() + b * info.type_size + c0, 0, static_cast<size_t>(c1 - c0));
    cpu::dequantize_row_ref(t, z.data(), o.data(), C);
  }
  double s = 0;
  const int bs = info.block_size == 256 ? 256 : 32;
  for (int64_t c = 0; c < C; ++c) {
    double amax = 0;
    if (info.block_size > 1)
      for (int64_t i = c / bs * bs; i < c / bs * bs + bs; ++i) amax = std::max(amax, double(std::fabs(x[i])));
    s += (std::fabs(double(w[c]) - o[c]) + std::fabs(double(o[c]))) * (std::fabs(double(x[c])) + amax / 254);
  }
  const double n_terms = info.block_size > 1 ? double(C / info.block_size) + 4 : double(C);
  return 2 * n_terms * kU * s;
}

struct MatmulCase {
  Dual d;
  DType t;
  int64_t R, C, N;
  std::vector<uint8_t> blob;
  std::vector<float> x;
  Dual::T w, xt;
  MatmulCase(DType type, int64_t r, int64_t c, int64_t n, uint32_t seed) : t(type), R(r), C(c), N(n) {
    blob = test::random_blocks(t, R * C, seed);
    x = randn(static_cast<size_t>(N * C), seed + 1);
    w = d.raw(t, C, R, blob.data());
    xt = d.f32(x, C);
  }
  // Tokens [t0, t0 + n) on the emulated CUDA backend.
  std::vector<float> gpu(int64_t t0, int64_t n) {
    auto y = d.zeros(R, n);
    d.gpu->matmul(y.g, w.g, xt.g.slice_rows(t0, n));
    return d.getg(y);
  }
  std::vector<float> cpu_all() {
    auto y = d.zeros(R, N);
    d.cpu->matmul(y.c, w.c, xt.c);
    return d.getc(y);
  }
};

// The CPU's scalar kernels (cpu::matmul at Isa::Scalar, weights in the file's layout): the
// bits the CUDA backend's quantized matmuls must give.
std::vector<float> scalar_reference(const MatmulCase& mc) {
  const cpu::Isa saved = cpu::active_isa();
  cpu::force_isa(cpu::Isa::Scalar);
  cpu::ThreadPool pool(1);
  std::vector<float> y(static_cast<size_t>(mc.N * mc.R));
  cpu::matmul(pool, mc.t, mc.blob.data(), row_bytes(mc.t, mc.C), mc.R, mc.C, mc.x.data(), mc.C, mc.N, y.data(), mc.R);
  cpu::force_isa(saved);
  return y;
}

// Sets TANDEM_CUDA_MMA_MIN_TOKENS for the backends made while it lives.
struct MmaMinTokens {
  explicit MmaMinTokens(int n) { setenv("TANDEM_CUDA_MMA_MIN_TOKENS", std::to_string(n).c_str(), 1); }
  ~MmaMinTokens() { unsetenv("TANDEM_CUDA_MMA_MIN_TOKENS"); }
};

// Every weight type, odd row counts (not a multiple of a kernel's rows per block), row
// lengths of 1, 3 and 9 blocks, M = 1..17 alone and batches up to 70 tokens (both matmul
// kernels: __dp4a below 17 tokens, tensor cores from there on): each token's row is
// bit-identical to the same token computed alone; quantized weights give the CPU's scalar
// reference bit for bit, float weights match the CPU within the bound above.
TEST(CudaOps, MatmulEveryWeightTypeAgainstCpuAndBatchInvariant) {
  const auto start = std::chrono::steady_clock::now();
  for (DType t : kWeightTypes) {
    const int64_t bs = dtype_info(t).block_size;
    const int64_t C = bs == 256 ? 256 * 3 : (bs == 32 ? 32 * 9 : 37);
    SCOPED_TRACE(dtype_name(t));
    MatmulCase mc(t, 67, C, 70, 100 + static_cast<uint32_t>(t));
    const bool exact = bs > 1;
    const auto ref = exact ? scalar_reference(mc) : mc.cpu_all();
    std::vector<std::vector<float>> alone;
    for (int64_t i = 0; i < 17; ++i) alone.push_back(mc.gpu(i, 1));
    for (int64_t i = 0; i < 17; ++i)
      for (int64_t r = 0; r < mc.R; ++r) {
        if (exact) {
          ASSERT_TRUE(same_bits(std::vector<float>{alone[i][r]}, std::vector<float>{ref[i * mc.R + r]}))
              << "token " << i << " row " << r << ": " << alone[i][r] << " vs the scalar kernel's " << ref[i * mc.R + r];
          continue;
        }
        const double tol = matmul_tolerance(t, mc.blob, r, C, mc.x.data() + i * C);
        ASSERT_LE(std::fabs(alone[i][r] - ref[i * mc.R + r]), tol) << "token " << i << " row " << r;
      }
    for (int64_t n : {2, 3, 8, 16, 17, 33, 70}) {
      const auto y = mc.gpu(0, n);
      for (int64_t i = 0; i < n; ++i) {
        const std::vector<float> row(y.begin() + i * mc.R, y.begin() + (i + 1) * mc.R);
        if (i < 17) {
          ASSERT_TRUE(same_bits(row, alone[i])) << "M=" << n << " token " << i;
        } else if (exact) {
          const std::vector<float> want(ref.begin() + i * mc.R, ref.begin() + (i + 1) * mc.R);
          ASSERT_TRUE(same_bits(row, want)) << "M=" << n << " token " << i << " against the scalar kernel";
        }
      }
    }
  }
  RecordProperty("seconds", std::to_string(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()));
}

// Long rows split among 2 or 4 warps of a block in the small-M kernel (a decode pass's down
// projection: the warps' parts summed in block order): the CPU's scalar reference bit for bit,
// for every quantized type, with rounds that end inside a warp's share, 37 rows (not a
// multiple of a block's rows), in the file's layout and in planes.
TEST(CudaOps, MatmulSplitsLongRowsAmongWarpsWithTheSameBits) {
  for (DType t : kWeightTypes) {
    const int64_t bs = dtype_info(t).block_size;
    if (bs == 1) continue;
    const int groups = bs == 32 ? 8 : 4;
    for (int64_t blocks : {int64_t{2} * groups, int64_t{4} * groups, int64_t{4} * groups + 3}) {
      const int64_t C = blocks * bs;
      SCOPED_TRACE(testing::Message() << dtype_name(t) << ", " << blocks << " blocks a row");
      MatmulCase mc(t, 37, C, 16, 500 + static_cast<uint32_t>(C));
      const auto ref = scalar_reference(mc);
      Backend& gpu = *mc.d.gpu;
      std::unique_ptr<Buffer> buf;
      Tensor pw;
      if (gpu.packs_weights(t)) {
        buf = gpu.pack_weight(t, mc.blob.data(), mc.R, C);
        pw = make_tensor(buf.get(), t, C, mc.R);
        pw.layout = gpu.packed_layout(t);
        pw.nb1 = gpu.packed_row_stride(t, C);
      }
      for (int64_t n : {1, 3, 16}) {
        const std::vector<float> want(ref.begin(), ref.begin() + n * mc.R);
        ASSERT_TRUE(same_bits(mc.gpu(0, n), want)) << "M=" << n;
        if (!buf) continue;
        auto y = mc.d.zeros(mc.R, n);
        gpu.matmul(y.g, pw, mc.xt.g.slice_rows(0, n));
        ASSERT_TRUE(same_bits(mc.d.getg(y), want)) << "planes, M=" << n;
      }
    }
  }
}

// Q4_0, Q5_0, Q8_0 and Q6_K matrices repacked at load into planes (the backend's
// pack_weight, as Model::load asks for it): rows padded to 16 bytes, and the same bits as the
// file's layout (the CPU's scalar reference) at every token count of both kernels (__dp4a
// and tensor cores), alone and in matmul_shared beside a member in the file's layout (a
// launch each: members of one launch share a layout). Row lengths of 1, 3 and 7 blocks (odd
// rows are not multiples of 16 bytes in the file's layout). get_rows refuses the planes.
TEST(CudaOps, WeightPlanesGiveTheFileLayoutsBits) {
  for (DType t : {DType::Q4_0, DType::Q5_0, DType::Q8_0, DType::Q6_K}) {
    for (int64_t blocks : {1, 3, 7}) {
      const int64_t C = blocks * dtype_info(t).block_size;
      SCOPED_TRACE(testing::Message() << dtype_name(t) << ", " << C << " columns");
      MatmulCase mc(t, 37, C, 40, 300 + static_cast<uint32_t>(C));
      Backend& gpu = *mc.d.gpu;
      ASSERT_TRUE(gpu.packs_weights(t));
      std::unique_ptr<Buffer> buf = gpu.pack_weight(t, mc.blob.data(), mc.R, C);
      ASSERT_TRUE(buf);
      Tensor pw = make_tensor(buf.get(), t, C, mc.R);
      pw.layout = gpu.packed_layout(t);
      pw.nb1 = gpu.packed_row_stride(t, C);
      EXPECT_EQ(pw.row_stride() % 16, 0u);
      EXPECT_LT(pw.row_stride() - row_bytes(t, C), 16u);
      const auto ref = scalar_reference(mc);
      for (int64_t n : {1, 5, 16, 17, 40}) {
        auto y = mc.d.zeros(mc.R, n);
        gpu.matmul(y.g, pw, mc.xt.g.slice_rows(0, n));
        const std::vector<float> want(ref.begin(), ref.begin() + n * mc.R);
        ASSERT_TRUE(same_bits(mc.d.getg(y), want)) << "M=" << n;
      }
      for (int64_t n : {3, 40}) {
        auto y1 = mc.d.zeros(mc.R, n), y2 = mc.d.zeros(mc.R, n);
        const Backend::MatmulTarget tg[] = {{y1.g, pw}, {y2.g, mc.w.g}};
        const int64_t before = cuda_launch_count(gpu);
        gpu.matmul_shared(mc.xt.g.slice_rows(0, n), tg, 2);
        EXPECT_EQ(cuda_launch_count(gpu) - before, 3) << "one quantization, a launch per layout";
        const std::vector<float> want(ref.begin(), ref.begin() + n * mc.R);
        ASSERT_TRUE(same_bits(mc.d.getg(y1), want)) << "planes, M=" << n;
        ASSERT_TRUE(same_bits(mc.d.getg(y2), want)) << "file layout, M=" << n;
      }
      auto ids = mc.d.i32({0, 1}, 2);
      auto rows = mc.d.zeros(C, 2);
      EXPECT_THROW(gpu.get_rows(rows.g, pw, ids.g), std::exception);
    }
  }
}

// Float weights on TF32 tensor cores at every token count: rows of whole 32-column chunks
// (16-byte loads) and of a ragged last chunk (element loads), odd row counts; each token's
// row is the same bits alone (M = 1) and in batches of 5 and 45 (two token blocks), and
// within float rounding of the CPU's dot products (the split operands keep about float's
// precision: plain TF32 products, 10 fraction bits, exceed the bound several times over).
TEST(CudaOps, MatmulFloatWeightsOnTensorCoresAtEveryTokenCount) {
  for (DType t : {DType::F32, DType::F16, DType::BF16})
    for (int64_t C : {96, 100}) {
      SCOPED_TRACE(std::string(dtype_name(t)) + " C=" + std::to_string(C));
      MatmulCase mc(t, 35, C, 45, 900 + static_cast<uint32_t>(t) + static_cast<uint32_t>(C));
      const auto ref = mc.cpu_all();
      const auto all = mc.gpu(0, 45), some = mc.gpu(40, 5);
      for (int64_t i = 0; i < 45; ++i) {
        const std::vector<float> row(all.begin() + i * mc.R, all.begin() + (i + 1) * mc.R);
        if (i % 11 == 0 || i >= 40) {
          ASSERT_TRUE(same_bits(row, mc.gpu(i, 1))) << "token " << i << " alone";
        }
        if (i >= 40) {
          ASSERT_TRUE(same_bits(row, std::vector<float>(some.begin() + (i - 40) * mc.R, some.begin() + (i - 39) * mc.R)))
              << "token " << i << " in a batch of 5";
        }
        for (int64_t r = 0; r < mc.R; ++r)
          ASSERT_LE(std::fabs(row[r] - ref[i * mc.R + r]), matmul_tolerance(t, mc.blob, r, C, mc.x.data() + i * C))
              << "token " << i << " row " << r;
      }
    }
}

// Either kernel for any token count: the tensor-core one down to one token, the __dp4a one
// up to many (16 tokens per weight read, grid.y over the rest), the same bits.
TEST(CudaOps, MatmulKernelsAreInterchangeableAtEveryTokenCount) {
  for (DType t : {DType::Q4_0, DType::Q5_1, DType::Q8_0, DType::Q3_K, DType::Q4_K, DType::Q6_K}) {
    SCOPED_TRACE(dtype_name(t));
    const int64_t C = dtype_info(t).block_size == 256 ? 512 : 96;
    std::vector<std::vector<float>> got;
    for (int k : {1, 1000}) {
      MmaMinTokens env(k);
      MatmulCase mc(t, 21, C, 41, 300 + static_cast<uint32_t>(t));
      got.push_back(mc.gpu(0, 41));
      const auto one = mc.gpu(40, 1);
      const std::vector<float> last(got.back().end() - mc.R, got.back().end());
      ASSERT_TRUE(same_bits(one, last)) << "mma from " << k << " tokens";
    }
    EXPECT_TRUE(same_bits(got[0], got[1]));
  }
}

// The quantized kernels load block fields a word or 16 bytes at a time: a weight view whose
// blocks are not aligned as whole-block rows from an arena granule are is refused with a
// clear error (on a GPU the load would fault), and the emulator checks each such load too.
TEST(CudaOps, MatmulRefusesMisalignedQuantizedWeights) {
  Dual d;
  const int64_t C = 256, R = 3;
  const auto blob = test::random_blocks(DType::Q4_K, R * C, 9);
  auto x = d.f32(randn(C, 10), C);
  auto y = d.zeros(R, 1);
  auto buf = d.gpu->alloc(blob.size() + 64);
  for (size_t off : {size_t{0}, size_t{16}, size_t{8}, size_t{2}}) {
    SCOPED_TRACE(off);
    d.gpu->upload(make_tensor(buf.get(), DType::I8, static_cast<int64_t>(blob.size()), 1, off), blob.data(), blob.size());
    const Tensor w = make_tensor(buf.get(), DType::Q4_K, C, R, off);
    if (off % 16 == 0) {
      d.gpu->matmul(y.g, w, x.g);
    } else {
      try {
        d.gpu->matmul(y.g, w, x.g);
        ADD_FAILURE() << "a misaligned Q4_K view was multiplied";
      } catch (const std::logic_error& e) {
        EXPECT_NE(std::string(e.what()).find("aligned to 16 bytes"), std::string::npos) << e.what();
      }
    }
  }
}

// matmul_shared gives each target the bits of its own matmul, with one activation
// quantization per block size (Q4_K and Q8_0 targets mixed).
TEST(CudaOps, MatmulSharedMatchesSingleMatmuls) {
  Dual d;
  const int64_t C = 512, N = 3;
  auto x = d.f32(randn(N * C, 50), C);
  std::vector<Dual::T> ws, ys;
  const DType types[] = {DType::Q4_K, DType::Q8_0, DType::F16, DType::Q6_K};
  for (int i = 0; i < 4; ++i) {
    const auto blob = test::random_blocks(types[i], 9 * C, 60 + i);
    ws.push_back(d.raw(types[i], C, 9, blob.data()));
    ys.push_back(d.zeros(9, N));
  }
  std::vector<Backend::MatmulTarget> tg;
  for (int i = 0; i < 4; ++i) tg.push_back({ys[i].g, ws[i].g});
  d.gpu->matmul_shared(x.g, tg.data(), 4);
  for (int i = 0; i < 4; ++i) {
    auto y = d.zeros(9, N);
    d.gpu->matmul(y.g, ws[i].g, x.g);
    EXPECT_SAME_BITS(d.getg(y), d.getg(ys[i])) << dtype_name(types[i]);
  }
}

// Targets of one weight type share one launch (and one activation quantization), and so do
// those of the pairs real models mix in a layer's q/k/v (Q4_K with Q6_K, Q5_0 with Q8_0),
// at both kernels' token counts, with each target's own bits; other mixes take a launch per
// type (and a quantization per block size).
TEST(CudaOps, MatmulSharedLaunchesOneKernelPerWeightType) {
  struct Case {
    DType types[4];
    int64_t launches;
  };
  const Case cases[] = {{{DType::Q4_K, DType::Q4_K, DType::Q6_K, DType::Q4_K}, 1 + 1},
                        {{DType::Q5_0, DType::Q8_0, DType::Q5_0, DType::Q4_0}, 1 + 2},
                        {{DType::Q6_K, DType::Q4_K, DType::Q8_0, DType::Q6_K}, 2 + 2}};
  for (const Case& c : cases)
    for (int64_t N : {3, 40}) {
      SCOPED_TRACE(testing::Message() << dtype_name(c.types[0]) << "/" << dtype_name(c.types[1]) << "/"
                                      << dtype_name(c.types[2]) << "/" << dtype_name(c.types[3]) << " N=" << N);
      Dual d;
      const int64_t C = 512;
      auto x = d.f32(randn(N * C, 51), C);
      const int64_t rows[] = {70, 13, 13, 5};
      std::vector<Dual::T> ws, ys;
      for (int i = 0; i < 4; ++i) {
        const auto blob = test::random_blocks(c.types[i], rows[i] * C, 80 + i);
        ws.push_back(d.raw(c.types[i], C, rows[i], blob.data()));
        ys.push_back(d.zeros(rows[i], N));
      }
      std::vector<Backend::MatmulTarget> tg;
      for (int i = 0; i < 4; ++i) tg.push_back({ys[i].g, ws[i].g});
      const int64_t before = cuda_launch_count(*d.gpu);
      d.gpu->matmul_shared(x.g, tg.data(), 4);
      EXPECT_EQ(cuda_launch_count(*d.gpu) - before, c.launches);
      for (int i = 0; i < 4; ++i) {
        auto y = d.zeros(rows[i], N);
        d.gpu->matmul(y.g, ws[i].g, x.g);
        EXPECT_SAME_BITS(d.getg(y), d.getg(ys[i])) << i;
      }
    }
}

// The input norm fused with the quantization its projections read (one launch instead of
// the norm and one quantization per block size) gives the ops' bits: q/k/v of mixed block
// sizes and float weights beside them, at both matmul kernels' token counts; with a pending
// post-norm residual (Gemma 3) added to x in the same launch.
TEST(CudaOps, NormMatmulSharedGivesTheBitsOfTheOps) {
  for (int64_t N : {1, 5, 40})
    for (bool pend : {false, true}) {
      SCOPED_TRACE(std::to_string(N) + (pend ? " with a pending residual" : ""));
      Dual d;
      const int64_t C = 512;
      const auto xv = randn(N * C, 61, 2.0f), ov = randn(N * C, 64, 3.0f);
      auto x = d.f32(xv, C), x1 = d.f32(xv, C), o0 = d.f32(ov, C), o1 = d.f32(ov, C);
      auto pw = d.f32(randn(C, 65), C);
      const Backend::PendingResidual p0{o0.g, pw.g, 1e-6f}, p1{o1.g, pw.g, 1e-6f};
      auto nw = d.f32(randn(C, 62), C);
      const DType types[] = {DType::Q4_K, DType::Q8_0, DType::Q6_K, DType::F16};
      std::vector<Dual::T> ws, y0, y1;
      for (int i = 0; i < 4; ++i) {
        const auto blob = test::random_blocks(types[i], 24 * C, 63 + i);
        ws.push_back(d.raw(types[i], C, 24, blob.data()));
        y0.push_back(d.zeros(24, N));
        y1.push_back(d.zeros(24, N));
      }
      auto h0 = d.zeros(C, N), h1 = d.zeros(C, N);
      std::vector<Backend::MatmulTarget> t0, t1;
      for (int i = 0; i < 4; ++i) t0.push_back({y0[i].g, ws[i].g}), t1.push_back({y1[i].g, ws[i].g});
      const int64_t before = cuda_launch_count(*d.gpu);
      d.gpu->norm_matmul_shared(h0.g, x.g, nw.g, 1e-6f, 0.0f, t0.data(), 4, pend ? &p0 : nullptr);
      const int64_t fused = cuda_launch_count(*d.gpu) - before;
      d.gpu->Backend::norm_matmul_shared(h1.g, x1.g, nw.g, 1e-6f, 0.0f, t1.data(), 4, pend ? &p1 : nullptr);
      const int64_t ops = cuda_launch_count(*d.gpu) - before - fused;
      // Norm + both quantizations (and the residual), then a launch for Q4_K with Q6_K (a pair
      // real models mix), one for Q8_0 and one for F16.
      EXPECT_EQ(fused, 1 + 3);
      // the residual, the norm, a quantization per block size, the matmuls
      EXPECT_EQ(ops, (pend ? 1 : 0) + 1 + 2 + 3);
      EXPECT_SAME_BITS(d.getg(x), d.getg(x1));
      EXPECT_SAME_BITS(d.getg(o0), d.getg(o1));
      EXPECT_SAME_BITS(d.getg(h0), d.getg(h1));
      for (int i = 0; i < 4; ++i) EXPECT_SAME_BITS(d.getg(y0[i]), d.getg(y1[i])) << dtype_name(types[i]);
      if (!pend) continue;
      // Float weights alone: nothing to quantize, the residual and the norm still one launch.
      auto x2 = d.f32(xv, C), x3 = d.f32(xv, C), o2 = d.f32(ov, C), o3 = d.f32(ov, C);
      const Backend::PendingResidual p2{o2.g, pw.g, 1e-6f}, p3{o3.g, pw.g, 1e-6f};
      const int64_t before2 = cuda_launch_count(*d.gpu);
      d.gpu->norm_matmul_shared(h0.g, x2.g, nw.g, 1e-6f, 0.0f, &t0[3], 1, &p2);
      EXPECT_EQ(cuda_launch_count(*d.gpu) - before2, 2);
      d.gpu->Backend::norm_matmul_shared(h1.g, x3.g, nw.g, 1e-6f, 0.0f, &t1[3], 1, &p3);
      EXPECT_SAME_BITS(d.getg(x2), d.getg(x3));
      EXPECT_SAME_BITS(d.getg(h0), d.getg(h1));
      EXPECT_SAME_BITS(d.getg(y0[3]), d.getg(y1[3]));
    }
}

// The feed-forward activation fused with the quantization the down projection reads, and
// the residual add in that projection's epilogue (act_matmul_residual) or none (act_matmul,
// a post-normed block's): the ops' bits, SiLU and GELU, both quantized block sizes, both
// matmul kernels.
TEST(CudaOps, ActMatmulResidualGivesTheBitsOfTheOps) {
  for (Activation act : {Activation::SiLU, Activation::GeluTanh})
    for (DType t : {DType::Q4_K, DType::Q8_0})
      for (int64_t N : {2, 40}) {
        SCOPED_TRACE(std::string(dtype_name(t)) + " N=" + std::to_string(N));
        Dual d;
        const int64_t C = 512, R = 33;
        const auto blob = test::random_blocks(t, R * C, 70);
        auto w = d.raw(t, C, R, blob.data());
        const auto g = randn(N * C, 71, 2.0f), u = randn(N * C, 72);
        auto g0 = d.f32(g, C), g1 = d.f32(g, C), up = d.f32(u, C);
        const auto resid = randn(N * R, 73);
        auto y0 = d.f32(resid, R), y1 = d.f32(resid, R), tmp = d.zeros(R, N);
        const int64_t before = cuda_launch_count(*d.gpu);
        d.gpu->act_matmul_residual(y0.g, g0.g, up.g, act, w.g, tmp.g);
        EXPECT_EQ(cuda_launch_count(*d.gpu) - before, 2);
        d.gpu->Backend::act_matmul_residual(y1.g, g1.g, up.g, act, w.g, tmp.g);
        EXPECT_SAME_BITS(d.getg(g0), d.getg(g1));
        EXPECT_SAME_BITS(d.getg(y0), d.getg(y1));
        auto g2 = d.f32(g, C), g3 = d.f32(g, C);
        auto y2 = d.f32(resid, R), y3 = d.f32(resid, R);
        const int64_t before2 = cuda_launch_count(*d.gpu);
        d.gpu->act_matmul(y2.g, g2.g, up.g, act, w.g);
        EXPECT_EQ(cuda_launch_count(*d.gpu) - before2, 2);
        d.gpu->Backend::act_matmul(y3.g, g3.g, up.g, act, w.g);
        EXPECT_SAME_BITS(d.getg(g2), d.getg(g3));
        EXPECT_SAME_BITS(d.getg(y2), d.getg(y3));
      }
}

// The post-norm residual in one launch (Gemma 3: the output normed in place, then added to
// the residual stream) gives rms_norm then add's bits.
TEST(CudaOps, NormResidualGivesTheOpsBits) {
  for (int64_t N : {1, 7}) {
    Dual d;
    const int64_t C = 640;
    const auto o = randn(N * C, 130, 3.0f), x = randn(N * C, 131);
    auto w = d.f32(randn(C, 132), C);
    auto o0 = d.f32(o, C), o1 = d.f32(o, C), x0 = d.f32(x, C), x1 = d.f32(x, C);
    const int64_t before = cuda_launch_count(*d.gpu);
    d.gpu->norm_residual(x0.g, o0.g, w.g, 1e-6f);
    EXPECT_EQ(cuda_launch_count(*d.gpu) - before, 1);
    d.gpu->Backend::norm_residual(x1.g, o1.g, w.g, 1e-6f);
    EXPECT_SAME_BITS(d.getg(o0), d.getg(o1));
    EXPECT_SAME_BITS(d.getg(x0), d.getg(x1));
  }
}

// The input norm, q/k/v and the attention inputs in two launches (the norm with its
// quantization; q/k/v whose epilogue adds the biases, rotates q and k in pair order and stores
// k and v) give the bits of the ops one by one (Backend::norm_attention_inputs): NeoX, normal
// and partial rotation, biases or none, F16 and F32 caches, quantized and float weights, both
// matmul kernels, a v projection of another type in the same launch (Q4_K_M's layers: Q4_K
// with Q6_K, Q5_0 with Q8_0), weights in planes. Gemma 3's per-head norms of q and k (heads
// of 32 and 256: finished by the warp that completes a head, several launches in a row on the
// same counters) and its pending post-norm residual take the same two launches. A slot
// outside the cache is still reported.
TEST(CudaOps, NormAttentionInputsFusedGivesTheOpsBits) {
  struct Case {
    DType w;
    RopeStyle style;
    int rope_dims;
    bool biases;
    DType cache;
    DType wv = DType::F32;  // F32: w's type
    bool planes = false;    // the weights as Model::load packs them
    bool head_norms = false, pending = false;
    int hd = 32;
  };
  const Case cases[] = {{DType::Q8_0, RopeStyle::NeoX, 32, true, DType::F16},
                        {DType::Q4_K, RopeStyle::NeoX, 24, false, DType::F32},
                        {DType::Q6_K, RopeStyle::Normal, 32, true, DType::F16},
                        {DType::F16, RopeStyle::NeoX, 32, true, DType::F16},
                        {DType::Q4_0, RopeStyle::Normal, 16, false, DType::F16},
                        {DType::Q4_K, RopeStyle::NeoX, 32, true, DType::F16, DType::Q6_K},
                        {DType::Q4_K, RopeStyle::NeoX, 32, true, DType::F16, DType::Q6_K, true},
                        {DType::Q5_0, RopeStyle::NeoX, 32, true, DType::F16, DType::Q8_0, true},
                        {DType::Q5_0, RopeStyle::Normal, 32, false, DType::F32, DType::Q8_0},
                        {DType::Q4_K, RopeStyle::NeoX, 32, false, DType::F16, DType::F32, false, true, true},
                        {DType::Q8_0, RopeStyle::NeoX, 16, true, DType::F32, DType::F32, true, true, false},
                        {DType::F16, RopeStyle::Normal, 32, true, DType::F16, DType::F32, false, true, true},
                        {DType::Q4_K, RopeStyle::NeoX, 32, false, DType::F16, DType::Q6_K, true, true, true},
                        {DType::Q8_0, RopeStyle::NeoX, 256, false, DType::F16, DType::F32, true, true, true, 256}};
  for (const Case& c : cases)
    for (int64_t N : {1, 5, 40}) {
      const DType wv_type = c.wv == DType::F32 ? c.w : c.wv;
      SCOPED_TRACE(std::string(dtype_name(c.w)) + "/" + dtype_name(wv_type) + (c.planes ? " planes" : "") + " rope " +
                   std::to_string(c.rope_dims) + (c.head_norms ? " head norms" : "") +
                   (c.pending ? " pending" : "") + " hd " + std::to_string(c.hd) + " N=" + std::to_string(N));
      Dual d;
      const int nh = 6, nkv = 2, hd = c.hd, slots = 48;
      const int64_t C = 256;
      const auto xv = randn(N * C, 100, 2.0f), ov = randn(N * C, 108, 3.0f);
      auto nw = d.f32(randn(C, 101), C), pw = d.f32(randn(C, 109), C);
      auto qn = d.f32(randn(hd, 110, 0.5f), hd), kn = d.f32(randn(hd, 111, 0.5f), hd);
      const auto bq_blob = test::random_blocks(c.w, nh * hd * C, 102), bk_blob = test::random_blocks(c.w, nkv * hd * C, 103),
                 bv_blob = test::random_blocks(wv_type, nkv * hd * C, 104);
      auto wq = d.raw(c.w, C, nh * hd, bq_blob.data()), wk = d.raw(c.w, C, nkv * hd, bk_blob.data()),
           wv = d.raw(wv_type, C, nkv * hd, bv_blob.data());
      std::vector<std::unique_ptr<Buffer>> packed;
      if (c.planes)  // (a type without planes stays as stored, as Model::load leaves it)
        for (auto [w, blob] : {std::pair{&wq, &bq_blob}, {&wk, &bk_blob}, {&wv, &bv_blob}})
          if (auto buf = d.gpu->pack_weight(w->g.type, blob->data(), w->g.rows(), C)) {
            Tensor t = make_tensor(buf.get(), w->g.type, C, w->g.rows());
            t.layout = d.gpu->packed_layout(t.type);
            t.nb1 = d.gpu->packed_row_stride(t.type, C);
            w->g = t;
            packed.push_back(std::move(buf));
          }
      auto bq = d.f32(randn(nh * hd, 105), nh * hd), bk = d.f32(randn(nkv * hd, 106), nkv * hd),
           bv = d.f32(randn(nkv * hd, 107), nkv * hd);
      std::vector<int32_t> p(static_cast<size_t>(N)), sl(static_cast<size_t>(N));
      for (int64_t t = 0; t < N; ++t) p[size_t(t)] = static_cast<int32_t>(3 + 97 * t), sl[size_t(t)] = static_cast<int32_t>((7 * t + 5) % slots);
      if (N > 1) sl[1] = kNoKvSlot;  // a padding lane: its K and V are not stored
      auto pos = d.i32(p, N), sm = d.i32(sl, N);
      PagedAttnMeta meta;
      meta.slot_mapping = sm.g;
      std::vector<Dual::T> keep;
      // 0: fused, 1: the default's ops, 2: fused again (the head counters left at zero)
      constexpr int kRuns = 3;
      Tensor q[kRuns], k[kRuns], v[kRuns], h[kRuns], kc[kRuns], vc[kRuns], x[kRuns], o[kRuns];
      for (int r = 0; r < kRuns; ++r) {
        keep.push_back(d.f32(xv, C)), x[r] = keep.back().g;
        keep.push_back(d.f32(ov, C)), o[r] = keep.back().g;
        for (Tensor* t : {&kc[r], &vc[r]}) {
          keep.push_back(d.raw(c.cache, nkv * hd, slots, nullptr));
          *t = keep.back().g;
          d.gpu->fill_zero(*t);
        }
        keep.push_back(d.zeros(nh * hd, N)), q[r] = keep.back().g;
        keep.push_back(d.zeros(nkv * hd, N)), k[r] = keep.back().g;
        keep.push_back(d.zeros(nkv * hd, N)), v[r] = keep.back().g;
        keep.push_back(d.zeros(C, N)), h[r] = keep.back().g;
      }
      auto inputs = [&](int r) {
        Backend::AttnInputs a;
        a.q = q[r], a.k = k[r], a.v = v[r];
        if (c.biases) a.bq = bq.g, a.bk = bk.g, a.bv = bv.g;
        if (c.head_norms) a.q_norm = qn.g, a.k_norm = kn.g, a.norm_eps = 1e-6f;
        a.positions = pos.g;
        a.n_heads = nh, a.n_kv_heads = nkv, a.head_dim = hd, a.rope_dims = c.rope_dims;
        a.theta = 1e6f, a.style = c.style;
        return a;
      };
      for (int r = 0; r < kRuns; ++r) {
        const Backend::AttnInputs a = inputs(r);
        const Backend::PendingResidual pending{o[r], pw.g, 1e-6f};
        const Backend::PendingResidual* pend = c.pending ? &pending : nullptr;
        const int64_t before = cuda_launch_count(*d.gpu);
        if (r != 1)
          d.gpu->norm_attention_inputs(h[r], x[r], nw.g, 1e-6f, 0.0f, wq.g, wk.g, wv.g, a, {kc[r], vc[r]}, meta, pend);
        else
          d.gpu->Backend::norm_attention_inputs(h[r], x[r], nw.g, 1e-6f, 0.0f, wq.g, wk.g, wv.g, a, {kc[r], vc[r]}, meta,
                                                pend);
        if (r != 1) {
          EXPECT_EQ(cuda_launch_count(*d.gpu) - before, 2);
        }
      }
      auto get = [&](const Tensor& t) {
        std::vector<uint8_t> b(t.bytes());
        d.gpu->download(b.data(), t, b.size());
        return b;
      };
      for (int r : {0, 2}) {
        SCOPED_TRACE(r == 0 ? "fused" : "fused again");
        EXPECT_EQ(get(x[r]), get(x[1]));
        EXPECT_EQ(get(o[r]), get(o[1]));
        EXPECT_EQ(get(h[r]), get(h[1]));
        EXPECT_EQ(get(q[r]), get(q[1]));
        EXPECT_EQ(get(k[r]), get(k[1]));
        EXPECT_EQ(get(v[r]), get(v[1]));
        EXPECT_EQ(get(kc[r]), get(kc[1]));
        EXPECT_EQ(get(vc[r]), get(vc[1]));
      }
      EXPECT_NO_THROW(d.gpu->synchronize());
      if (N != 5) continue;
      sl[2] = slots;  // one slot past the cache
      auto bad = d.i32(sl, N);
      meta.slot_mapping = bad.g;
      d.gpu->norm_attention_inputs(h[0], x[0], nw.g, 1e-6f, 0.0f, wq.g, wk.g, wv.g, inputs(0), {kc[0], vc[0]}, meta);
      EXPECT_THROW(d.gpu->synchronize(), std::out_of_range);
    }
}

// The per-head norms' counters on one backend whose passes grow and shrink again: their
// scratch is reallocated, over arena memory that held other bytes (possibly from the same
// start, where the arena reuses the freed range), and must be zero again before its first
// launch; every fused pass still gives the ops' bits.
TEST(CudaOps, HeadNormCountersServePassesOfAnySize) {
  Dual d;
  const int nh = 4, nkv = 1, hd = 64, slots = 80;
  const int64_t C = 256;
  const auto qb = test::random_blocks(DType::Q8_0, nh * hd * C, 140), kb = test::random_blocks(DType::Q8_0, nkv * hd * C, 141),
             vb = test::random_blocks(DType::Q8_0, nkv * hd * C, 142);
  auto wq = d.raw(DType::Q8_0, C, nh * hd, qb.data()), wk = d.raw(DType::Q8_0, C, nkv * hd, kb.data()),
       wv = d.raw(DType::Q8_0, C, nkv * hd, vb.data());
  auto nw = d.f32(randn(C, 143), C), qn = d.f32(randn(hd, 144, 0.5f), hd), kn = d.f32(randn(hd, 145, 0.5f), hd);
  {  // arena memory that held other bytes, where the counters' scratch may land
    const std::vector<uint8_t> junk(size_t{1} << 20, 0x5a);
    auto dirty = d.gpu->alloc(junk.size());
    d.gpu->upload(make_tensor(dirty.get(), DType::I32, static_cast<int64_t>(junk.size() / 4), 1), junk.data(), junk.size());
    d.gpu->synchronize();
  }
  for (int64_t N : {1, 40, 5, 70, 2}) {
    SCOPED_TRACE(N);
    auto x = d.f32(randn(N * C, 146 + N, 2.0f), C);
    std::vector<int32_t> p(static_cast<size_t>(N)), sl(static_cast<size_t>(N));
    for (int64_t t = 0; t < N; ++t) p[size_t(t)] = static_cast<int32_t>(t), sl[size_t(t)] = static_cast<int32_t>(t);
    auto pos = d.i32(p, N), sm = d.i32(sl, N);
    PagedAttnMeta meta;
    meta.slot_mapping = sm.g;
    std::vector<uint8_t> got[2][3];
    for (int r = 0; r < 2; ++r) {
      auto q = d.zeros(nh * hd, N), k = d.zeros(nkv * hd, N), v = d.zeros(nkv * hd, N), h = d.zeros(C, N);
      auto kc = d.raw(DType::F16, nkv * hd, slots, nullptr), vc = d.raw(DType::F16, nkv * hd, slots, nullptr);
      d.gpu->fill_zero(kc.g), d.gpu->fill_zero(vc.g);
      Backend::AttnInputs a;
      a.q = q.g, a.k = k.g, a.v = v.g, a.q_norm = qn.g, a.k_norm = kn.g, a.norm_eps = 1e-6f;
      a.positions = pos.g, a.n_heads = nh, a.n_kv_heads = nkv, a.head_dim = hd, a.rope_dims = hd;
      a.theta = 1e4f, a.style = RopeStyle::NeoX;
      if (r == 0) d.gpu->norm_attention_inputs(h.g, x.g, nw.g, 1e-6f, 0.0f, wq.g, wk.g, wv.g, a, {kc.g, vc.g}, meta);
      else d.gpu->Backend::norm_attention_inputs(h.g, x.g, nw.g, 1e-6f, 0.0f, wq.g, wk.g, wv.g, a, {kc.g, vc.g}, meta);
      int i = 0;
      for (const Tensor& t : {q.g, kc.g, vc.g}) {
        got[r][i].resize(t.bytes());
        d.gpu->download(got[r][i].data(), t, t.bytes());
        ++i;
      }
    }
    for (int i = 0; i < 3; ++i) EXPECT_EQ(got[0][i], got[1][i]) << "q, k cache, v cache: " << i;
  }
}

// The residual add in the matmul's epilogue (one launch less) gives add(dst, dst, matmul)'s
// bits, through both quantized kernels and the float one.
TEST(CudaOps, MatmulResidualGivesTheBitsOfMatmulThenAdd) {
  for (DType t : {DType::Q4_K, DType::Q8_0, DType::Q6_K, DType::BF16}) {
    for (int64_t N : {1, 3, 40}) {
      SCOPED_TRACE(std::string(dtype_name(t)) + " N=" + std::to_string(N));
      Dual d;
      const int64_t C = 512, R = 37;
      const auto blob = test::random_blocks(t, R * C, 90);
      auto w = d.raw(t, C, R, blob.data());
      auto x = d.f32(randn(N * C, 91), C);
      const auto resid = randn(N * R, 92, 4.0f);
      auto fused = d.f32(resid, R), plain = d.f32(resid, R), tmp = d.zeros(R, N);
      const int64_t before = cuda_launch_count(*d.gpu);
      d.gpu->matmul_residual(fused.g, w.g, x.g, tmp.g);
      const int64_t fused_launches = cuda_launch_count(*d.gpu) - before;
      d.gpu->Backend::matmul_residual(plain.g, w.g, x.g, tmp.g);
      EXPECT_EQ(cuda_launch_count(*d.gpu) - before - fused_launches, fused_launches + 1);
      EXPECT_SAME_BITS(d.getg(fused), d.getg(plain));
    }
  }
}

// From gemm_min_tokens tokens on: dequantized F32 tiles and a GEMM on the unquantized
// activations (cuBLAS on a device, a host loop here), checked against a double reference
// of the same product: C products summed in float, |error| <= C u sum|w x| (each way).
TEST(CudaOps, MatmulGemmPathForLargeBatches) {
  for (DType t : {DType::Q4_K, DType::Q5_0, DType::BF16}) {
    SCOPED_TRACE(dtype_name(t));
    Dual d;
    d.gpu = cuda_under_test(size_t{32} << 20, /*gemm_min_tokens=*/20);
    const int64_t R = 11, C = 512, N = 21;
    const auto blob = test::random_blocks(t, R * C, 70);
    const auto x = randn(N * C, 71);
    auto w = d.raw(t, C, R, blob.data());
    auto xt = d.f32(x, C);
    auto y = d.zeros(R, N);
    d.gpu->matmul(y.g, w.g, xt.g);
    const auto got = d.getg(y);
    std::vector<float> wr(C);
    for (int64_t r = 0; r < R; ++r) {
      cpu::dequantize_row_ref(t, blob.data() + r * row_bytes(t, C), wr.data(), C);
      for (int64_t i = 0; i < N; ++i) {
        double s = 0, sa = 0;
        for (int64_t c = 0; c < C; ++c) s += double(wr[c]) * x[i * C + c], sa += std::fabs(double(wr[c]) * x[i * C + c]);
        ASSERT_LE(std::fabs(got[i * R + r] - s), C * kU * sa + 1e-30) << "token " << i << " row " << r;
      }
    }
  }
}

// ---- attention ------------------------------------------------------------------------------

struct AttnCase {
  DType kv_type = DType::F16;
  int window = 0;
  float softcap = 0.0f;
  int n_heads = 4, n_kv = 2, hd = 16, bs = 4;
  std::vector<int> lens = {7, 13};
  std::vector<int> n_new = {3, 1};
  int pad_cols = 0;  // block-table columns beyond the longest sequence's (unused entries)
};

// Sequences with scrambled block tables, the new tokens at their ends, the same cache on
// both backends.
struct AttnProblem {
  AttnCase c;
  Dual d;
  std::vector<std::vector<float>> K, V;
  std::vector<int32_t> pos, seq, bt;
  std::vector<float> q;
  Dual::T kc, vc;
  int bt_cols = 0;

  explicit AttnProblem(const AttnCase& cs) : c(cs) {
    const int kvw = c.n_kv * c.hd, n_seq = static_cast<int>(c.lens.size());
    for (int l : c.lens) bt_cols = std::max(bt_cols, (l + c.bs - 1) / c.bs);
    const int n_blocks = bt_cols * n_seq + 3;
    bt_cols += c.pad_cols;
    std::vector<int32_t> free(n_blocks);
    std::iota(free.begin(), free.end(), 0);
    std::shuffle(free.begin(), free.end(), std::mt19937(5));
    bt.assign(size_t(n_seq) * bt_cols, 0);
    for (int s = 0, k = 0; s < n_seq; ++s)
      for (int b = 0; b < (c.lens[s] + c.bs - 1) / c.bs; ++b) bt[size_t(s) * bt_cols + b] = free[k++];
    const size_t row = row_bytes(c.kv_type, kvw);
    std::vector<uint8_t> kb(row * n_blocks * c.bs), vb(row * n_blocks * c.bs);
    auto put = [&](std::vector<uint8_t>& cache, int slot, const float* src) {
      for (int i = 0; i < kvw; ++i) {
        if (c.kv_type == DType::F16) reinterpret_cast<uint16_t*>(cache.data() + slot * row)[i] = cpu::f32_to_fp16(src[i]);
        else reinterpret_cast<float*>(cache.data() + slot * row)[i] = src[i];
      }
    };
    for (int s = 0; s < n_seq; ++s) {
      K.push_back(randn(size_t(c.lens[s]) * kvw, 10 + s));
      V.push_back(randn(size_t(c.lens[s]) * kvw, 20 + s));
      for (int p = 0; p < c.lens[s]; ++p) {
        const int slot = bt[size_t(s) * bt_cols + p / c.bs] * c.bs + p % c.bs;
        put(kb, slot, &K[s][size_t(p) * kvw]);
        put(vb, slot, &V[s][size_t(p) * kvw]);
      }
      for (int i = 0; i < c.n_new[s]; ++i) pos.push_back(c.lens[s] - c.n_new[s] + i), seq.push_back(s);
    }
    kc = d.raw(c.kv_type, kvw, n_blocks * c.bs, kb.data());
    vc = d.raw(c.kv_type, kvw, n_blocks * c.bs, vb.data());
    q = randn(pos.size() * c.n_heads * c.hd, 30);
  }

  // Tokens [t0, t1) in one call on one backend.
  std::vector<float> run(bool on_gpu, size_t t0, size_t t1) {
    const int n = static_cast<int>(t1 - t0), w = c.n_heads * c.hd;
    auto p = d.i32(std::vector<int32_t>(pos.begin() + t0, pos.begin() + t1), n);
    auto s = d.i32(std::vector<int32_t>(seq.begin() + t0, seq.begin() + t1), n);
    auto b = d.i32(bt, bt_cols);
    auto tq = d.f32(std::vector<float>(q.begin() + t0 * w, q.begin() + t1 * w), w);
    auto to = d.zeros(w, n);
    Backend& be = on_gpu ? *d.gpu : *d.cpu;
    PagedAttnMeta meta;
    meta.positions = on_gpu ? p.g : p.c;
    meta.seq_index = on_gpu ? s.g : s.c;
    meta.block_table = on_gpu ? b.g : b.c;
    meta.block_size = c.bs;
    be.paged_attention(on_gpu ? to.g : to.c, on_gpu ? tq.g : tq.c, on_gpu ? KVLayer{kc.g, vc.g} : KVLayer{kc.c, vc.c},
                       meta, c.n_heads, c.n_kv, c.hd, 1.0f / std::sqrt(float(c.hd)), c.window, c.softcap);
    return on_gpu ? d.getg(to) : d.getc(to);
  }

  // Against a dense double-precision softmax with the CPU op test's tolerance (1e-4; the
  // outputs are weighted means of N(0,1) values), and against the CPU backend within the
  // sum of both tolerances.
  void check(const std::vector<float>& out, const std::vector<float>& cpu_out) {
    const int kvw = c.n_kv * c.hd;
    auto rounded = [&](float x) { return c.kv_type == DType::F16 ? cpu::fp16_to_f32(cpu::f32_to_fp16(x)) : x; };
    const double scale = double(1.0f / std::sqrt(float(c.hd)));
    for (size_t t = 0; t < pos.size(); ++t)
      for (int head = 0; head < c.n_heads; ++head) {
        const int s = seq[t], kvh = head / (c.n_heads / c.n_kv);
        const int j0 = c.window > 0 ? std::max(0, pos[t] - c.window + 1) : 0;
        std::vector<double> sc;
        for (int j = j0; j <= pos[t]; ++j) {
          double dd = 0;
          for (int i = 0; i < c.hd; ++i)
            dd += double(q[(t * c.n_heads + head) * c.hd + i]) * rounded(K[s][size_t(j) * kvw + kvh * c.hd + i]);
          dd *= scale;
          if (c.softcap > 0) dd = c.softcap * std::tanh(dd / c.softcap);
          sc.push_back(dd);
        }
        const double mx = *std::max_element(sc.begin(), sc.end());
        double z = 0;
        for (auto& x : sc) z += (x = std::exp(x - mx));
        for (int i = 0; i < c.hd; ++i) {
          double acc = 0;
          for (int j = j0; j <= pos[t]; ++j) acc += sc[j - j0] / z * rounded(V[s][size_t(j) * kvw + kvh * c.hd + i]);
          const size_t k = (t * c.n_heads + head) * c.hd + i;
          ASSERT_NEAR(out[k], acc, 1e-4) << "token " << t << " head " << head;
          ASSERT_NEAR(out[k], cpu_out[k], 2e-4) << "token " << t << " head " << head;
        }
      }
  }
  void check_all() { check(run(true, 0, pos.size()), run(false, 0, pos.size())); }
};

TEST(CudaOps, PagedAttentionF32) { AttnProblem({DType::F32, 0, 0.0f}).check_all(); }
TEST(CudaOps, PagedAttentionF16) { AttnProblem({DType::F16, 0, 0.0f}).check_all(); }
TEST(CudaOps, PagedAttentionSlidingWindowAndSoftcap) { AttnProblem({DType::F16, 3, 5.0f}).check_all(); }

// GQA groups of 3, 6, 7 and 4 (Gemma 3's head_dim 256: the staged rows of one token just
// within 48 KiB), head_dim 64/128 and an odd 12, a context of 1100 positions (three spans of
// 512, merged) and a window spanning two spans.
TEST(CudaOps, PagedAttentionModelShapesAndLongContexts) {
  AttnCase c;
  c.kv_type = DType::F16;
  c.bs = 16;
  c.lens = {1100, 37, 9};
  c.n_new = {2, 3, 1};
  for (auto [nh, nkv, hd] : {std::tuple{9, 3, 64}, {12, 2, 128}, {14, 2, 64}, {4, 1, 12}, {4, 1, 256}}) {
    SCOPED_TRACE(testing::Message() << nh << " heads, " << nkv << " kv, hd " << hd);
    c.n_heads = nh;
    c.n_kv = nkv;
    c.hd = hd;
    AttnProblem(c).check_all();
  }
  c.window = 600;
  c.n_heads = 6;
  c.n_kv = 2;
  c.hd = 64;
  AttnProblem(c).check_all();
}

// The span kernel stages K/V rows in shared memory with the widest load the rows' alignment
// allows: 16 bytes (f16 head_dim 8), 4 (f16 head_dim 6, f32 head_dim 5), one element (f16
// head_dim 7); and fewer rows at a time where a large group leaves less room (16 query heads
// of 128 on one KV head: 8 rows). Contexts cross several chunks and end inside one.
TEST(CudaOps, PagedAttentionStagesRowsOfEveryAlignmentAndChunk) {
  AttnCase c;
  c.bs = 8;
  c.lens = {45, 70};
  c.n_new = {3, 2};
  for (auto [type, nh, nkv, hd] : {std::tuple{DType::F16, 4, 2, 8}, {DType::F16, 4, 2, 6}, {DType::F32, 4, 2, 5},
                                   {DType::F16, 6, 3, 7}, {DType::F16, 16, 1, 128}}) {
    SCOPED_TRACE(testing::Message() << nh << " heads, " << nkv << " kv, hd " << hd);
    c.kv_type = type;
    c.n_heads = nh;
    c.n_kv = nkv;
    c.hd = hd;
    AttnProblem(c).check_all();
  }
}

// A token's output is the same bits alone or in a batch of up to 17 (verification).
// In a batch, a sequence's consecutive tokens share query tiles (tiles of 8 here: tokens 0-7
// and 8-11 of the first sequence, 12-15 and 16 of the second), whose K/V rows are staged
// once; with a sliding window each token of a tile starts at its own position.
TEST(CudaOps, PagedAttentionIsBatchInvariant) {
  for (int window : {0, 600}) {
    SCOPED_TRACE(testing::Message() << "window " << window);
    AttnCase c;
    c.bs = 16;
    c.n_heads = 6;
    c.n_kv = 2;
    c.hd = 32;
    c.window = window;
    c.lens = {700, 40};
    c.n_new = {12, 5};
    AttnProblem pr(c);
    const auto all = pr.run(true, 0, pr.pos.size());
    const size_t w = size_t(c.n_heads) * c.hd;
    for (size_t t = 0; t < pr.pos.size(); ++t) {
      const auto one = pr.run(true, t, t + 1);
      ASSERT_EQ(0, std::memcmp(one.data(), all.data() + t * w, w * sizeof(float))) << "token " << t;
    }
    pr.check(all, pr.run(false, 0, pr.pos.size()));
  }
}

// A table too narrow for two spans of 512 positions lets the span kernel write the outputs
// itself (one launch instead of two): the same bits as the merge kernel gives the same
// tokens under a table wide enough to need it.
TEST(CudaOps, PagedAttentionSingleSpanOutputsEqualTheMergedOnes) {
  for (DType kv : {DType::F16, DType::F32}) {
    SCOPED_TRACE(dtype_name(kv));
    AttnCase c;
    c.kv_type = kv;
    c.bs = 16;
    c.n_heads = 6;
    c.n_kv = 2;
    c.hd = 32;
    c.lens = {300, 40};
    c.n_new = {4, 2};
    AttnProblem narrow(c);
    c.pad_cols = 30;  // 19 + 30 columns of 16: 784 positions, two spans' worth
    AttnProblem wide(c);
    const int64_t before = cuda_launch_count(*narrow.d.gpu);
    const auto a = narrow.run(true, 0, narrow.pos.size());
    EXPECT_EQ(cuda_launch_count(*narrow.d.gpu) - before, 1);
    const int64_t wide_before = cuda_launch_count(*wide.d.gpu);
    const auto b = wide.run(true, 0, wide.pos.size());
    EXPECT_EQ(cuda_launch_count(*wide.d.gpu) - wide_before, 2) << "the wide table must take the merge kernel";
    ASSERT_EQ(a.size(), b.size());
    EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float)));
    narrow.check(a, narrow.run(false, 0, narrow.pos.size()));
  }
}

// The attention quantizing its output for the output projection (one launch less) gives the
// bits of paged_attention then matmul_residual (Backend::attention_residual), or then matmul
// (attention_matmul, a post-normed block's): activation blocks of 32 and 256, one span and
// merged spans; groups of several blocks (the codes' sums of each block written where the
// block is); a group narrower than a block takes the ops.
TEST(CudaOps, AttentionResidualAndMatmulGiveTheOpsBits) {
  struct Case {
    DType w;
    int n_heads, n_kv, hd, pad_cols;
    int64_t launches;  // attention (one or two kernels), the projection; + the quantization unfused
  };
  for (const Case& k : {Case{DType::Q8_0, 6, 2, 32, 0, 2}, Case{DType::Q4_K, 8, 2, 64, 0, 2},
                        Case{DType::Q4_K, 8, 2, 64, 60, 3}, Case{DType::Q8_0, 6, 2, 32, 60, 3},
                        Case{DType::Q6_K, 6, 2, 64, 0, 3}, Case{DType::Q4_0, 6, 2, 32, 0, 2},
                        Case{DType::Q4_K, 16, 2, 64, 0, 2}}) {
    SCOPED_TRACE(std::string(dtype_name(k.w)) + " heads " + std::to_string(k.n_heads) + " pad " +
                 std::to_string(k.pad_cols));
    AttnCase c;
    c.bs = 16;
    c.n_heads = k.n_heads, c.n_kv = k.n_kv, c.hd = k.hd, c.pad_cols = k.pad_cols;
    c.lens = {300, 40};
    c.n_new = {4, 2};
    AttnProblem pr(c);
    Dual& d = pr.d;
    const int n = static_cast<int>(pr.pos.size()), C = c.n_heads * c.hd, R = 40;
    const auto blob = test::random_blocks(k.w, int64_t{R} * C, 120);
    auto wo = d.raw(k.w, C, R, blob.data());
    auto p = d.i32(pr.pos, n), sq = d.i32(pr.seq, n), b = d.i32(pr.bt, pr.bt_cols);
    auto q = d.f32(pr.q, C);
    const auto resid = randn(size_t(n) * R, 121, 3.0f);
    PagedAttnMeta meta;
    meta.positions = p.g, meta.seq_index = sq.g, meta.block_table = b.g, meta.block_size = c.bs;
    Backend::AttnShape shape;
    shape.n_heads = c.n_heads, shape.n_kv_heads = c.n_kv, shape.head_dim = c.hd, shape.scale = 0.125f;
    for (bool residual : {true, false}) {
      SCOPED_TRACE(residual ? "attention_residual" : "attention_matmul");
      std::vector<float> outs[2], ys[2];
      for (int r = 0; r < 2; ++r) {
        auto out = d.zeros(C, n), y = d.f32(resid, R), tmp = d.zeros(R, n);
        const int64_t before = cuda_launch_count(*d.gpu);
        const KVLayer kv{pr.kc.g, pr.vc.g};
        if (residual && r == 0) d.gpu->attention_residual(y.g, wo.g, tmp.g, out.g, q.g, kv, meta, shape);
        if (residual && r == 1) d.gpu->Backend::attention_residual(y.g, wo.g, tmp.g, out.g, q.g, kv, meta, shape);
        if (!residual && r == 0) d.gpu->attention_matmul(y.g, wo.g, out.g, q.g, kv, meta, shape);
        if (!residual && r == 1) d.gpu->Backend::attention_matmul(y.g, wo.g, out.g, q.g, kv, meta, shape);
        if (r == 0) {
          EXPECT_EQ(cuda_launch_count(*d.gpu) - before, k.launches);
        }
        outs[r] = d.getg(out), ys[r] = d.getg(y);
      }
      EXPECT_SAME_BITS(outs[0], outs[1]);
      EXPECT_SAME_BITS(ys[0], ys[1]);
    }
  }
}

TEST(CudaOps, PagedAttentionRejectsBadTables) {
  AttnProblem pr(AttnCase{});
  pr.bt[0] = 1000;
  EXPECT_THROW(pr.run(true, 0, pr.pos.size()), std::out_of_range);  // found when the output is downloaded
  AttnProblem pr2(AttnCase{});
  pr2.pos[0] = 4 * 4 * 100;
  EXPECT_THROW(pr2.run(true, 0, pr2.pos.size()), std::out_of_range);
}

}  // namespace
}  // namespace tandem::kernels
