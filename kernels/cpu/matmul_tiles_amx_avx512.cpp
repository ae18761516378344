// The AMX-INT8 tiled kernels on the CPU's tile instructions (matmul_tiles_amx_impl.hpp).
// Chosen only where amx.cpp found AMX-TILE and AMX-INT8 and the kernel granted the tile
// data (amx_path()); the instructions are inline assembly, so no compiler flag is needed.
#include "kernels/cpu/matmul_tiles_amx_impl.hpp"

namespace tandem::kernels::cpu::mm {
RowsFn amx_rows_hardware(DType t) { return TANDEM_AVX512_NS::amx_rows_for<amx::AmxHardware>(t); }
}  // namespace tandem::kernels::cpu::mm
