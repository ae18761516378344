// Stream capture and graph replay on the CUDA backend under the SIMT emulator: the runtime
// records kernels, device copies and memsets instead of running them; a replayed graph
// gives the bits the same ops give run directly; what a capture must not do (wait for the
// stream, move host memory in, allocate) throws and spoils the capture, and the backend
// is usable again after abort_capture.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <functional>
#include <map>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "tests/support/cuda_under_test.hpp"
#include "kernels/backend.hpp"
#include "kernels/backend_factory.hpp"
#include "kernels/cuda/runtime.hpp"
#include "kernels/graph_capture.hpp"
#include "tests/support/random_blocks.hpp"

namespace tandem::kernels {
namespace {

std::vector<float> randn(size_t n, uint32_t seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// ---- the emulated runtime (always the emulator's, also in a GPU run) ------------------------------

TEST(CudaGraph, EmulatedRuntimeRecordsDeviceCopiesAndRefusesHostTraffic) {
  auto rt = cuda_emu::make_runtime(0);
  auto* mem = static_cast<int*>(rt->reserve(4096));
  for (int i = 0; i < 8; ++i) mem[i] = i + 1;
  EXPECT_FALSE(rt->capturing());
  rt->begin_capture();
  EXPECT_TRUE(rt->capturing());
  rt->copy_on_device(mem + 8, mem, 4 * sizeof(int));
  rt->zero(mem, 2 * sizeof(int));
  EXPECT_EQ(mem[0], 1) << "recorded, not run";
  EXPECT_EQ(mem[8], 0);
  auto g = rt->end_capture();
  EXPECT_FALSE(rt->capturing());
  EXPECT_EQ(g->nodes(), 2u);
  g->launch();
  EXPECT_EQ(mem[0], 0);
  EXPECT_EQ(mem[8], 1);
  EXPECT_EQ(mem[11], 4);

  // Each forbidden call throws and spoils its capture; abort_capture (or the failed
  // end_capture) leaves the stream usable.
  int host[4] = {};
  const auto forbidden = {
      +[](cuda_emu::DeviceRuntime& r, int* m, int* h) { r.copy_to_host(h, m, sizeof(int)); },
      +[](cuda_emu::DeviceRuntime& r, int* m, int* h) { r.copy_to_device(m, h, sizeof(int)); },
      +[](cuda_emu::DeviceRuntime& r, int*, int*) { r.synchronize(); },
  };
  for (auto call : forbidden) {
    rt->begin_capture();
    EXPECT_THROW(call(*rt, mem, host), std::logic_error);
    EXPECT_THROW(rt->end_capture(), std::logic_error) << "the capture must be reported as spoiled";
    EXPECT_FALSE(rt->capturing());
    rt->begin_capture();
    EXPECT_THROW(call(*rt, mem, host), std::logic_error);
    rt->abort_capture();
    EXPECT_FALSE(rt->capturing());
    EXPECT_NO_THROW(call(*rt, mem, host)) << "outside a capture the call works";
  }
  rt->release(mem);
}

// ---- the backend -------------------------------------------------------------------------------

// On the real device (TANDEM_CUDA_TEST_DEVICE=1) the forbidden calls are refused by CUDA
// itself, as cudaErrorStreamCaptureUnsupported.

struct Fixture {
  explicit Fixture(int64_t gemm_min_tokens = 0) : be(test::cuda_under_test(size_t{64} << 20, gemm_min_tokens)) {}
  std::unique_ptr<Backend> be;
  GraphCapture* gc = graph_capture(*be);
  std::vector<std::unique_ptr<Buffer>> bufs;
  Tensor f32(int64_t cols, int64_t rows, const std::vector<float>& v = {}) {
    bufs.push_back(be->alloc(sizeof(float) * static_cast<size_t>(cols * rows)));
    Tensor t = make_tensor(bufs.back().get(), DType::F32, cols, rows);
    if (!v.empty()) be->upload(t, v.data(), v.size() * sizeof(float));
    return t;
  }
  std::vector<float> get(const Tensor& t) {
    std::vector<float> v(static_cast<size_t>(t.numel()));
    be->download(v.data(), t, v.size() * sizeof(float));
    return v;
  }
};

// A small layer: norm, a quantized matmul (activations quantized into the backend's
// scratch), rope, an activation, a float matmul, a residual add.
struct Layer {
  Tensor x, norm_w, w_q8, w_f32, pos, h, y, gate;
  void run(Backend& be) const {
    be.rms_norm(h, x, norm_w, 1e-5f);
    be.matmul(y, w_q8, h);
    be.rope(y, pos, 2, 32, 32, 10000.0f, RopeStyle::NeoX);
    be.gated_act(gate, y, y, Activation::SiLU);
    be.matmul(h, w_f32, gate);
    be.add(h, h, x);
  }
};

Layer make_layer(Fixture& f, int64_t m) {
  Layer l;
  l.x = f.f32(64, m, randn(static_cast<size_t>(64 * m), 1));
  l.norm_w = f.f32(64, 1, randn(64, 2));
  const auto q8 = test::random_blocks(DType::Q8_0, 64 * 64, 3, 0.2f);
  f.bufs.push_back(f.be->wrap_host(q8.data(), q8.size()));
  l.w_q8 = make_tensor(f.bufs.back().get(), DType::Q8_0, 64, 64);
  l.w_f32 = f.f32(64, 64, randn(64 * 64, 4));
  std::vector<int32_t> pos(static_cast<size_t>(m));
  for (int64_t i = 0; i < m; ++i) pos[static_cast<size_t>(i)] = static_cast<int32_t>(3 * i + 1);
  f.bufs.push_back(f.be->alloc(sizeof(int32_t) * pos.size()));
  l.pos = make_tensor(f.bufs.back().get(), DType::I32, m, 1);
  f.be->upload(l.pos, pos.data(), sizeof(int32_t) * pos.size());
  l.h = f.f32(64, m);
  l.y = f.f32(64, m);
  l.gate = f.f32(64, m);
  return l;
}

TEST(CudaGraph, ReplayedOpsGiveTheBitsOfTheOpsRunDirectly) {
  Fixture f;
  ASSERT_NE(f.gc, nullptr) << "the CUDA backend must offer graph capture";
  EXPECT_EQ(graph_capture(*make_cpu_backend(1)), nullptr) << "the CPU backend has nothing to capture";
  const Layer l = make_layer(f, 5);
  l.run(*f.be);  // sizes the backend's scratch: nothing may be allocated inside a capture
  const std::vector<float> direct = f.get(l.h);
  const uint64_t epoch = f.gc->capture_epoch();

  f.be->fill_zero(l.h);
  f.gc->begin_capture();
  l.run(*f.be);
  auto g = f.gc->end_capture();
  EXPECT_EQ(f.gc->capture_epoch(), epoch);
  EXPECT_GE(g->nodes(), 7u) << "norm, quantize, matmul, rope, act, matmul, add";
  EXPECT_EQ(f.get(l.h), std::vector<float>(64 * 5, 0.0f)) << "capturing must not run the ops";
  g->launch();
  EXPECT_TRUE(same_bits(f.get(l.h), direct));

  // The graph reads its buffers when launched: new inputs, new result, still the direct bits.
  const auto x2 = randn(64 * 5, 9);
  f.be->upload(l.x, x2.data(), x2.size() * sizeof(float));
  g->launch();
  const std::vector<float> replayed = f.get(l.h);
  l.run(*f.be);
  EXPECT_TRUE(same_bits(replayed, f.get(l.h)));
  EXPECT_FALSE(same_bits(replayed, direct));
}

// The op profile (bench_cuda --profile) counts every launch, upload, download and zeroing
// that runs, under the op's name (a matmul's with its weights' type and shape, and the
// bytes of them it read), and nothing of a capture or of a graph's replay.
TEST(CudaGraph, TheOpProfileCountsWhatRanAndNothingOfAGraph) {
  Fixture f;
  const Layer l = make_layer(f, 5);
  l.run(*f.be);  // sizes the scratch
  EXPECT_FALSE(cuda_profile_ops(*make_cpu_backend(1), true)) << "the CPU backend has no stream to profile";
  EXPECT_TRUE(cuda_op_profile(*f.be).empty()) << "not started";
  ASSERT_TRUE(cuda_profile_ops(*f.be, true));
  const int64_t before = cuda_launch_count(*f.be);
  l.run(*f.be);
  const std::vector<float> direct = f.get(l.h);
  const std::vector<OpTime> p = cuda_op_profile(*f.be);
  std::map<std::string, int64_t> count;
  std::map<std::string, uint64_t> bytes;
  for (const OpTime& t : p) {
    EXPECT_GE(t.ms, 0.0) << t.op;
    count[t.op] += t.count;
    if (t.weight_bytes) bytes[t.op] = t.weight_bytes;
  }
  EXPECT_EQ(count, (std::map<std::string, int64_t>{{"rms_norm", 1}, {"matmul (quantize activations)", 1},
                                                   {"matmul Q8_0 64x64", 1}, {"rope", 1}, {"gated_act", 1},
                                                   {"matmul (tensor cores) F32 64x64", 1}, {"add", 1},
                                                   {"download", 1}}));
  EXPECT_EQ(bytes, (std::map<std::string, uint64_t>{{"matmul Q8_0 64x64", 64 * 2 * 34},
                                                    {"matmul (tensor cores) F32 64x64", 64 * 64 * 4}}));
  EXPECT_EQ(cuda_launch_count(*f.be) - before, 7);
  EXPECT_TRUE(std::is_sorted(p.begin(), p.end(), [](const OpTime& a, const OpTime& b) { return a.ms > b.ms; }));

  // Reading it starts the next one; a capture and its replay add nothing, what runs after does.
  f.gc->begin_capture();
  l.run(*f.be);
  auto g = f.gc->end_capture();
  g->launch();
  EXPECT_TRUE(cuda_op_profile(*f.be).empty());
  f.be->fill_zero(l.h);
  const std::vector<OpTime> after = cuda_op_profile(*f.be);
  ASSERT_EQ(after.size(), 1u);
  EXPECT_EQ(after[0].op, "fill_zero");
  EXPECT_EQ(after[0].count, 1);
  ASSERT_TRUE(cuda_profile_ops(*f.be, false));
  l.run(*f.be);
  EXPECT_TRUE(cuda_op_profile(*f.be).empty()) << "off";
  EXPECT_TRUE(same_bits(f.get(l.h), direct)) << "profiling changes no result";
}

TEST(CudaGraph, ForbiddenCallsDuringCaptureThrowAndTheBackendRecovers) {
  Fixture f;
  const Layer l = make_layer(f, 3);
  l.run(*f.be);
  const std::vector<float> direct = f.get(l.h);
  std::vector<float> host(64 * 3);
  const auto q8 = test::random_blocks(DType::Q8_0, 64 * 64, 3, 0.2f);
  const Tensor big_x = f.f32(64, 40), big_y = f.f32(64, 40);
  struct Case {
    const char* what;
    std::function<void()> call;
  };
  const std::vector<Case> cases = {
      {"download", [&] { f.be->download(host.data(), l.h, 4); }},
      {"synchronize", [&] { f.be->synchronize(); }},
      {"upload", [&] { f.be->upload(l.x, host.data(), 4); }},
      {"alloc", [&] { f.be->alloc(256); }},
      {"alloc_zeroed", [&] { f.be->alloc_zeroed(256); }},
      {"wrap_host", [&] { f.be->wrap_host(q8.data(), q8.size()); }},
      // More tokens than the scratch was sized for: the quantized activations' slot must grow.
      {"scratch growth", [&] { f.be->matmul(big_y, l.w_q8, big_x); }},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    f.gc->begin_capture();
    l.run(*f.be);
    EXPECT_ANY_THROW(c.call());
    f.gc->abort_capture();
    l.run(*f.be);  // usable again: direct ops and downloads work
    EXPECT_TRUE(same_bits(f.get(l.h), direct));
  }

  // By default every token count is captured (both matmul kernels are plain launches)...
  Tensor x = f.f32(64, 64), y = f.f32(64, 64);
  EXPECT_GE(f.gc->max_capture_rows(), 1 << 20);
  f.be->matmul(y, l.w_q8, x);
  const std::vector<float> direct64 = f.get(y);
  f.gc->begin_capture();
  f.be->matmul(y, l.w_q8, x);
  f.gc->end_capture()->launch();
  EXPECT_TRUE(same_bits(f.get(y), direct64));
}

// ...but the opt-in GEMM path (gemm_min_tokens rows or more) is not.
TEST(CudaGraph, TheOptInGemmPathIsNotCaptured) {
  Fixture f(64);
  const Layer l = make_layer(f, 3);
  Tensor x = f.f32(64, 64), y = f.f32(64, 64);
  f.be->matmul(y, l.w_f32, x);  // fine outside a capture
  EXPECT_EQ(f.gc->max_capture_rows(), 63);
  f.gc->begin_capture();
  EXPECT_THROW(f.be->matmul(y, l.w_f32, x), std::logic_error);
  f.gc->abort_capture();
}

TEST(CudaGraph, ScratchGrowthChangesTheCaptureEpoch) {
  Fixture f;
  const Layer small = make_layer(f, 2);
  small.run(*f.be);
  const uint64_t e0 = f.gc->capture_epoch();
  small.run(*f.be);
  EXPECT_EQ(f.gc->capture_epoch(), e0) << "same sizes: nothing moved";
  const Layer big = make_layer(f, 30);
  big.run(*f.be);  // the quantized activations' scratch grows: graphs of `small` would read freed memory
  EXPECT_NE(f.gc->capture_epoch(), e0);
}

}  // namespace
}  // namespace tandem::kernels
