#include <cmath>

#include "kernels/cpu/activation_impl.hpp"

namespace tandem::kernels::cpu {

void gated_act_row_scalar(const float* g, const float* u, float* y, int64_t n, Activation act) {
  if (act == Activation::SiLU) {
    for (int64_t i = 0; i < n; ++i) y[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
    return;
  }
  // GELU, tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
  constexpr float kC = 0.7978845608028654f;
  for (int64_t i = 0; i < n; ++i) {
    const float x = g[i];
    y[i] = 0.5f * x * (1.0f + std::tanh(kC * (x + 0.044715f * x * x * x))) * u[i];
  }
}

}  // namespace tandem::kernels::cpu
