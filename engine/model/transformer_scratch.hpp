// The Transformer's activation and metadata buffers on the backend (transformer.cpp and
// transformer_graphs.cpp share them). Re-allocated only when a larger pass arrives; each
// re-allocation bumps Transformer::scratch_generation_, since graphs hold their addresses.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "engine/model/transformer.hpp"

namespace tandem {

struct Transformer::Scratch {
  int32_t cap_tokens = 0, cap_seqs = 0, cap_blocks = 0, cap_out = 0;
  std::vector<std::unique_ptr<kernels::Buffer>> bufs;
  kernels::Tensor x, h, q, k, v, attn, o, gate, up, out_rows, logits;
  kernels::Tensor tokens, positions, seq_index, slots, block_table, out_idx;
  kernels::Tensor tree;   // [cap_tokens, kTreeFields] I32: a tree pass's (PagedAttnMeta::tree)
  kernels::Tensor moves;  // [2 * kMaxTreeNodes] I32: move_kv's slots (from, then to)
  // A decode graph's inputs, uploaded at once (decode_buckets.hpp: 5 * cap_tokens +
  // cap_seqs * cap_blocks I32).
  kernels::Tensor graph_in;
};

}  // namespace tandem
