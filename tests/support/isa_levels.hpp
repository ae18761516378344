// The CPU kernel levels a kernel test runs at: every level this machine has, and the
// AVX-512 kernels compiled against SIMDe (tandem_avx512_emulated) where the CPU has only
// AVX2, so that their arithmetic is checked on any machine. Header-only: the emulated set
// is linked (and TANDEM_HAVE_AVX512_EMULATION defined) per test executable.
#pragma once
#include <cstdlib>
#include <string>
#include <vector>

#include "kernels/cpu/matmul_impl.hpp"
#include "kernels/cpu/quant.hpp"

namespace tandem::test {

// Installs the emulated AVX-512 kernels as the Avx512 level, once, on an AVX2 CPU, or on
// any CPU with TANDEM_TEST_AVX512_EMULATED=1 (to check the emulated build on an AVX-512
// machine; the native kernels are then not the ones tested).
inline bool avx512_emulated() {
  static const bool on = [] {
#if defined(TANDEM_HAVE_AVX512_EMULATION)
    const char* force = std::getenv("TANDEM_TEST_AVX512_EMULATED");
    if (kernels::cpu::detected_isa() == kernels::cpu::Isa::Avx512 && force && std::string(force) == "1") {
      kernels::cpu::mm::install_avx512_kernels_for_testing(kernels::cpu::mm::avx512_emulated_kernels());
      return false;  // the detected Avx512 level is already in supported_isas()
    }
    if (kernels::cpu::detected_isa() == kernels::cpu::Isa::Avx2) {
      kernels::cpu::mm::install_avx512_kernels_for_testing(kernels::cpu::mm::avx512_emulated_kernels());
      return true;
    }
#endif
    return false;
  }();
  return on;
}

inline std::vector<kernels::cpu::Isa> supported_isas() {
  using kernels::cpu::Isa;
  std::vector<Isa> v;
  for (Isa i : {Isa::Scalar, Isa::Avx2, Isa::Avx512})
    if (static_cast<int>(i) <= static_cast<int>(kernels::cpu::detected_isa())) v.push_back(i);
  if (avx512_emulated()) v.push_back(Isa::Avx512);
  return v;
}

// Restores the detected level when a test ends, whatever it forced.
struct IsaGuard {
  ~IsaGuard() { kernels::cpu::force_isa(kernels::cpu::detected_isa()); }
};

}  // namespace tandem::test
