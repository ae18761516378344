// The AMX-INT8 tiled kernels on the exact model of the tile instructions
// (kernels/cpu/amx_tiles.hpp): the kernel code the CPU's tiles run, on any AVX-512 machine,
// so that the tests check the AMX kernels' bits where the CPU has no AMX. Far slower than
// either real path; compiled for the tests only (tests/CMakeLists.txt gives this file the
// AVX-512 flags the kernels need; emulated/amx_model_kernels.cpp is its SIMDe twin).
#include "tests/support/amx_model.hpp"

#include "kernels/cpu/matmul_tiles_amx_impl.hpp"
#include "kernels/cpu/quant.hpp"

namespace tandem::test {

kernels::cpu::mm::RowsFn amx_model_rows(DType t) {
  return kernels::cpu::mm::TANDEM_AVX512_NS::amx_rows_for<kernels::cpu::amx::AmxModel>(t);
}

}  // namespace tandem::test
