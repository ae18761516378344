#include "verify/verifier.hpp"

#include <algorithm>
#include <atomic>
#include <stdexcept>
#include <unordered_map>

namespace tandem {
namespace {

// p(x) for sparse distributions: a linear scan is cheapest for the small supports that
// top-k/top-p/min-p produce; a hash map beyond that.
class ProbLookup {
 public:
  explicit ProbLookup(const Distribution& d) : d_(d) {
    if (d.size() > 64) {
      map_.reserve(d.size());
      for (size_t i = 0; i < d.size(); ++i) map_.emplace(d.ids[i], d.probs[i]);
    }
  }
  float operator()(int32_t id) const {
    if (map_.empty()) return d_.prob(id);
    auto it = map_.find(id);
    return it == map_.end() ? 0.0f : it->second;
  }

 private:
  const Distribution& d_;
  std::unordered_map<int32_t, float> map_;
};

std::atomic<int64_t> g_bias_position{-1};
std::atomic<float> g_bias_mass{0.0f};

// p_i as the verifiers see it: the caller's, unless a test injected a bias at this position.
Distribution target_at(const DistFn& target_dist, int32_t i, int64_t position) {
  return with_injected_bias(target_dist(i), position + i);
}

}  // namespace

Distribution with_injected_bias(Distribution p, int64_t position) {
  const int64_t at = g_bias_position.load(std::memory_order_relaxed);
  if (at < 0 || at != position || p.size() < 2) return p;
  const float m = std::min(g_bias_mass.load(std::memory_order_relaxed), p.probs[0]);
  p.probs[0] -= m;
  p.probs[1] += m;
  return p;
}

float prob_of(const Distribution& p, int32_t x) { return ProbLookup(p)(x); }

InjectedBias injected_verifier_bias() {
  return {g_bias_position.load(std::memory_order_relaxed), g_bias_mass.load(std::memory_order_relaxed)};
}

void inject_verifier_bias(InjectedBias bias) {
  g_bias_mass.store(bias.mass);
  g_bias_position.store(bias.position);
}

VerifyResult verify_greedy(std::span<const int32_t> draft, const DistFn& target_dist) {
  VerifyResult r;
  for (size_t i = 0; i <= draft.size(); ++i) {
    const Distribution p = target_dist(static_cast<int32_t>(i));
    if (p.ids.empty()) throw std::logic_error("verify_greedy: empty target distribution");
    const int32_t best = p.ids[0];  // sorted by probability: the argmax comes first
    if (i == draft.size()) {
      r.all_accepted = true;
      r.next_token = best;
      break;
    }
    if (draft[i] != best) {
      r.next_token = best;
      break;
    }
    ++r.n_accepted;
  }
  return r;
}

Distribution residual(const Distribution& p, const Distribution& q) {
  const ProbLookup qp(q);
  Distribution res;
  double total = 0.0;
  for (size_t i = 0; i < p.size(); ++i) {
    const double w = static_cast<double>(p.probs[i]) - qp(p.ids[i]);
    if (w > 0.0) {
      res.ids.push_back(p.ids[i]);
      res.probs.push_back(static_cast<float>(w));
      total += w;
    }
  }
  if (!(total > 0.0)) return p;
  for (auto& x : res.probs) x = static_cast<float>(x / total);
  return res;
}

int32_t sample_residual(const Distribution& p, const Distribution& q, Rng& rng) { return sample(residual(p, q), rng); }

VerifyResult verify_stochastic(std::span<const int32_t> draft, const DistFn& target_dist, const DistFn* draft_dist,
                               Rng& rng, int64_t position) {
  VerifyResult r;
  for (size_t i = 0; i < draft.size(); ++i) {
    const Distribution p = target_at(target_dist, static_cast<int32_t>(i), position);
    const int32_t x = draft[i];
    const float px = ProbLookup(p)(x);
    Distribution q;
    float qx = 1.0f;
    if (draft_dist) {
      q = (*draft_dist)(static_cast<int32_t>(i));
      qx = ProbLookup(q)(x);
      if (!(qx > 0.0f)) throw std::logic_error("verify_stochastic: draft token has zero draft probability");
    } else {
      q.ids = {x};
      q.probs = {1.0f};
    }
    // Accept with probability min(1, p/q): u < p/q with u uniform on [0,1).
    const double u = rng.uniform();
    if (u * qx < px) {
      ++r.n_accepted;
      continue;
    }
    r.next_token = sample_residual(p, q, rng);
    return r;
  }
  r.all_accepted = true;
  r.next_token = sample(target_at(target_dist, static_cast<int32_t>(draft.size()), position), rng);
  return r;
}

VerifyResult verify_coupled(std::span<const int32_t> draft, const DistFn& target_dist, const PositionNoise& noise,
                            int64_t position) {
  VerifyResult r;
  for (size_t i = 0; i <= draft.size(); ++i) {
    const auto ii = static_cast<int32_t>(i);
    const int32_t y = gumbel_argmax(target_at(target_dist, ii, position), noise, position + ii);
    if (i == draft.size()) {
      r.all_accepted = true;
      r.next_token = y;
      break;
    }
    if (draft[i] != y) {
      r.next_token = y;
      break;
    }
    ++r.n_accepted;
  }
  return r;
}

}  // namespace tandem
