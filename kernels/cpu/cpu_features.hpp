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

// CPUID.(EAX=7, ECX=0):EDX bits 24 (AMX-TILE) and 25 (AMX-INT8): what the CPU has, whether
// or not the OS lets a process use it (kernels::cpu::amx_available() says that).
inline bool cpu_has_amx_int8() {
#if defined(__x86_64__)
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
  return (d & (1u << 24)) && (d & (1u << 25));
#else
  return false;
#endif
}

}  // namespace tandem::cpu
