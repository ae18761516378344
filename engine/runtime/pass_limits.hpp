// How large the models' passes get, so that their scratch is sized once (Transformer::reserve)
// when the engine loads and when a scheduler starts, not in the per-step path.
#pragma once
#include <cstdint>

#include "engine/runtime/engine_access.hpp"

namespace tandem {

// Draft tokens per sequence per step the scratch is sized for. Requests may ask for more
// (draft_max up to 32 in the server); a batch of such steps grows the scratch once, which
// Transformer::scratch_growths() and the scheduler's stats count.
inline constexpr int32_t kReservedDraftTokens = 8;

// Reserves both models' scratch for passes of up to `seqs` sequences and `batch_tokens`
// prompt tokens (Engine::generate: 1 and a prefill chunk; a Scheduler: its limits).
void reserve_pass_scratch(EngineParts& parts, int32_t seqs, int32_t batch_tokens);

}  // namespace tandem
