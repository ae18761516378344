#include "engine/sampling/logprobs.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <vector>

namespace tandem {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// The sampler's order: larger first, ties by ascending id.
bool better(float a, int32_t ia, float b, int32_t ib) { return a > b || (a == b && ia < ib); }

// The n most likely entries of v (by `better`), skipping ids for which skip(id) holds; a
// bounded insertion list (n <= 20), so one pass over the vocabulary and no allocation of its
// size.
template <class Skip>
std::vector<TokenLogprob> top_n(std::span<const float> v, size_t n, Skip skip) {
  std::vector<TokenLogprob> best;
  best.reserve(n + 1);
  if (n == 0) return best;
  for (size_t i = 0; i < v.size(); ++i) {
    const auto id = static_cast<int32_t>(i);
    if (best.size() == n && !better(v[i], id, best.back().logprob, best.back().token)) continue;
    if (skip(id)) continue;
    auto at = std::find_if(best.begin(), best.end(),
                           [&](const TokenLogprob& b) { return better(v[i], id, b.logprob, b.token); });
    best.insert(at, {id, v[i]});
    if (best.size() > n) best.pop_back();
  }
  return best;
}

// log-softmax of the (already penalised, NaN-free) logits w, at temperature 1.
TokenLogprobs from_logits(const std::vector<float>& w, int32_t chosen, size_t n_top) {
  constexpr float kPosInf = std::numeric_limits<float>::infinity();
  float m = kNegInf;
  for (float x : w) m = std::max(m, x);
  if (m == kNegInf) throw std::runtime_error("logits are all NaN/-inf");
  // +inf logits: the limit of softmax is uniform over them, as make_distribution has it.
  const bool inf = m == kPosInf;
  const double lse = inf ? std::log(static_cast<double>(std::count(w.begin(), w.end(), kPosInf))) : log_sum_exp(w);
  auto lp = [&](float x) -> float {
    if (inf) return x == m ? static_cast<float>(-lse) : kNegInf;
    return x == kNegInf ? kNegInf : static_cast<float>(static_cast<double>(x) - lse);
  };
  TokenLogprobs out;
  out.chosen = {chosen, lp(w[static_cast<size_t>(chosen)])};
  out.top = top_n(w, n_top, [](int32_t) { return false; });
  for (TokenLogprob& t : out.top) t.logprob = lp(t.logprob);
  return out;
}

float log_prob(float p) { return p > 0.0f ? static_cast<float>(std::log(static_cast<double>(p))) : kNegInf; }

}  // namespace

TokenLogprobs token_logprobs(std::span<const float> logits, const SamplingParams& p, std::span<const int32_t> history,
                             const Distribution* final_dist, int32_t chosen, int32_t n_top) {
  if (n_top < 0 || n_top > kMaxTopLogprobs)
    throw std::invalid_argument("logprobs: the number of alternatives must be in 0.." +
                                std::to_string(kMaxTopLogprobs));
  if (chosen < 0 || static_cast<size_t>(chosen) >= logits.size())
    throw std::invalid_argument("logprobs: token outside the vocabulary");
  const size_t n = std::min(static_cast<size_t>(n_top), logits.size());
  if (!final_dist) {
    std::vector<float> w;
    penalised_logits(logits, p, history, w);
    return from_logits(w, chosen, n);
  }
  const Distribution& d = *final_dist;
  TokenLogprobs out;
  out.chosen = {chosen, log_prob(d.prob(chosen))};
  // The distribution is sorted in the sampler's order already.
  for (size_t j = 0; j < d.size() && out.top.size() < n; ++j) out.top.push_back({d.ids[j], log_prob(d.probs[j])});
  if (out.top.size() < n) {
    // Fewer survivors than asked for: the list goes on in the order of the penalised logits
    // (the order the cuts kept a prefix of), at -inf.
    std::vector<float> w;
    penalised_logits(logits, p, history, w);
    const size_t have = out.top.size();
    for (TokenLogprob t : top_n(w, n - have, [&](int32_t id) {
           return std::any_of(out.top.begin(), out.top.begin() + static_cast<std::ptrdiff_t>(have),
                              [id](const TokenLogprob& x) { return x.token == id; });
         }))
      out.top.push_back({t.token, kNegInf});
  }
  return out;
}

}  // namespace tandem
