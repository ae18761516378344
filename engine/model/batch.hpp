// A ragged batch for one forward pass: any number of sequences, each with a run of new
// tokens at consecutive positions (a prompt chunk, one decode token, or the k+1 tokens of a
// speculative verification), and which of those tokens need logits. A run may also be (part
// of) a token tree (add_tree): its nodes are fed at consecutive cache indices, each at the
// position of its depth and reading only its ancestors (kernels/tree_keys.hpp).
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "engine/kv/sequence_kv.hpp"

namespace tandem {

class Batch {
 public:
  // Appends `tokens` for `seq`, at positions seq.length(), seq.length()+1, ...
  // want_logits: which of the tokens need logits (empty → only the last one; use
  // all_logits() for every one).
  void add(SequenceKV& seq, std::span<const int32_t> tokens, std::vector<bool> want_logits = {});
  void add_all_logits(SequenceKV& seq, std::span<const int32_t> tokens);
  // Tokens of a token tree for `seq`, fed at cache indices seq.length() + i, logits for every
  // one. Token i sits at positions[i]; with masks[i] != 0 it is a tree node reading the keys
  // below tree_base and the tree keys whose bits masks[i] sets (bit b: index tree_base + b;
  // its own bit and its ancestors', none above its own, tree_base + their count =
  // positions[i] + 1); with masks[i] == 0 an ordinary token (positions[i] = its index).
  // Throws std::invalid_argument for anything else.
  void add_tree(SequenceKV& seq, std::span<const int32_t> tokens, std::span<const int32_t> positions,
                int32_t tree_base, std::span<const uint64_t> masks);
  bool has_tree() const { return !tree_.empty(); }
  void clear();

  int32_t n_tokens() const { return static_cast<int32_t>(tokens_.size()); }
  int32_t n_outputs() const { return static_cast<int32_t>(output_rows_.size()); }
  bool empty() const { return tokens_.empty(); }

 private:
  friend class Transformer;
  struct Entry {
    SequenceKV* seq;
    int32_t first;   // index of its first token in tokens_
    int32_t count;
    int32_t start_pos;
  };
  std::vector<Entry> entries_;
  std::vector<int32_t> tokens_, positions_, seq_index_, output_rows_;
  // kTreeFields per token once a tree is added (PagedAttnMeta::tree), else empty.
  std::vector<int32_t> tree_;
};

}  // namespace tandem
