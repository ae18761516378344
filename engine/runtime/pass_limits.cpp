#include "engine/runtime/pass_limits.hpp"

#include <algorithm>

#include "engine/model/transformer.hpp"

namespace tandem {

namespace {
// Blocks of a sequence's table at most: its context, plus the positions a draft runs past
// the committed text (the slack the KV pool is sized with, engine.cpp), plus one.
int32_t table_blocks(int32_t context, int32_t block_size) {
  return (context + 16 + block_size - 1) / block_size + 1;
}
}  // namespace

void reserve_pass_scratch(EngineParts& parts, int32_t seqs, int32_t batch_tokens) {
  const int32_t verify_rows = seqs * (kReservedDraftTokens + 1);
  Transformer::PassLimits t;
  t.seqs = seqs;
  // Decode steps go first in a batch and prompt chunks fill the token budget after them.
  t.tokens = std::max(batch_tokens, verify_rows);
  t.blocks = table_blocks(parts.context, parts.target.cache().block_size());
  // Every verified position has a row of logits; alone, a prompt may want all of its rows
  // (Engine::logits, prompt logprobs).
  t.outputs = seqs == 1 ? std::max(batch_tokens, verify_rows) : verify_rows;
  parts.target.reserve(t);
  if (!parts.draft) return;
  Transformer::PassLimits d;
  d.seqs = seqs;
  d.tokens = std::max(batch_tokens, seqs);  // prompt chunks, or one token per sequence
  d.blocks = table_blocks(parts.context, parts.draft->cache().block_size());
  d.outputs = seqs;
  parts.draft->reserve(d);
}

}  // namespace tandem
