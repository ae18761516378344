// The same attention code compiled with AVX2/FMA/F16C (see kernels/CMakeLists.txt).
#include "kernels/cpu/attention_impl.hpp"

namespace tandem::kernels::cpu {
void attention_tasks_avx2(const AttnArgs& a, int64_t begin, int64_t end) { attention_tasks(a, begin, end); }
}  // namespace tandem::kernels::cpu
