#include "engine/sampling/gumbel.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

#include "engine/sampling/rng.hpp"

namespace tandem {

double portable_log(double x) {
  if (!(x > 0.0)) return x == 0.0 ? -std::numeric_limits<double>::infinity() : std::numeric_limits<double>::quiet_NaN();
  if (std::isinf(x)) return x;
  int e = 0;
  double m = std::frexp(x, &e);  // exact: x = m * 2^e, m in [0.5, 1)
  if (m < 0.70710678118654752440) {
    m *= 2.0;  // exact
    --e;
  }
  // m in [sqrt(1/2), sqrt(2)): ln m = 2 atanh(s), s = (m-1)/(m+1), |s| <= 0.1716, and the
  // odd series s + s^3/3 + ... reaches 1e-18 after 11 terms.
  const double s = (m - 1.0) / (m + 1.0);
  const double s2 = s * s;
  double t = 1.0 / 23.0;
  for (int k = 21; k >= 1; k -= 2) t = t * s2 + 1.0 / k;
  constexpr double kLn2Hi = 6.93147180369123816490e-01;  // ln 2 split so that e * hi is exact
  constexpr double kLn2Lo = 1.90821492927058770002e-10;
  return (e * kLn2Hi + 2.0 * s * t) + e * kLn2Lo;
}

double PositionNoise::uniform(int64_t position, int32_t token) const {
  // Keys that differ in one bit (neighbouring positions or token ids) give unrelated outputs.
  const uint64_t row =
      splitmix64_mix(splitmix64_mix(seed_ + kSplitmixGamma) + static_cast<uint64_t>(position) * kSplitmixGamma);
  const uint64_t h =
      splitmix64_mix(row + (static_cast<uint64_t>(static_cast<uint32_t>(token)) + 1) * kSplitmixGamma);
  // The top 53 bits, centred in their interval: never 0 or 1.
  return (static_cast<double>(h >> 11) + 0.5) * 0x1.0p-53;
}

int32_t gumbel_argmax(const Distribution& d, const PositionNoise& noise, int64_t position) {
  if (d.ids.empty()) throw std::invalid_argument("gumbel_argmax: empty distribution");
  int32_t best = d.ids[0];
  double best_key = std::numeric_limits<double>::infinity();
  for (size_t i = 0; i < d.ids.size(); ++i) {
    const double p = d.probs[i];
    if (!(p > 0.0)) continue;
    // E = -log u >= 1 - u, so a token whose lower bound (1 - u) / p already loses needs no
    // logarithm. Once a likely token has set best_key, that is almost every token of a long
    // tail: a full 152k vocabulary costs a hash per token and a few dozen logarithms.
    const double u = noise.uniform(position, d.ids[i]);
    if (1.0 - u >= best_key * p) continue;
    const double key = -portable_log(u) / p;
    if (key < best_key) {
      best_key = key;
      best = d.ids[i];
    }
  }
  return best;
}

std::vector<int32_t> gumbel_top(const Distribution& d, const PositionNoise& noise, int64_t position, size_t w) {
  if (d.ids.empty()) throw std::invalid_argument("gumbel_top: empty distribution");
  // The best w so far by key (ascending; ties keep the earlier entry), as in gumbel_argmax:
  // a token whose lower bound already loses to the w-th needs no logarithm.
  std::vector<std::pair<double, int32_t>> best;
  for (size_t i = 0; i < d.ids.size() && w > 0; ++i) {
    const double p = d.probs[i];
    if (!(p > 0.0)) continue;
    const double bar = best.size() < w ? std::numeric_limits<double>::infinity() : best.back().first;
    const double u = noise.uniform(position, d.ids[i]);
    if (1.0 - u >= bar * p) continue;
    const double key = -portable_log(u) / p;
    if (!(key < bar)) continue;
    auto at = std::upper_bound(best.begin(), best.end(), key,
                               [](double k, const std::pair<double, int32_t>& e) { return k < e.first; });
    best.insert(at, {key, d.ids[i]});
    if (best.size() > w) best.pop_back();
  }
  std::vector<int32_t> out;
  for (const auto& e : best) out.push_back(e.second);
  if (out.empty()) out.push_back(d.ids[0]);  // no positive weight: gumbel_argmax's answer
  return out;
}

}  // namespace tandem
