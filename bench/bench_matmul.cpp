// Quantized matmul throughput at the shapes of a 1.5B model (hidden 1536, FFN 8960), for
// N = 1..16 tokens per call, next to the machine's memory bandwidth (memcpy and a pure
// streaming read). Decode is memory-bound: the figure of merit is weight GB/s against the
// read bandwidth. Speculative verification needs N > 1 to cost little more than N = 1:
// the summary prints time(N)/time(N=1) per type and shape.
//
// "cold" runs rotate through copies of the matrix totalling 256 MB (8x the L3 of the
// machine this was written on), so weights stream from DRAM as in a real forward pass; "hot" runs reuse one matrix (cache-resident compute cost).
//
// Counters are rates: wGB = GB of weights per second, Mtok*row = millions of (token, row)
// dot products per second, GOP = 10^9 operations (multiply or add) per second,
// copyGB / readGB = GB copied / read per second.
//
// Types the CPU backend converts at load (kernels/cpu/quant.hpp: pack_rows, tile_rows) run
// again in those layouts, named TYPE-packed and TYPE-tiled.
//
//   bench_matmul [--benchmark_filter=Q4_K] [--benchmark_min_time=0.3]
//   TANDEM_THREADS=n  threads (default: the cores this process may use)
//   TANDEM_ISA=scalar|avx2|avx512  kernels (default: the best this CPU supports)
#include <benchmark/benchmark.h>
#include <immintrin.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "kernels/cpu/fp16.hpp"
#include "kernels/cpu/quant.hpp"
#include "kernels/cpu/thread_pool.hpp"
#include "bench/read_bandwidth.hpp"

