// The AMX kernels on the model of the tile instructions, compiled against SIMDe with the
// emulated AVX-512 kernels (the tandem_avx512_emulated library, tests/CMakeLists.txt): the
// kernels the AMX path runs, tested bit for bit on a machine with neither AMX nor AVX-512.
// The twin of ../amx_model_kernels.cpp, which compiles the same code natively.
#include "tests/support/amx_model.hpp"

#include "kernels/cpu/matmul_tiles_amx_impl.hpp"

namespace tandem::test {

kernels::cpu::mm::RowsFn amx_model_rows_emulated(DType t) {
  return kernels::cpu::mm::TANDEM_AVX512_NS::amx_rows_for<kernels::cpu::amx::AmxModel>(t);
}

}  // namespace tandem::test
