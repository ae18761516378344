// CPU features that not every compiler's __builtin_cpu_supports knows: clang 14 (the fuzz
// preset) rejects "f16c", so it is read from CPUID (leaf 1, ECX bit 29) directly.
#pragma once

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

namespace tandem::cpu {

inline bool cpu_has_f16c() {
#if defined(__x86_64__) || defined(__i386__)
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return false;
  return (c & (1u << 29)) != 0;
#else
  return false;
#endif
}

}  // namespace tandem::cpu