namespace {

using tandem::DType;
namespace cpu = tandem::kernels::cpu;

constexpr size_t kColdBytes = size_t{256} << 20;

int threads() {
  if (const char* s = std::getenv("TANDEM_THREADS"); s && *s) return std::max(1, std::atoi(s));
  return cpu::ThreadPool::default_threads();
}
cpu::ThreadPool& pool() {
  static cpu::ThreadPool p(threads());
  return p;
}

uint64_t next_rand(uint64_t& s) {  // xorshift64*: fast, enough for filler bytes
  s ^= s >> 12, s ^= s << 25, s ^= s >> 27;
  return s * 0x2545f4914f6cdd1dull;
}

// Offsets of the f16 scale fields in a block; they get small normal values (random bytes
// there could be NaN or subnormal, which would not be a realistic workload).
std::vector<int> scale_offsets(DType t) {
  switch (t) {
    case DType::Q4_0: case DType::Q5_0: case DType::Q8_0: return {0};
    case DType::Q4_1: case DType::Q5_1: case DType::Q4_K: case DType::Q5_K: return {0, 2};
    case DType::Q2_K: return {80, 82};
    case DType::Q3_K: return {108};
    case DType::Q6_K: return {208};
    default: return {};
  }
}

// A big buffer of valid blocks of type t, reused by all benchmarks of that type (one type
// is kept at a time; benchmarks run grouped by type).
const std::vector<uint8_t>& weights(DType t) {
  static DType have = DType::F32;
  static std::vector<uint8_t> buf;
  if (buf.empty() || have != t) {
    have = t;
    const auto& info = tandem::dtype_info(t);
    buf.resize(kColdBytes / info.type_size * info.type_size);
    uint64_t s = 0x1234567ull + static_cast<uint64_t>(t);
    for (size_t i = 0; i + 8 <= buf.size(); i += 8) {
      const uint64_t r = next_rand(s);
      std::memcpy(&buf[i], &r, 8);
    }
    const uint16_t h = cpu::f32_to_fp16(0.001f);
    for (size_t b = 0; b + info.type_size <= buf.size(); b += info.type_size)
      for (int off : scale_offsets(t)) std::memcpy(&buf[b + static_cast<size_t>(off)], &h, 2);
  }
  return buf;
}

enum class Layout { File, Packed, Tiled };

// The same buffer with every R x C matrix in it in one of the backend's own layouts (one
// kept at a time, like weights()).
const std::vector<uint8_t>& converted_weights(DType t, int64_t R, int64_t C, Layout layout) {
  static DType have = DType::F32;
  static int64_t have_r = 0, have_c = 0;
  static Layout have_l = Layout::File;
  static std::vector<uint8_t> buf;
  if (buf.empty() || have != t || have_r != R || have_c != C || have_l != layout) {
    have = t, have_r = R, have_c = C, have_l = layout;
    const auto& w = weights(t);
    const size_t rb = tandem::row_bytes(t, C), mat = rb * static_cast<size_t>(R);
    buf.assign(w.size(), 0);
    for (size_t k = 0; (k + 1) * mat <= w.size(); ++k) {
      if (layout == Layout::Tiled) cpu::tile_rows(pool(), t, w.data() + k * mat, rb, buf.data() + k * mat, R, C);
      else cpu::pack_rows(pool(), t, w.data() + k * mat, rb, buf.data() + k * mat, R, C);
    }
  }
  return buf;
}

void BM_matmul(benchmark::State& st, DType t, int64_t R, int64_t C, bool cold, Layout layout) {
  const int64_t N = st.range(0);
  const size_t rb = tandem::row_bytes(t, C);
  const size_t mat = rb * static_cast<size_t>(R);
  const auto& w = layout == Layout::File ? weights(t) : converted_weights(t, R, C, layout);
  const size_t copies = cold ? w.size() / mat : 1;
  std::vector<float> x(static_cast<size_t>(N * C)), y(static_cast<size_t>(N * R));
  uint64_t s = 99;
  for (auto& v : x) v = static_cast<float>(static_cast<int64_t>(next_rand(s) % 2001) - 1000) * 1e-3f;
  size_t k = 0;
  for (auto _ : st) {
    const cpu::MatmulJob job{t, w.data() + mat * k, rb, R, y.data(), R, layout == Layout::Packed,
                             layout == Layout::Tiled};
    cpu::matmul_multi(pool(), &job, 1, C, x.data(), C, N);
    benchmark::ClobberMemory();
    if (++k == copies) k = 0;
  }
  const double iters = static_cast<double>(st.iterations());
  st.counters["wGB"] = benchmark::Counter(iters * static_cast<double>(mat) / 1e9, benchmark::Counter::kIsRate);
  st.counters["Mtok*row"] = benchmark::Counter(iters * static_cast<double>(N * R) / 1e6, benchmark::Counter::kIsRate);
  // Integer operations: one multiply and one add per weight and token.
  st.counters["GOP"] = benchmark::Counter(iters * 2.0 * static_cast<double>(N * R * C) / 1e9, benchmark::Counter::kIsRate);
}

// ---- memory bandwidth references ------------------------------------------------------------

std::vector<uint8_t>& bw_buffer() {
  static std::vector<uint8_t> buf(kColdBytes, 1);
  return buf;
}

void BM_memcpy(benchmark::State& st) {
  auto& src = bw_buffer();
  const size_t half = src.size() / 2;
  for (auto _ : st) {
    // Each thread copies its share of the first half onto the second half.
    pool().run([&](int ith, int nth) {
      const size_t part = half / static_cast<size_t>(nth);
      std::memcpy(src.data() + half + part * static_cast<size_t>(ith), src.data() + part * static_cast<size_t>(ith), part);
    });
    benchmark::ClobberMemory();
  }
  st.counters["copyGB"] = benchmark::Counter(static_cast<double>(st.iterations()) * static_cast<double>(half) / 1e9,
                                                benchmark::Counter::kIsRate);
}

void BM_read(benchmark::State& st) {
  if (!__builtin_cpu_supports("avx2")) {
    st.SkipWithError("needs AVX2");
    return;
  }
  auto& buf = bw_buffer();
  for (auto _ : st) {
    uint64_t sums[64] = {};  // one per thread
    tandem::bench::read_once(pool(), buf, sums);
    benchmark::DoNotOptimize(sums);
  }
  st.counters["readGB"] = benchmark::Counter(static_cast<double>(st.iterations()) * static_cast<double>(buf.size()) / 1e9,
                                                benchmark::Counter::kIsRate);
}

// ---- registration and the N-ratio summary -----------------------------------------------------

struct Shape {
  const char* name;
  int64_t R, C;
};
constexpr Shape kShapes[] = {{"1536x1536", 1536, 1536}, {"8960x1536", 8960, 1536}, {"1536x8960", 1536, 8960}};
constexpr DType kTypes[] = {DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q8_0,
                            DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K};

void register_all() {
  benchmark::RegisterBenchmark("memcpy", BM_memcpy)->UseRealTime()->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("read", BM_read)->UseRealTime()->Unit(benchmark::kMillisecond);
  // Each type as stored and in the backend's own layouts where this level has kernels for
  // them (cpu::packs_rows, cpu::tiles_rows).
  for (bool cold : {true, false})
    for (DType t : kTypes)
      for (Layout layout : {Layout::File, Layout::Packed, Layout::Tiled}) {
        if (layout == Layout::Packed && !cpu::packs_rows(t)) continue;
        if (layout == Layout::Tiled && !cpu::tiles_rows(t)) continue;
        const char* tag = layout == Layout::Tiled ? "-tiled/" : layout == Layout::Packed ? "-packed/" : "/";
        for (const Shape& s : kShapes) {
          const std::string name = std::string("matmul/") + tandem::dtype_name(t) + tag + s.name + (cold ? "/cold" : "/hot");
          auto* b = benchmark::RegisterBenchmark(name.c_str(), BM_matmul, t, s.R, s.C, cold, layout);
          b->ArgName("N")->Arg(1)->Arg(2)->Arg(4)->Arg(8)->Arg(16)->UseRealTime()->Unit(benchmark::kMicrosecond);
        }
      }
}

// Console output plus a record of each run's time, for the ratio table.
class Collector : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const Run& r : runs)
      if (!r.error_occurred && r.run_type == Run::RT_Iteration) times[r.benchmark_name()] = r.GetAdjustedRealTime();
  }
  std::map<std::string, double> times;
};

