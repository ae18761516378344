// The AMX kernels on the model of the tile instructions, for the tests (amx_model_kernels.cpp).
#pragma once
#include "kernels/cpu/matmul_impl.hpp"

namespace tandem::test {

// The model's kernel for tiled weights of type t (nullptr: no tiles for it), compiled for
// the native AVX-512 kernels.
kernels::cpu::mm::RowsFn amx_model_rows(DType t);
// The same compiled against SIMDe, for the emulated AVX-512 kernels
// (kernels::cpu::mm::avx512_emulated_kernels): defined where the test links
// tandem_avx512_emulated (TANDEM_HAVE_AVX512_EMULATION).
kernels::cpu::mm::RowsFn amx_model_rows_emulated(DType t);

// The model's kernels for the AVX-512 set the Avx512 level runs here: the emulated ones where
// the tests installed the emulated set (install_avx512_kernels_for_testing; on an AVX2 CPU
// tests/support/isa_levels.hpp does), else the native ones. (static: the answer depends on
// whether the executable links the emulated set, so each file keeps its own copy.)
static inline kernels::cpu::mm::RowsFn (*amx_model_kernels())(DType) {
#if defined(TANDEM_HAVE_AVX512_EMULATION)
  if (kernels::cpu::mm::avx512_kernels_for_testing() == kernels::cpu::mm::avx512_emulated_kernels())
    return amx_model_rows_emulated;
#endif
  return amx_model_rows;
}

// Makes them the AMX path's Model kernels: force_amx(AmxPath::Model) then selects them.
static inline void install_amx_model() { kernels::cpu::mm::install_amx_model_for_testing(amx_model_kernels()); }

}  // namespace tandem::test
