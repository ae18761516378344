// Runtime choice of the AMX path (quant.hpp): the CPU's features from CPUID, the OS's
// XCR0, and Linux's per-process permission for the tile data, asked for once.
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

#if defined(__x86_64__)
#include <cpuid.h>
#endif
#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include "kernels/cpu/matmul_impl.hpp"
#include "kernels/cpu/pack_tiles.hpp"
#include "kernels/cpu/quant.hpp"

namespace tandem::kernels::cpu {
namespace {

// CPUID.(EAX=7, ECX=0):EDX bit 24 AMX-TILE, bit 25 AMX-INT8; the OS must have enabled the
// tile state in XCR0 (bit 17 XTILECFG, bit 18 XTILEDATA), which needs OSXSAVE (CPUID.1:ECX
// bit 27) to read.
bool cpu_has_amx() {
#if defined(__x86_64__)
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 27))) return false;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
  if (!(d & (1u << 24)) || !(d & (1u << 25))) return false;
  unsigned lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (lo & (3u << 17)) == (3u << 17);
#else
  return false;
#endif
}

// Linux hands a process the tile data only on request (else the first tile instruction
// faults): arch_prctl(ARCH_REQ_XCOMP_PERM = 0x1023, XFEATURE_XTILEDATA = 18), which
// grants it to every thread of the process.
bool tile_data_granted() {
#if defined(__linux__) && defined(__x86_64__)
  return syscall(SYS_arch_prctl, 0x1023, 18) == 0;
#else
  return false;
#endif
}

// The tiled VNNI kernels, which the AMX kernels' bits must equal.
mm::RowsFn vnni_tiled(DType t) {
  const mm::IsaKernels* k = mm::avx512_kernels();
  return k && k->rows_tiled ? k->rows_tiled(t) : nullptr;
}

// Before the CPU's tiles are used: their kernels against the VNNI ones. A machine whose tiles
// compute something else (a hypervisor that passes the instructions on wrongly, a defect)
// keeps the VNNI kernels and says so, rather than computing other numbers.
bool tiles_agree() {
  if (mm::tiled_kernels_agree(mm::amx_rows_hardware, vnni_tiled, mm::avx512_kernels())) return true;
  std::fprintf(stderr, "tandem: this CPU's AMX tiles do not give the VNNI kernels' results; using the VNNI kernels\n");
  return false;
}

// TANDEM_AMX=0 keeps the VNNI kernels (side-by-side timings; a way around a suspected
// problem with the AMX ones).
AmxPath detect() {
  const char* v = std::getenv("TANDEM_AMX");
  if (v && std::string(v) == "0") return AmxPath::Off;
  return amx_available() ? AmxPath::Hardware : AmxPath::Off;
}

std::atomic<int> g_forced{-1};
std::atomic<mm::RowsFn (*)(DType)> g_model{nullptr};

}  // namespace

bool amx_available() {
  static const bool on = cpu_has_amx() && tile_data_granted() && detected_isa() == Isa::Avx512 && tiles_agree();
  return on;
}

AmxPath detected_amx() {
  static const AmxPath p = detect();
  return p;
}

AmxPath amx_path() {
  const int f = g_forced.load(std::memory_order_relaxed);
  return f >= 0 ? static_cast<AmxPath>(f) : detected_amx();
}

void force_amx(AmxPath p) {
  if (p == AmxPath::Hardware && !amx_available())
    throw std::invalid_argument("force_amx: this CPU has no usable AMX tiles");
  if (p == AmxPath::Model && detected_isa() != Isa::Avx512 && !mm::avx512_kernels_for_testing())
    throw std::invalid_argument("force_amx: the AMX model's kernels need AVX-512 (or the tests' emulated set)");
  if (p == AmxPath::Model && !g_model.load())
    throw std::invalid_argument("force_amx: no AMX model kernels installed (tests: test::install_amx_model)");
  g_forced.store(static_cast<int>(p), std::memory_order_relaxed);
}

std::string amx_name(AmxPath p) {
  switch (p) {
    case AmxPath::Off: return "off";
    case AmxPath::Hardware: return "amx";
    case AmxPath::Model: return "amx-model";
  }
  return "unknown";
}

