#include "policies/step_budget.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace tandem {
namespace {

// Weight of the newest measurement: the corrections follow the last ~10 steps.
constexpr double kWeight = 0.1;

void follow(double& v, bool& seen, double x) {
  if (!std::isfinite(x) || x <= 0.0) return;
  v = seen ? (1 - kWeight) * v + kWeight * x : x;
  seen = true;
}

}  // namespace

std::vector<int32_t> StepBudget::draft_passes(std::span<const BudgetWish> wishes, std::span<const int32_t> k) {
  std::vector<int32_t> passes;
  for (size_t i = 0; i < wishes.size(); ++i) {
    if (wishes[i].draft_free || k[i] <= 0) continue;
    if (passes.size() < static_cast<size_t>(k[i])) passes.resize(static_cast<size_t>(k[i]), 0);
    // The first pass feeds what the draft has not read yet (the pending token, at least);
    // each further pass one token, the draft of the position before (the last draft is
    // not fed).
    passes[0] += std::max(1, wishes[i].catch_up);
    for (int32_t j = 1; j < k[i]; ++j) passes[static_cast<size_t>(j)] += 1;
  }
  return passes;
}

double StepBudget::target_ms(const CostModel& costs, int32_t tokens) const {
  return tokens > 0 ? target_corr_ * costs.target_ms(tokens) : 0.0;
}

double StepBudget::draft_ms(const CostModel& costs, std::span<const int32_t> pass_tokens) const {
  double ms = 0.0;
  for (int32_t t : pass_tokens)
    if (t > 0) ms += costs.draft_ms(t);
  return draft_corr_ * ms;
}

void StepBudget::observe_target(const CostModel& costs, int32_t tokens, double ms) {
  if (tokens <= 0 || !costs.absolute()) return;
  const double predicted = costs.target_ms(tokens);
  if (predicted > 0.0) follow(target_corr_, target_seen_, ms / predicted);
}

void StepBudget::observe_draft(const CostModel& costs, std::span<const int32_t> pass_tokens, double ms) {
  if (!costs.has_draft() || !costs.absolute()) return;
  double predicted = 0.0;
  for (int32_t t : pass_tokens)
    if (t > 0) predicted += costs.draft_ms(t);
  if (predicted > 0.0) follow(draft_corr_, draft_seen_, ms / predicted);
}

