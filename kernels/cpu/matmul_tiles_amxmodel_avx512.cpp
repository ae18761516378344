// The AMX-INT8 tiled kernels on the exact model of the tile instructions (amx_tiles.hpp):
// the same kernel code as on the CPU's tiles, run on any AVX-512 machine, so that the tests
// check the AMX kernels' bits where the CPU has no AMX (force_amx(AmxPath::Model)). Far
// slower than either real path; never chosen by itself.
#include "kernels/cpu/matmul_tiles_amx_impl.hpp"

namespace tandem::kernels::cpu::mm {
RowsFn amx_rows_model(DType t) { return TANDEM_AVX512_NS::amx_rows_for<amx::AmxModel>(t); }
}  // namespace tandem::kernels::cpu::mm
