#include "kernels/cpu/convert_impl.hpp"

namespace tandem::kernels::cpu {
void fp16_to_f32_row_avx2(const uint16_t* s, float* d, int64_t n) { convert_detail::to_f32(s, d, n); }
void f32_to_fp16_row_avx2(const float* s, uint16_t* d, int64_t n) { convert_detail::to_f16(s, d, n); }
}  // namespace tandem::kernels::cpu