StepPlan StepBudget::plan(const CostModel& costs, std::span<const BudgetWish> wishes, int32_t other_tokens,
                          int32_t other_streams, int32_t catching_up) const {
  StepPlan p;
  const size_t n = wishes.size();
  p.k.assign(n, 0);
  for (const BudgetWish& w : wishes) p.wished += std::max(0, w.k_max);
  other_tokens = std::max(1, other_tokens);
  p.plain_ms = target_ms(costs, other_tokens);
  p.step_ms = p.plain_ms;
  const int32_t streams = static_cast<int32_t>(n) + other_streams;
  if (p.wished == 0 || streams <= 0 || !(p.plain_ms > 0.0)) return p;

  std::vector<double> alpha(n);
  for (size_t i = 0; i < n; ++i) alpha[i] = std::clamp(wishes[i].alpha, 0.0, 1.0);
  const double plain_rate = streams / p.plain_ms;
  const double limit_ms = opts_.latency_slack < 0.0 ? 0.0 : (1.0 + opts_.latency_slack) * p.plain_ms;
  // Every stream's time per token within the limit: a sequence that drafts nothing (E = 1)
  // and the other streams bound the step itself.
  const double step_cap = opts_.max_step_ms > 0.0 ? std::max(opts_.max_step_ms, p.plain_ms) : 0.0;
  auto within_limit = [&](const std::vector<int32_t>& k, double ms) {
    if (step_cap > 0.0 && ms > step_cap) return false;
    if (limit_ms <= 0.0) return true;
    double least = other_streams > std::clamp(catching_up, 0, other_streams) ? 1.0 : 1e300;
    for (size_t i = 0; i < n; ++i) least = std::min(least, CostModel::expected_tokens(alpha[i], k[i]));
    return ms / least <= limit_ms;
  };

  double best_rate = plain_rate * (1.0 + opts_.min_gain);
  std::vector<int32_t> best;
  double best_ms = p.plain_ms;
  // A growing allocation and its step: drafts, expected tokens, tokens of each draft pass.
  struct State {
    std::vector<int32_t> k, passes;
    int32_t drafts = 0;
    double tokens = 0.0, ms = 0.0;
  };
  auto pass_ms = [&](int32_t tokens) { return tokens > 0 ? draft_corr_ * costs.draft_ms(tokens) : 0.0; };
  // What one more draft of sequence i adds: its yield (α^(k+1)) and milliseconds.
  auto added_ms = [&](const State& st, size_t i) {
    const int32_t j = st.k[i];
    double ms = target_ms(costs, other_tokens + st.drafts + 1) - target_ms(costs, other_tokens + st.drafts);
    if (!wishes[i].draft_free) {
      const int32_t fed = j == 0 ? std::max(1, wishes[i].catch_up) : 1;
      const int32_t before = static_cast<size_t>(j) < st.passes.size() ? st.passes[static_cast<size_t>(j)] : 0;
      ms += pass_ms(before + fed) - pass_ms(before);
    }
    return ms;
  };
  auto add = [&](State& st, size_t i) {
    const int32_t j = st.k[i];
    st.ms += added_ms(st, i);
    st.tokens += std::pow(alpha[i], j + 1);
    ++st.k[i];
    ++st.drafts;
    if (!wishes[i].draft_free) {
      if (st.passes.size() <= static_cast<size_t>(j)) st.passes.resize(static_cast<size_t>(j) + 1, 0);
      st.passes[static_cast<size_t>(j)] += j == 0 ? std::max(1, wishes[i].catch_up) : 1;
    }
  };
  // The step of allocation k, one draft at a time from none.
  auto build = [&](const std::vector<int32_t>& k) {
    State st;
    st.k.assign(n, 0);
    st.tokens = streams;
    st.ms = p.plain_ms;
    for (size_t i = 0; i < n; ++i)
      while (st.k[i] < k[i]) add(st, i);
    return st;
  };
  // Grows an allocation from `floor` one draft at a time and keeps the best allocation on the
  // way. Which draft comes next: the one that adds the most expected tokens per millisecond
  // (by_cost), or the likeliest to be accepted. Neither order is best for every batch (a first
  // draft pays for a pass of its own, so it may look dear until others share the pass), so
  // the plan takes the best of a few walks.
  auto walk = [&](const std::vector<int32_t>& floor, bool by_cost) {
    State st = build(floor);
    for (;;) {
      if (within_limit(st.k, st.ms) && st.tokens / st.ms > best_rate) {
        best_rate = st.tokens / st.ms;
        best = st.k;
        best_ms = st.ms;
      }
      size_t pick = n;
      double pick_score = -1.0, pick_yield = 0.0;
      for (size_t i = 0; i < n; ++i) {
        if (st.k[i] >= wishes[i].k_max) continue;
        const double yield = std::pow(alpha[i], st.k[i] + 1);
        if (yield <= 0.0) continue;
        const double score = by_cost ? yield / std::max(added_ms(st, i), 1e-9) : yield;
        if (score > pick_score || (score == pick_score && yield > pick_yield)) {
          pick = i;
          pick_score = score;
          pick_yield = yield;
        }
      }
      if (pick == n) return;
      add(st, pick);
    }
  };
  // From nothing, and from one draft each (under the latency rule a sequence left at none
  // caps the step, so the allocations where every sequence drafts are reached from there).
  const std::vector<int32_t> none(n, 0);
  std::vector<int32_t> one(n, 0);
  for (size_t i = 0; i < n; ++i) one[i] = std::min(1, wishes[i].k_max);
  for (bool by_cost : {true, false}) {
    walk(none, by_cost);
    if (one != none) walk(one, by_cost);
  }

  // Then single steps from the best allocation (one draft more or less for a sequence) while
  // one is better: what no walk's order passed through.
  auto evaluate = [&](const std::vector<int32_t>& k, double* ms) {
    const State st = build(k);
    *ms = st.ms;
    return st.tokens / st.ms;
  };
  for (std::vector<int32_t> k = best.empty() ? none : best;;) {
    bool moved = false;
    for (size_t i = 0; i < n && !moved; ++i) {
      for (int32_t d : {1, -1}) {
        const int32_t v = k[i] + d;
        if (v < 0 || v > wishes[i].k_max) continue;
        k[i] = v;
        double ms = 0.0;
        const double rate = evaluate(k, &ms);
        if (within_limit(k, ms) && rate > best_rate * (1.0 + 1e-9)) {
          best_rate = rate;
          best = k;
          best_ms = ms;
          moved = true;
          break;
        }
        k[i] -= d;
      }
    }
    if (!moved) break;
  }

  if (best.empty()) return p;
  p.k = best;
  p.granted = std::accumulate(best.begin(), best.end(), 0);
  p.step_ms = best_ms;
  p.gain = best_rate / plain_rate;
  return p;
}

}  // namespace tandem
