// The AVX-512 kernel set (see matmul_impl.hpp): VNNI kernels for every quantized weight
// type, and register-tiled kernels for float weights (the AVX2 kernels' bits).
// Selected only after detected_isa() has confirmed AVX-512 F/BW/VL/DQ and VNNI at run time.
// Compiled a second time against SIMDe for the tests (simd_avx512.hpp), which then exports
// avx512_emulated_kernels() instead.
#include "kernels/cpu/matmul_impl.hpp"
#include "kernels/cpu/simd_avx512.hpp"

namespace tandem::kernels::cpu::mm {
namespace TANDEM_AVX512_NS {
RowsFn rows_q32(DType t);
RowsFn rows_q32_packed(DType t);
RowsFn rows_qk(DType t);
RowsFn rows_qk_tiles(DType t);
RowsFn rows_q32_tiles(DType t);
RowsFn rows_float(DType t);
void attention_multi_avx512(const AttnArgs& a, const int64_t* ts, const int32_t* his, int n_tok, int kvh, int32_t lo,
                            AttnState* sts);
QuantFn quant_qk_for(DType t);
}  // namespace TANDEM_AVX512_NS

namespace {
RowsFn rows(DType t) {
  if (RowsFn f = TANDEM_AVX512_NS::rows_float(t)) return f;
  if (RowsFn f = TANDEM_AVX512_NS::rows_qk(t)) return f;
  return TANDEM_AVX512_NS::rows_q32(t);
}
// Weights in 16-row tiles: the K-quants and the 32-element types.
RowsFn rows_tiled(DType t) {
  if (RowsFn f = TANDEM_AVX512_NS::rows_qk_tiles(t)) return f;
  return TANDEM_AVX512_NS::rows_q32_tiles(t);
}
// The 32-block kernels read activations in the AVX2 kernels' pair order, quantized by the
// AVX2 code (AVX-512 CPUs have AVX2), in file, packed and tiled layouts alike; each tiled
// kernel reads the activations of its type's row kernel.
QuantFn quant(DType t) {
  switch (family(t)) {
    case Family::Q32: return avx2_quant_q32_for(t);
    case Family::QK: return TANDEM_AVX512_NS::quant_qk_for(t);
    default: return nullptr;
  }
}
}  // namespace

#if defined(TANDEM_AVX512_EMULATED)
const IsaKernels* avx512_emulated_kernels() {
  static const IsaKernels k{rows,       quant,   nullptr, TANDEM_AVX512_NS::rows_q32_packed,
                            rows_tiled, nullptr, TANDEM_AVX512_NS::attention_multi_avx512};
  return &k;
}
#else
const IsaKernels* avx512_kernels() {
  static const IsaKernels k{rows,       quant,   nullptr, TANDEM_AVX512_NS::rows_q32_packed,
                            rows_tiled, nullptr, TANDEM_AVX512_NS::attention_multi_avx512};
  return &k;
}
#endif

}  // namespace tandem::kernels::cpu::mm