namespace mm {
RowsFn amx_rows(DType t) {
  switch (amx_path()) {
    case AmxPath::Hardware: return amx_rows_hardware(t);
    case AmxPath::Model: {
      RowsFn (*model)(DType) = g_model.load();
      return model ? model(t) : nullptr;
    }
    case AmxPath::Off: return nullptr;
  }
  return nullptr;
}

void install_amx_model_for_testing(RowsFn (*kernels)(DType)) { g_model.store(kernels); }

namespace {
// Well-formed random blocks in the file's layout: random codes and scale bytes, the f16
// fields small and finite.
std::vector<uint8_t> check_weights(DType t, int64_t R, int64_t C, uint64_t seed) {
  const size_t bb = dtype_info(t).type_size;
  std::vector<uint8_t> w(row_bytes(t, C) * static_cast<size_t>(R));
  uint64_t s = seed;
  for (auto& b : w) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    b = static_cast<uint8_t>(s >> 56);
  }
  // Where the f16 fields are: d (Q6_K: at 208) and, for Q4_1, Q5_1 and Q4_K, the next two bytes.
  const size_t d = t == DType::Q6_K ? 208 : 0;
  const bool two = t == DType::Q4_1 || t == DType::Q5_1 || t == DType::Q4_K;
  for (size_t at = 0; at < w.size(); at += bb)
    for (size_t o = d; o < d + (two ? 4 : 2); o += 2) {
      w[at + o] = static_cast<uint8_t>(0x66 + (at / bb) % 7);  // about 0.1
      w[at + o + 1] = 0x2e;
    }
  return w;
}

struct Aligned {
  void operator()(uint8_t* p) const { ::operator delete(p, std::align_val_t{64}); }
};
}  // namespace

bool tiled_kernels_agree(RowsFn (*a)(DType), RowsFn (*b)(DType), const IsaKernels* k) {
  if (!k || !k->quant) return false;
  const int64_t R = 37, C = 512, N = 40;  // 2 whole groups and 5 rows as stored
  for (const DType t : {DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q8_0, DType::Q4_K, DType::Q6_K}) {
    const RowsFn fa = a(t), fb = b(t);
    const QuantFn quant = k->quant(t);
    if (!fa || !fb || !quant) return false;
    const std::vector<uint8_t> file = check_weights(t, R, C, 0x5eed + static_cast<uint64_t>(t));
    std::vector<uint8_t> w(file.size());
    const size_t rb = row_bytes(t, C);
    for (int64_t g = 0; g + kTileRows <= R; g += kTileRows)
      tile_group(t, file.data() + static_cast<size_t>(g) * rb, rb, w.data() + static_cast<size_t>(g) * rb, C);
    const int64_t tiled = tiled_rows(R);
    std::memcpy(w.data() + static_cast<size_t>(tiled) * rb, file.data() + static_cast<size_t>(tiled) * rb,
                static_cast<size_t>(R - tiled) * rb);
    const ActLayout l = act_layout(family(t), C);
    std::unique_ptr<uint8_t, Aligned> xq(static_cast<uint8_t*>(::operator new(l.row_bytes * N, std::align_val_t{64})));
    std::vector<float> x(static_cast<size_t>(C));
    for (int64_t i = 0; i < N; ++i) {
      for (int64_t c = 0; c < C; ++c) x[static_cast<size_t>(c)] = static_cast<float>((c * 37 + i * 11) % 23 - 11) / 7.0f;
      quant(x.data(), l, xq.get() + l.row_bytes * static_cast<size_t>(i));
    }
    Args args;
    args.wt = t;
    args.w = w.data();
    args.w_stride = rb;
    args.R = R;
    args.C = C;
    args.xq = xq.get();
    args.xl = l;
    args.ldy = R;
    std::vector<float> ya(static_cast<size_t>(R * N)), yb(ya.size());
    // Token counts: the plain kernels in one A tile, the folded ones in several.
    for (const int64_t n : {int64_t{5}, int64_t{16}, N}) {
      auto run = [&](RowsFn f, std::vector<float>& y) {
        args.y = y.data();
        for (int64_t t0 = 0; t0 < n; t0 += kMaxTokens) f(args, 0, R, t0, std::min(n, t0 + kMaxTokens));
      };
      run(fa, ya);
      run(fb, yb);
      if (std::memcmp(ya.data(), yb.data(), sizeof(float) * static_cast<size_t>(R * n)) != 0) return false;
    }
  }
  return true;
}
}  // namespace mm

}  // namespace tandem::kernels::cpu
