// A loaded model: its GGUF file (memory-mapped), hyperparameters, and views of every
// weight in the backend's memory. Weights are checked against the config when loading so
// a mismatched file fails here with a message naming the tensor, not later in a kernel.
#pragma once
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "engine/gguf/gguf.hpp"
#include "engine/model/model_config.hpp"
#include "engine/model/requantize.hpp"
#include "kernels/backend.hpp"

namespace tandem {

struct LayerWeights {
  kernels::Tensor attn_norm, wq, wk, wv, wo;
  kernels::Tensor bq, bk, bv;                      // qwen2 (buf == nullptr when absent)
  kernels::Tensor q_norm, k_norm;                  // gemma3
  kernels::Tensor post_attn_norm, post_ffn_norm;   // gemma3
  kernels::Tensor ffn_norm, w_gate, w_up, w_down;
};

class Model {
 public:
  // Throws std::runtime_error (or gguf::Error) with the file name and the problem.
  static std::unique_ptr<Model> load(const std::string& path, kernels::Backend& backend,
                                     const WeightOptions& weights = {});

  const ModelConfig& config() const { return config_; }
  const gguf::File& file() const { return *file_; }
  kernels::Backend& backend() const { return *backend_; }
  size_t weight_bytes() const { return weight_bytes_; }  // as on the backend (re-quantized ones at their new size)
  const WeightOptions& weights() const { return weights_; }  // how the matrices were loaded

  // The matrices (wq ... w_down, output) are in the backend's packed row layout where it
  // has one (Backend::pack_weight): they serve only as matmul weights.
  kernels::Tensor tok_embd;
  kernels::Tensor output_norm;
  kernels::Tensor output;  // == tok_embd when tied: the file's layout, for the embedding lookup
  std::vector<LayerWeights> layers;

  // The output head as matmul reads it: `output`, or when tied a packed copy of it, made
  // on first use (a draft whose logits go through a reduced vocabulary never needs it).
  const kernels::Tensor& head() const;

 private:
  Model() = default;
  // matmul: a matrix weight, re-quantized when WeightOptions::matmul_type says so; pack:
  // and packed for the backend's matmul (not the embedding table, which get_rows reads).
  kernels::Tensor bind(const std::string& name, std::vector<int64_t> dims, bool required, bool f32_only,
                       bool matmul = false, bool pack = false);

  std::unique_ptr<gguf::File> file_;
  kernels::Backend* backend_ = nullptr;
  ModelConfig config_;
  WeightOptions weights_;
  std::vector<std::unique_ptr<kernels::Buffer>> buffers_;
  size_t weight_bytes_ = 0;
  mutable std::once_flag head_once_;
  mutable kernels::Tensor head_;
  mutable std::unique_ptr<kernels::Buffer> head_buf_;
};

// A rows x cols matrix weight of type t (host memory, the file's layout) in a new backend
// buffer (`owner`): packed for its matmul when `pack` and the backend has a layout for t,
// else as is.
kernels::Tensor upload_matrix(kernels::Backend& be, DType t, const void* host, int64_t cols, int64_t rows,
                              std::unique_ptr<kernels::Buffer>& owner, bool pack = true);

}  // namespace tandem
