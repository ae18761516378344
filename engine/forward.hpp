// The transformer forward pass over a ragged batch: any number of sequences, each with a
// run of new tokens at consecutive positions (a prompt chunk, one decode token, or the
// k+1 tokens of a speculative verification). Keys and values of the new tokens are written
// into each sequence's paged cache; logits come back for the rows that ask for them.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "engine/kv_cache.hpp"
#include "engine/model.hpp"

namespace tandem {

class Batch {
 public:
  // Appends `tokens` for `seq`, at positions seq.length(), seq.length()+1, ...
  // want_logits: which of the tokens need logits (empty → only the last one; use
  // all_logits() for every one).
  void add(SequenceKV& seq, std::span<const int32_t> tokens, std::vector<bool> want_logits = {});
  void add_all_logits(SequenceKV& seq, std::span<const int32_t> tokens);
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
};

class Transformer {
 public:
  Transformer(const Model& model, KVCache& cache);
  ~Transformer();

  // Runs the batch. Reserves cache blocks for every sequence first; if the cache is too
  // full it throws KVCacheFull and nothing is modified. On success each sequence's length
  // advances by its token count, and `logits` holds n_outputs() rows of n_vocab floats
  // in the order the outputs were requested.
  void forward(const Batch& batch, std::vector<float>& logits);

  const Model& model() const { return model_; }
  KVCache& cache() { return cache_; }

 private:
  struct Scratch;
  void ensure_scratch(int32_t n_tokens, int32_t n_seqs, int32_t max_blocks, int32_t n_out);

  const Model& model_;
  KVCache& cache_;
  kernels::Backend& be_;
  std::unique_ptr<Scratch> s_;
};

class KVCacheFull : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace tandem
