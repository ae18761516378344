// The AVX-512 kernel set. Not written yet: returning nullptr makes detected_isa() stop at
// AVX2, which runs on every AVX-512 CPU.
#include "kernels/cpu/matmul_impl.hpp"

namespace tandem::kernels::cpu::mm {

const IsaKernels* avx512_kernels() { return nullptr; }

}  // namespace tandem::kernels::cpu::mm
