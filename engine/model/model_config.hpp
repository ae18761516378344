// Hyperparameters of a transformer, read from GGUF metadata, plus the per-architecture
// conventions (RoPE style, biases, Gemma's scalings) that the forward pass needs. All the
// architecture-specific knowledge of the loader lives here, not in the forward code.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "engine/kv/kv_cache.hpp"
#include "kernels/backend.hpp"

namespace tandem {
namespace gguf {
class File;
}

enum class Arch { Llama, Qwen2, Gemma3 };

struct ModelConfig {
  Arch arch = Arch::Llama;
  std::string arch_name;     // as in general.architecture
  std::string name;          // general.name (may be empty)
  int32_t n_vocab = 0;       // rows of the embedding matrix
  int32_t n_embd = 0;
  int32_t n_layer = 0;
  int32_t n_head = 0;
  int32_t n_head_kv = 0;
  int32_t head_dim = 0;      // key/value length per head
  int32_t n_ff = 0;
  int32_t n_ctx_train = 0;
  int32_t rope_dims = 0;
  float rope_theta = 10000.0f;
  float rope_theta_local = 10000.0f;  // Gemma3 sliding-window layers
  float rms_eps = 1e-5f;
  kernels::RopeStyle rope_style = kernels::RopeStyle::Normal;
  kernels::Activation activation = kernels::Activation::SiLU;
  bool tied_embeddings = false;
  bool qkv_bias = false;
  // Gemma3
  bool qk_norm = false;        // RMSNorm of q and k per head before RoPE
  bool post_norms = false;     // norms on the attention / FFN outputs before the residual add
  float embd_scale = 1.0f;     // embeddings are multiplied by this (sqrt(n_embd) for Gemma)
  float attn_scale = 0.0f;     // 0 → 1/sqrt(head_dim)
  int32_t sliding_window = 0;  // 0 → all layers attend globally
  std::vector<bool> layer_is_local;  // per layer: uses the sliding window and rope_theta_local

  float attention_scale() const;
  int64_t q_width() const { return int64_t{n_head} * head_dim; }
  int64_t kv_width() const { return int64_t{n_head_kv} * head_dim; }
  // The shape of this model's KV cache: a config can be passed where a cache wants one.
  operator KVShape() const { return {n_layer, kv_width()}; }
};

// Throws std::runtime_error naming the file and the missing/invalid key, or the
// unsupported architecture (with the list of supported ones).
ModelConfig read_model_config(const gguf::File& f);
const char* arch_list();

}  // namespace tandem
