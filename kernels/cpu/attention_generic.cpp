#include "kernels/cpu/attention_impl.hpp"

namespace tandem::kernels::cpu {
void attention_tasks_generic(const AttnArgs& a, int64_t begin, int64_t end) { attention_tasks(a, begin, end); }
}  // namespace tandem::kernels::cpu
