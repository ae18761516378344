// The AMX kernels on the model of the tile instructions, for the tests (amx_model_kernels.cpp).
#pragma once
#include "kernels/cpu/matmul_impl.hpp"

namespace tandem::test {

// The model's kernel for tiled weights of type t (nullptr: no tiles for it).
kernels::cpu::mm::RowsFn amx_model_rows(DType t);
// Makes them the AMX path's Model kernels: force_amx(AmxPath::Model) then selects them.
void install_amx_model();

}  // namespace tandem::test
