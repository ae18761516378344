// The transformer forward pass over a ragged batch (batch.hpp). Keys and values of the new
// tokens are written into each sequence's paged cache; logits come back for the rows that
// ask for them. The layers themselves are plain calls of the backend's ops.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "engine/kv/kv_cache.hpp"
#include "engine/model/batch.hpp"
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
  // The last pass's logits on the backend, [n_outputs, n_vocab]; valid until the next pass.
  const kernels::Tensor& device_logits() const { return last_logits_; }

  // Logits for these tokens only (output_subset.hpp; a draft's reduced vocabulary): column j
  // of each row is token subset->ids[j]. Null: the whole vocabulary.
  void set_output_subset(std::shared_ptr<const OutputSubset> subset) { subset_ = std::move(subset); }
  const OutputSubset* output_subset() const { return subset_.get(); }
  int32_t n_logits() const {
    return subset_ ? static_cast<int32_t>(subset_->ids.size()) : model_.config().n_vocab;
  }

  const Model& model() const { return model_; }
  KVCache& cache() { return cache_; }

 private:
  struct Scratch;
  void ensure_scratch(int32_t n_tokens, int32_t n_seqs, int32_t max_blocks, int32_t n_out);

  const Model& model_;
  KVCache& cache_;
  kernels::Backend& be_;
  std::unique_ptr<Scratch> s_;
  kernels::Tensor last_logits_;
  std::shared_ptr<const OutputSubset> subset_;
};

}  // namespace tandem