void print_ratios(const std::map<std::string, double>& times) {
  std::printf("\ntime(N)/time(N=1)  [%d threads]\n%-32s %7s %7s %7s %7s\n", threads(), "matmul", "N=2", "N=4", "N=8",
              "N=16");
  for (const auto& [name, t1] : times) {
    const std::string suffix = "/real_time";
    const auto pos = name.rfind("/N:1" + suffix);
    if (pos == std::string::npos || pos + 4 + suffix.size() != name.size()) continue;
    const std::string base = name.substr(0, pos);
    std::printf("%-32s", base.c_str());
    for (int n : {2, 4, 8, 16}) {
      auto it = times.find(base + "/N:" + std::to_string(n) + suffix);
      if (it == times.end()) std::printf(" %7s", "-");
      else std::printf(" %7.2f", it->second / t1);
    }
    std::printf("\n");
  }
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  if (const char* isa = std::getenv("TANDEM_ISA"); isa && *isa) {
    for (cpu::Isa i : {cpu::Isa::Scalar, cpu::Isa::Avx2, cpu::Isa::Avx512})
      if (cpu::isa_name(i) == isa) cpu::force_isa(i);
  }
  std::printf("kernels: %s, threads: %d\n", cpu::isa_name(cpu::active_isa()).c_str(), threads());
  register_all();
  Collector rep;
  benchmark::RunSpecifiedBenchmarks(&rep);
  print_ratios(rep.times);
  benchmark::Shutdown();
  return 0;
}
