// The transformer forward pass over a ragged batch (batch.hpp). Keys and values of the new
// tokens are written into each sequence's paged cache; logits come back for the rows that
// ask for them. The layers themselves are plain calls of the backend's ops.
//
// On a backend that can capture graphs (kernels/graph_capture.hpp: CUDA), a decode pass
// (one token per sequence: the draft's passes, plain decoding) or a chain verification pass
// (every token wants logits) of up to 48 tokens is replayed from a graph captured once per
// shape bucket (transformer_graphs.cpp, decode_buckets.hpp); every other pass (prompt
// chunks, trees) runs its ops one by one. Both give the same logits bit for bit.
#pragma once
#include <cstddef>
#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "engine/kv/kv_cache.hpp"
#include "engine/model/batch.hpp"
#include "engine/model/graph_cache.hpp"
#include "engine/model/model.hpp"
#include "engine/model/output_subset.hpp"

namespace tandem {

class Transformer {
 public:
  Transformer(const Model& model, KVCache& cache);
  ~Transformer();

  // Runs the batch. Reserves cache blocks for every sequence first; if the cache is too
  // full it throws KVCacheFull and nothing is modified. On success each sequence's length
  // advances by its token count, and `logits` holds n_outputs() rows of n_logits() floats
  // in the order the outputs were requested. download = false leaves them on the backend
  // only (device_logits), for a caller that decides there (kernels/device_decode.hpp).
  void forward(const Batch& batch, std::vector<float>& logits, bool download = true);
  // Keeps a token tree's accepted path: the KV rows at cache indices from[0] < from[1] < ...
  // of `seq` (every layer) move to indices to, to + 1, ... (each from[i] >= to + i), so that
  // the path sits where a chain of those tokens would have been written. Its rows are the
  // chain's bit for bit (tree attention reads a node's keys as the chain's), so nothing is
  // recomputed. The caller truncates the sequence after them.
  void move_kv(SequenceKV& seq, std::span<const int32_t> from, int32_t to);
  // The last pass's logits on the backend, [n_outputs, n_vocab]; valid until the next pass.
  const kernels::Tensor& device_logits() const { return last_logits_; }

  // Logits for these tokens only (output_subset.hpp; a draft's reduced vocabulary): column j
  // of each row is token subset->ids[j]. Null: the whole vocabulary.
  void set_output_subset(std::shared_ptr<const OutputSubset> subset) {
    subset_ = std::move(subset);
    drop_graphs();  // they hold the old head
  }
  const OutputSubset* output_subset() const { return subset_.get(); }
  int32_t n_logits() const {
    return subset_ ? static_cast<int32_t>(subset_->ids.size()) : model_.config().n_vocab;
  }

  const Model& model() const { return model_; }
  kernels::Backend& backend() const { return be_; }
  KVCache& cache() { return cache_; }

  // The most one pass will hold, so that the scratch (this class's and the backend's) is
  // sized once, when the engine loads and when a scheduler starts, and not in the per-step
  // path: passes within the limits never allocate. A pass beyond them still runs (the
  // scratch grows, and graphs holding the old addresses are dropped); scratch_growths()
  // counts those.
  struct PassLimits {
    int32_t tokens = 0;   // tokens of all sequences
    int32_t seqs = 0;     // sequences
    int32_t blocks = 0;   // cache blocks of the longest sequence
    int32_t outputs = 0;  // rows of logits
  };
  void reserve(const PassLimits& limits);
  uint64_t scratch_growths() const { return growths_.load(std::memory_order_relaxed); }

  // Decode passes from graphs. On by default where the backend can capture, unless the
  // environment says TANDEM_CUDA_GRAPHS=0 (or off/false/no); at most max_graphs are kept.
  // Padding lanes write into a free cache block taken for the pass only.
  static constexpr size_t kDefaultMaxGraphs = 32;
  void set_graphs(bool on, size_t max_graphs = kDefaultMaxGraphs);
  bool graphs_on() const { return graphs_on_; }
  const GraphStats& graph_stats() const { return graphs_.stats(); }

 private:
  struct Scratch;
  // The inputs of a pass, already on the backend (n tokens, n_out rows of logits).
  struct PassInputs {
    int32_t n = 0, n_out = 0;
    kernels::Tensor tokens, positions, seq_index, slots, block_table, out_idx;
    kernels::Tensor tree = {};  // buf null: no tree in the pass
  };
  // Grows the scratch to hold such a pass (false: it already did).
  bool ensure_scratch(int32_t n_tokens, int32_t n_seqs, int32_t max_blocks, int32_t n_out);
  // The pass's ops; returns its logits [n_out, n_logits()] (nothing when n_out is 0).
  kernels::Tensor encode(const PassInputs& in);
  kernels::Tensor direct_pass(const Batch& batch, int32_t max_blocks);
  // A decode or verification batch through a graph (transformer_graphs.cpp); false when it
  // cannot be.
  bool graph_pass(const Batch& batch, int32_t max_blocks, kernels::Tensor* logits);
  PassLimits with_graph_buckets(PassLimits l) const;
  void drop_graphs();

  const Model& model_;
  KVCache& cache_;
  kernels::Backend& be_;
  std::unique_ptr<Scratch> s_;
  uint64_t scratch_generation_ = 0;  // bumped when the scratch buffers are reallocated
  std::atomic<uint64_t> growths_{0};  // reallocations a pass caused (beyond what reserve() took); read by stats
  kernels::Tensor last_logits_;
  std::shared_ptr<const OutputSubset> subset_;
  bool graphs_on_ = false;
  GraphCache graphs_{kDefaultMaxGraphs};
};

}  // namespace tandem
