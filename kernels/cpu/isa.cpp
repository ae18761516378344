// Runtime choice of the kernel instruction set: detected once from CPUID, overridable
// (downwards only) for tests and benchmarks.
#include <atomic>
#include <cstdlib>
#include <stdexcept>

#include "kernels/cpu/matmul_impl.hpp"
#include "kernels/cpu/quant.hpp"

namespace tandem::kernels::cpu {
namespace {

Isa detect_cpu() {
  __builtin_cpu_init();
  // The AVX-512 kernels use BW (byte/word ops) and VNNI (vpdpbusd) besides the foundation.
  if (mm::avx512_kernels() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("fma") &&
      __builtin_cpu_supports("bmi2"))
    return Isa::Avx512;
  // F16C has no __builtin_cpu_supports name in GCC 12; every AVX2 CPU has it.
  if (mm::avx2_kernels() && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
      __builtin_cpu_supports("bmi2"))
    return Isa::Avx2;
  return Isa::Scalar;
}

// TANDEM_ISA=scalar|avx2 caps the level for the whole process (a way around a suspected
// kernel problem on one CPU, and for comparisons); it never raises it.
Isa detect() {
  const Isa cpu = detect_cpu();
  const char* cap = std::getenv("TANDEM_ISA");
  if (!cap || !*cap) return cpu;
  for (Isa i : {Isa::Scalar, Isa::Avx2, Isa::Avx512})
    if (isa_name(i) == cap) return static_cast<int>(i) < static_cast<int>(cpu) ? i : cpu;
  return cpu;  // an unknown name changes nothing
}

std::atomic<int> g_forced{-1};

}  // namespace

Isa detected_isa() {
  static const Isa isa = detect();
  return isa;
}

void force_isa(Isa isa) {
  // Tests may install emulated AVX-512 kernels, which run on any AVX2 CPU.
  const bool emulated = isa == Isa::Avx512 && mm::avx512_kernels_for_testing() && detected_isa() >= Isa::Avx2;
  if (!emulated && static_cast<int>(isa) > static_cast<int>(detected_isa()))
    throw std::invalid_argument("force_isa: " + isa_name(isa) + " is not available on this CPU (best: " +
                                isa_name(detected_isa()) + ")");
  g_forced.store(static_cast<int>(isa), std::memory_order_relaxed);
}

Isa active_isa() {
  const int f = g_forced.load(std::memory_order_relaxed);
  return f < 0 ? detected_isa() : static_cast<Isa>(f);
}

std::string isa_name(Isa isa) {
  switch (isa) {
    case Isa::Scalar: return "scalar";
    case Isa::Avx2: return "avx2";
    case Isa::Avx512: return "avx512";
  }
  return "unknown";
}

}  // namespace tandem::kernels::cpu
