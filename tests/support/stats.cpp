#include "tests/support/stats.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace tandem::test {

Distribution distribution(std::vector<int32_t> ids, std::vector<float> probs) {
  std::vector<size_t> order(ids.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return probs[a] != probs[b] ? probs[a] > probs[b] : ids[a] < ids[b];
  });
  Distribution d;
  for (size_t i : order) {
    d.ids.push_back(ids[i]);
    d.probs.push_back(probs[i]);
  }
  return d;
}

// Series below a+1, Lentz continued fraction above (the standard Numerical Recipes scheme).
double gamma_q(double a, double x) {
  if (x <= 0.0) return 1.0;
  const double log_prefix = -x + a * std::log(x) - std::lgamma(a);
  if (x < a + 1.0) {
    double ap = a, del = 1.0 / a, sum = del;
    for (int i = 0; i < 100000 && std::fabs(del) > std::fabs(sum) * 1e-16; ++i) {
      ap += 1.0;
      del *= x / ap;
      sum += del;
    }
    return 1.0 - sum * std::exp(log_prefix);
  }
  constexpr double kTiny = 1e-300;
  double b = x + 1.0 - a, c = 1.0 / kTiny, d = 1.0 / b, h = d;
  for (int i = 1; i < 100000; ++i) {
    const double an = -i * (i - a);
    b += 2.0;
    d = an * d + b;
    if (std::fabs(d) < kTiny) d = kTiny;
    c = b + an / c;
    if (std::fabs(c) < kTiny) c = kTiny;
    d = 1.0 / d;
    const double del = d * c;
    h *= del;
    if (std::fabs(del - 1.0) < 1e-16) break;
  }
  return std::exp(log_prefix) * h;
}
double chi2_sf(double x, int df) {
  if (df < 1) return std::numeric_limits<double>::quiet_NaN();
  return gamma_q(df / 2.0, x / 2.0);
}

Chi2Result chi2_goodness_of_fit(const std::vector<int64_t>& observed, const std::vector<double>& probs, int64_t n) {
  Chi2Result r;
  r.statistic = chi2_statistic(observed, probs, n);
  r.df = static_cast<int>(observed.size()) - 1;
  r.p_value = chi2_sf(r.statistic, r.df);
  return r;
}

double chi2_statistic(const std::vector<int64_t>& observed, const std::vector<double>& expected_probs, int64_t n) {
  double stat = 0.0;
  for (size_t j = 0; j < observed.size(); ++j) {
    const double e = expected_probs[j] * static_cast<double>(n);
    const double diff = static_cast<double>(observed[j]) - e;
    stat += diff * diff / e;
  }
  return stat;
}


double chi2_two_sample_pvalue(const std::map<int64_t, int64_t>& a, const std::map<int64_t, int64_t>& b, int* df_out,
                              double min_pooled) {
  double na = 0, nb = 0;
  for (const auto& [k, v] : a) na += static_cast<double>(v);
  for (const auto& [k, v] : b) nb += static_cast<double>(v);
  std::map<int64_t, std::pair<double, double>> cells;
  for (const auto& [k, v] : a) cells[k].first += static_cast<double>(v);
  for (const auto& [k, v] : b) cells[k].second += static_cast<double>(v);
  std::vector<std::pair<double, double>> kept;
  std::pair<double, double> rare{0, 0};
  for (const auto& [k, c] : cells) {
    if (c.first + c.second >= min_pooled) {
      kept.push_back(c);
    } else {
      rare.first += c.first;
      rare.second += c.second;
    }
  }
  if (rare.first + rare.second > 0) kept.push_back(rare);
  const double n = na + nb;
  double stat = 0.0;
  for (const auto& [ca, cb] : kept) {
    const double tot = ca + cb;
    const double ea = tot * na / n, eb = tot * nb / n;
    stat += (ca - ea) * (ca - ea) / ea + (cb - eb) * (cb - eb) / eb;
  }
  const int df = static_cast<int>(kept.size()) - 1;
  if (df_out) *df_out = df;
  return chi2_sf(stat, df);  // NaN when df == 0: one cell cannot show a difference
}

}  // namespace tandem::test
