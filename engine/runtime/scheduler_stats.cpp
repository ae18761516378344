#include "engine/runtime/scheduler_stats.hpp"

namespace tandem {

void Histogram::observe(double v) {
  size_t i = 0;
  while (i < bounds.size() && v > bounds[i]) ++i;
  ++counts[i];
  sum += v;
  ++count;
}

}  // namespace tandem
