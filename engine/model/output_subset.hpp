// A model's output head restricted to some tokens: the rows of the output matrix for those
// ids only, copied once into the backend. A draft model computing its logits through one
// reads N rows instead of the whole vocabulary (FR-Spec, arXiv 2502.14856): for Qwen2.5's
// 151,936 tokens the head is a third of the 0.5B draft's weights. The target still verifies
// every drafted token, so which tokens are kept only changes how often drafts are accepted.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "engine/model/model.hpp"

namespace tandem {

struct OutputSubset {
  std::vector<int32_t> ids;  // the token of each logit column: ascending, unique, < n_vocab
  kernels::Tensor head;      // [n_embd, ids.size()]: those rows of the model's output matrix
  std::unique_ptr<kernels::Buffer> buf;
  kernels::Tensor ids_on_backend;  // I32 [ids.size()]: ids in the backend (device sampling scatters by them)
  std::unique_ptr<kernels::Buffer> ids_buf;
  size_t bytes() const { return head.bytes(); }
};

// Throws std::invalid_argument for an empty list or an id outside the model's vocabulary;
// duplicates are dropped and the ids sorted.
std::shared_ptr<const OutputSubset> make_output_subset(const Model& model, std::vector<int32_t> ids);

}  // namespace tandem
