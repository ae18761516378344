// Paged attention throughput: one decode token and a k+1 = 8 token verification run over
// contexts of 512 and 4096 cached positions, at the head shapes of SmolLM2-135M (9 query /
// 3 KV heads of 64) and Qwen2.5-1.5B (12 / 2 of 128), F16 cache in 16-position blocks
// scattered over the pool like a serving cache. Next to the machine's read bandwidth:
// decode attention reads every cached K and V row once per token.
//
// Counters are rates: kvGB = GB of K and V rows read per second (once per token),
// GFLOP = 10^9 floating-point operations per second (2 per multiply-add of QK and PV).
//
//   bench_attention [--benchmark_filter=qwen] [--benchmark_min_time=0.3]
//   TANDEM_THREADS=n  threads (default: the cores this process may use)
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kernels/backend.hpp"
#include "kernels/cpu/fp16.hpp"
#include "kernels/cpu/thread_pool.hpp"

namespace {

using namespace tandem;
using namespace tandem::kernels;

int threads() {
  if (const char* s = std::getenv("TANDEM_THREADS"); s && *s) return std::max(1, std::atoi(s));
  return cpu::ThreadPool::default_threads();
}

struct Heads {
  const char* name;
  int n_heads, n_kv, hd;
};

void BM_attention(benchmark::State& st, Heads h) {
  const int ctx = static_cast<int>(st.range(0)), n_new = static_cast<int>(st.range(1));
  const int bs = 16, n_blocks = (ctx + bs - 1) / bs, kvw = h.n_kv * h.hd;
  auto be = make_cpu_backend(threads());
  std::vector<std::unique_ptr<Buffer>> bufs;
  auto tensor = [&](DType t, int64_t cols, int64_t rows) {
    bufs.push_back(be->alloc(row_bytes(t, cols) * static_cast<size_t>(rows)));
    return make_tensor(bufs.back().get(), t, cols, rows);
  };
  // Cache blocks in a shuffled order (a serving cache hands out whatever block is free).
  const int pool_blocks = n_blocks * 2;
  std::vector<int32_t> table(static_cast<size_t>(n_blocks));
  std::vector<int32_t> perm(static_cast<size_t>(pool_blocks));
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), std::mt19937(1));
  std::copy_n(perm.begin(), n_blocks, table.begin());
  KVLayer layer{tensor(DType::F16, kvw, int64_t{pool_blocks} * bs), tensor(DType::F16, kvw, int64_t{pool_blocks} * bs)};
  std::mt19937 g(2);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<uint16_t> kv(static_cast<size_t>(kvw) * pool_blocks * bs);
  for (auto& v : kv) v = cpu::f32_to_fp16(nd(g));
  be->upload(layer.k, kv.data(), kv.size() * 2);
  be->upload(layer.v, kv.data(), kv.size() * 2);
  std::vector<float> q(static_cast<size_t>(n_new) * h.n_heads * h.hd);
  for (auto& v : q) v = nd(g);
  Tensor tq = tensor(DType::F32, int64_t{h.n_heads} * h.hd, n_new), out = tensor(DType::F32, int64_t{h.n_heads} * h.hd, n_new);
  be->upload(tq, q.data(), q.size() * 4);
  std::vector<int32_t> pos(static_cast<size_t>(n_new)), seq(static_cast<size_t>(n_new), 0), slots(static_cast<size_t>(n_new), 0);
  for (int i = 0; i < n_new; ++i) pos[static_cast<size_t>(i)] = ctx - n_new + i;
  auto ints = [&](const std::vector<int32_t>& v, int64_t cols) {
    Tensor t = tensor(DType::I32, cols, static_cast<int64_t>(v.size()) / cols);
    be->upload(t, v.data(), v.size() * 4);
    return t;
  };
  PagedAttnMeta meta{ints(pos, n_new), ints(seq, n_new), ints(table, n_blocks), ints(slots, n_new), bs};
  for (auto _ : st) be->paged_attention(out, tq, layer, meta, h.n_heads, h.n_kv, h.hd, 0.125f);
  const double iters = static_cast<double>(st.iterations());
  double positions = 0;  // (token, cached position) pairs attended
  for (int i = 0; i < n_new; ++i) positions += pos[static_cast<size_t>(i)] + 1;
  st.counters["kvGB"] = benchmark::Counter(iters * 2.0 * kvw * 2 * ctx / 1e9, benchmark::Counter::kIsRate);
  st.counters["GFLOP"] =
      benchmark::Counter(iters * positions * h.n_heads * h.hd * 4.0 / 1e9, benchmark::Counter::kIsRate);
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  for (Heads h : {Heads{"smollm2", 9, 3, 64}, Heads{"qwen1.5b", 12, 2, 128}}) {
    const std::string name = std::string("attention/") + h.name;
    benchmark::RegisterBenchmark(name.c_str(), BM_attention, h)
        ->ArgNames({"ctx", "tokens"})
        ->Args({512, 1})
        ->Args({512, 8})
        ->Args({4096, 1})
        ->Args({4096, 8})
        ->UseRealTime()
        ->Unit(benchmark::kMicrosecond);
  }
  std::printf("threads: %d\n", threads());
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
