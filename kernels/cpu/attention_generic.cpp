// The portable attention span (see attention_impl.hpp), used when the CPU has no AVX2/F16C.
#include "kernels/cpu/attention_impl.hpp"

namespace tandem::kernels::cpu {
void attention_span_generic(const AttnArgs& a, int64_t t, int kvh, int32_t lo, int32_t hi, AttnState st) {
  attn_detail::span_generic(a, t, kvh, lo, hi, st);
}
}  // namespace tandem::kernels::cpu
