// Statistics for the distribution tests: Pearson's chi-square and its p-value.
#pragma once
#include <cstdint>
#include <map>
#include <vector>

#include "engine/sampling/sampler.hpp"

namespace tandem::test {

// A Distribution of these ids and probabilities in the order make_distribution keeps
// (descending probability, ties by id), for the verifier tests' synthetic p and q.
Distribution distribution(std::vector<int32_t> ids, std::vector<float> probs);

// Regularised upper incomplete gamma Q(a, x).
double gamma_q(double a, double x);
// P(X >= x) for X ~ chi-square(df): the p-value of a statistic. NaN for df < 1: a test
// with one cell says nothing, and NaN fails every comparison a test makes with it.
double chi2_sf(double x, int df);
// Pearson's statistic of observed counts against expected probabilities (same indexing).
double chi2_statistic(const std::vector<int64_t>& observed, const std::vector<double>& expected_probs, int64_t n);

struct Chi2Result {
  double statistic = 0.0;
  int df = 0;
  double p_value = 0.0;  // NaN when df < 1 (degenerate)
};
// Pearson's goodness of fit of counts (summing to n) against probabilities (summing to 1;
// callers merge small cells first). df = cells - 1.
Chi2Result chi2_goodness_of_fit(const std::vector<int64_t>& observed, const std::vector<double>& probs, int64_t n);

// Two-sample chi-square (homogeneity) over categorical counts: categories whose pooled
// count is below min_pooled are merged into one cell so every expected count is large
// enough. Returns the p-value (NaN when everything falls into one cell) and sets df.
double chi2_two_sample_pvalue(const std::map<int64_t, int64_t>& a, const std::map<int64_t, int64_t>& b,
                              int* df = nullptr, double min_pooled = 10.0);

}  // namespace tandem::test
