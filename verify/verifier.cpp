#include "verify/verifier.hpp"

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

}  // namespace

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

int32_t sample_residual(const Distribution& p, const Distribution& q, Rng& rng) {
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
  if (!(total > 0.0)) return sample(p, rng);
  for (auto& x : res.probs) x = static_cast<float>(x / total);
  return sample(res, rng);
}

VerifyResult verify_stochastic(std::span<const int32_t> draft, const DistFn& target_dist, const DistFn* draft_dist,
                               Rng& rng) {
  VerifyResult r;
  for (size_t i = 0; i < draft.size(); ++i) {
    const Distribution p = target_dist(static_cast<int32_t>(i));
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
  r.next_token = sample(target_dist(static_cast<int32_t>(draft.size())), rng);
  return r;
}

}  // namespace tandem
