// Runtime choice of the AMX path (quant.hpp): the CPU's features from CPUID, the OS's
// XCR0, and Linux's per-process permission for the tile data, asked for once.
#include <atomic>
#include <cstdlib>
#include <stdexcept>
#include <string>

#if defined(__x86_64__)
#include <cpuid.h>
#endif
#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include "kernels/cpu/matmul_impl.hpp"
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

// TANDEM_AMX=0 keeps the VNNI kernels (side-by-side timings; a way around a suspected
// problem with the AMX ones).
AmxPath detect() {
  const char* v = std::getenv("TANDEM_AMX");
  if (v && std::string(v) == "0") return AmxPath::Off;
  return amx_available() && detected_isa() == Isa::Avx512 ? AmxPath::Hardware : AmxPath::Off;
}

std::atomic<int> g_forced{-1};

}  // namespace

bool amx_available() {
  static const bool on = cpu_has_amx() && tile_data_granted();
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
  if (p == AmxPath::Hardware && (!amx_available() || detected_isa() != Isa::Avx512))
    throw std::invalid_argument("force_amx: this CPU has no usable AMX tiles");
  if (p == AmxPath::Model && detected_isa() != Isa::Avx512)
    throw std::invalid_argument("force_amx: the AMX model's kernels need AVX-512");
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
    case AmxPath::Model: return amx_rows_model(t);
    case AmxPath::Off: return nullptr;
  }
  return nullptr;
}
}  // namespace mm

}  // namespace tandem::kernels::cpu
