#include "engine/sampling/device_rows.hpp"

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
  r.pen_begin = static_cast<int32_t>(penalties.size() / 2);
  append_penalty_entries(p, history, vocab, penalties);
  r.pen_end = static_cast<int32_t>(penalties.size() / 2);
  return r;
}

void append_penalty_entries(const SamplingParams& p, std::span<const int32_t> history, int32_t vocab,
                            std::vector<int32_t>& out) {
  const bool rep = p.repetition_penalty != 1.0f;
  const bool pf = p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f;
  if ((!rep && !pf) || history.empty()) return;
  std::unordered_map<int32_t, uint32_t> c;
  if (pf)
    for (int32_t t : history) ++c[t];
  if (rep) {
    std::span<const int32_t> window = history;
    if (p.repetition_window >= 0 && static_cast<size_t>(p.repetition_window) < history.size())
      window = history.last(static_cast<size_t>(p.repetition_window));
    for (int32_t t : window) c[t] |= kernels::kPenaltyInWindow;
  }
  for (const auto& [t, n] : c) {
    if (t < 0) throw std::invalid_argument("penalties: negative token id in history");
    if (t >= vocab) continue;
    out.push_back(t);
    out.push_back(static_cast<int32_t>(n));
  }
}

}  // namespace tandem
