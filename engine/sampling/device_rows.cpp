#include "engine/sampling/device_rows.hpp"

#include <bit>
#include <stdexcept>
#include <unordered_map>

namespace tandem {

kernels::RowSampling row_sampling(const SamplingParams& p) {
  kernels::RowSampling r;
  r.temperature = p.temperature;
  r.top_k = p.top_k;
  r.top_p = p.top_p;
  r.min_p = p.min_p;
  r.repetition_penalty = p.repetition_penalty;
  r.presence_penalty = p.presence_penalty;
  r.frequency_penalty = p.frequency_penalty;
  return r;
}

kernels::RowSampling row_sampling(const SamplingParams& p, std::span<const int32_t> history, int32_t vocab,
                                  std::vector<int32_t>& penalties) {
  kernels::RowSampling r = row_sampling(p);
  r.pen_begin = static_cast<int32_t>(penalties.size() / kernels::kPenaltyEntryWords);
  append_penalty_entries(p, history, vocab, penalties);
  r.pen_end = static_cast<int32_t>(penalties.size() / kernels::kPenaltyEntryWords);
  return r;
}

void append_penalty_entries(const SamplingParams& p, std::span<const int32_t> history, int32_t vocab,
                            std::vector<int32_t>& out) {
  const bool rep = p.repetition_penalty != 1.0f;
  const bool pf = p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f;
  const bool from_history = (rep || pf) && !history.empty();
  if (!from_history && p.logit_bias.empty()) return;
  std::unordered_map<int32_t, uint32_t> c;
  if (from_history) {
    if (pf)
      for (int32_t t : history) ++c[t];
    if (rep) {
      std::span<const int32_t> window = history;
      if (p.repetition_window >= 0 && static_cast<size_t>(p.repetition_window) < history.size())
        window = history.last(static_cast<size_t>(p.repetition_window));
      for (int32_t t : window) c[t] |= kernels::kPenaltyInWindow;
    }
  }
  auto entry = [&](int32_t t, uint32_t n, float bias) {
    out.push_back(t);
    out.push_back(static_cast<int32_t>(n));
    out.push_back(std::bit_cast<int32_t>(bias));
  };
  for (const auto& [t, n] : c) {
    if (t < 0) throw std::invalid_argument("penalties: negative token id in history");
    if (t >= vocab) continue;
    const auto b = p.logit_bias.find(t);
    entry(t, n, b == p.logit_bias.end() ? 0.0f : b->second);
  }
  // Biased tokens the history does not hold (those it does have their entry above).
  for (const auto& [t, b] : p.logit_bias)
    if (t >= 0 && t < vocab && b != 0.0f && !c.count(t)) entry(t, 0u, b);
}

}  // namespace tandem
