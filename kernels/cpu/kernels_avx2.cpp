// The AVX2 kernel set (see matmul_impl.hpp). Selected only after detected_isa() has
// confirmed AVX2, FMA and F16C at run time.
#include "kernels/cpu/matmul_impl.hpp"

namespace tandem::kernels::cpu::mm {
namespace {
RowsFn avx2_rows(DType t) {
  if (RowsFn f = avx2_rows_qk(t)) return f;
  if (RowsFn f = avx2_rows_q32(t)) return f;
  return avx2_rows_float(t);
}
QuantFn avx2_quant(DType t) {
  switch (family(t)) {
    case Family::Q32: return avx2_quant_q32_for(t);
    case Family::QK: return avx2_quant_qk_for(t);
    default: return nullptr;
  }
}
// Weights in 16-row tiles: Q4_K, Q4_0, Q4_1 (the other types keep their packed or file
// rows at this level: matmul_*_tiles_avx2.cpp say why).
RowsFn avx2_rows_tiled(DType t) {
  if (RowsFn f = avx2_rows_qk_tiles(t)) return f;
  return avx2_rows_q32_tiles(t);
}
}  // namespace

const IsaKernels* avx2_kernels() {
  static const IsaKernels k{avx2_rows, avx2_quant, avx2_dequant, avx2_rows_q32_packed, avx2_rows_tiled, avx2_quantize};
  return &k;
}

}  // namespace tandem::kernels::cpu::mm
