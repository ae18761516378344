// A request's sampling as the device's sampling kernels take it (kernels/device_decode.hpp):
// the transforms of one row, and the penalty entries of its history. The draft's device
// sampling (draft/draft_probs.hpp) and the device verifier (verify/device_verifier.hpp) both
// build their rows here, so that their q and p are the distributions make_distribution
// (sampler.hpp) gives on the host.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "kernels/device_decode.hpp"
#include "tandem/sampling.hpp"

namespace tandem {

// The penalty entries (token, occurrences | in-window bit, bias: kernels/device_decode.hpp)
// make_distribution derives from a history and the logit bias (engine/sampling/sampler.cpp),
// appended to `out` as kPenaltyEntryWords I32 words each: one per distinct token with
// vocab > id. Nothing when the params neither penalise nor bias.
void append_penalty_entries(const SamplingParams& p, std::span<const int32_t> history, int32_t vocab,
                            std::vector<int32_t>& out);
// A request's transforms as a row of make_probs.
kernels::RowSampling row_sampling(const SamplingParams& p);
// The same with its history's penalty entries appended to `penalties` (the row's range of them).
kernels::RowSampling row_sampling(const SamplingParams& p, std::span<const int32_t> history, int32_t vocab,
                                  std::vector<int32_t>& penalties);

}  // namespace tandem
