// Reading a run of tokens (a prompt) into a sequence's cache, chunk by chunk.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "engine/model/transformer.hpp"

namespace tandem {

// Tokens per forward pass when a prompt is read in chunks: bounds activation memory, and is
// wide enough for efficient matmuls. Every prompt reader (the engine, the scheduler's
// default, the draft's catch-up) uses this one value.
inline constexpr int32_t kPrefillChunk = 256;

enum class PrefillLogits {
  None,  // only the cache is written
  Last,  // logits of the last token
  All,   // logits of every token, in order
};

// Runs `tokens` through `tf` for `seq` at seq.length(), seq.length()+1, ..., in chunks of
// kPrefillChunk. `logits` receives what `want` asks for (rows of n_vocab floats).
void prefill(Transformer& tf, SequenceKV& seq, std::span<const int32_t> tokens, PrefillLogits want,
             std::vector<float>& logits);

}  // namespace tandem
