#include "engine/model/model_config.hpp"

#include <cmath>
#include <stdexcept>

#include "engine/gguf/gguf.hpp"

namespace tandem {
namespace {

struct Reader {
  const gguf::File& f;
  std::string arch;

  [[noreturn]] void fail(const std::string& what) const { throw std::runtime_error(f.path() + ": " + what); }
  std::string key(const char* suffix) const { return arch + "." + suffix; }
  int32_t req_int(const char* suffix, int64_t lo, int64_t hi) const {
    const std::string k = key(suffix);
    auto v = f.get_int(k);
    if (!v) fail("missing metadata key '" + k + "'");
    if (*v < lo || *v > hi)
      fail("metadata '" + k + "' = " + std::to_string(*v) + " is outside [" + std::to_string(lo) + ", " +
           std::to_string(hi) + "]");
    return static_cast<int32_t>(*v);
  }
  int32_t opt_int(const char* suffix, int32_t dflt, int64_t lo, int64_t hi) const {
    return f.has(key(suffix)) ? req_int(suffix, lo, hi) : dflt;
  }
  float opt_float(const char* suffix, float dflt) const {
    auto v = f.get_float(key(suffix));
    if (v && !std::isfinite(*v)) fail("metadata '" + key(suffix) + "' is not finite");
    return v ? static_cast<float>(*v) : dflt;
  }
};

}  // namespace

const char* arch_list() { return "llama, qwen2, gemma3"; }

float ModelConfig::attention_scale() const {
  return attn_scale > 0.0f ? attn_scale : 1.0f / std::sqrt(static_cast<float>(head_dim));
}

ModelConfig read_model_config(const gguf::File& f) {
  ModelConfig c;
  c.arch_name = f.architecture();
  Reader r{f, c.arch_name};
  if (c.arch_name == "llama") {
    c.arch = Arch::Llama;
  } else if (c.arch_name == "qwen2") {
    c.arch = Arch::Qwen2;
  } else if (c.arch_name == "gemma3") {
    c.arch = Arch::Gemma3;
  } else {
    r.fail("unsupported architecture '" + c.arch_name + "' (supported: " + arch_list() + ")");
  }
  c.name = f.get_string("general.name").value_or("");
  constexpr int64_t kBig = int64_t{1} << 20;
  c.n_embd = r.req_int("embedding_length", 1, kBig);
  c.n_layer = r.req_int("block_count", 1, 4096);
  c.n_head = r.req_int("attention.head_count", 1, 4096);
  c.n_head_kv = r.opt_int("attention.head_count_kv", c.n_head, 1, c.n_head);
  if (c.n_head % c.n_head_kv != 0)
    r.fail("attention.head_count (" + std::to_string(c.n_head) + ") is not a multiple of head_count_kv (" +
           std::to_string(c.n_head_kv) + ")");
  c.n_ff = r.req_int("feed_forward_length", 1, kBig);
  c.n_ctx_train = r.opt_int("context_length", 2048, 1, int64_t{1} << 24);
  c.head_dim = r.opt_int("attention.key_length", c.n_embd / c.n_head, 1, 4096);
  if (r.opt_int("attention.value_length", c.head_dim, 1, 4096) != c.head_dim)
    r.fail("attention.value_length differs from key_length (not supported)");
  if (c.head_dim % 2 != 0) r.fail("head dimension " + std::to_string(c.head_dim) + " is odd");
  c.rope_dims = r.opt_int("rope.dimension_count", c.head_dim, 2, c.head_dim);
  c.rope_theta = r.opt_float("rope.freq_base", 10000.0f);
  c.rms_eps = r.opt_float("attention.layer_norm_rms_epsilon", 1e-5f);
  if (!(c.rms_eps > 0.0f)) r.fail("layer_norm_rms_epsilon must be positive");

  // Conventions per architecture (llama.cpp's GGUF conversion permutes llama's q/k so the
  // rotation is on adjacent pairs; Qwen2 and Gemma keep the NeoX half-split layout).
  switch (c.arch) {
    case Arch::Llama:
      c.rope_style = kernels::RopeStyle::Normal;
      break;
    case Arch::Qwen2:
      c.rope_style = kernels::RopeStyle::NeoX;
      c.qkv_bias = true;
      break;
    case Arch::Gemma3: {
      c.rope_style = kernels::RopeStyle::NeoX;
      c.activation = kernels::Activation::GeluTanh;
      c.qk_norm = true;
      c.post_norms = true;
      c.embd_scale = std::sqrt(static_cast<float>(c.n_embd));
      c.rope_theta = r.opt_float("rope.freq_base", 1000000.0f);
      c.rope_theta_local = r.opt_float("rope.local.freq_base", 10000.0f);
      c.sliding_window = r.opt_int("attention.sliding_window", 0, 0, int64_t{1} << 24);
      // Gemma3 interleaves five sliding-window layers with one global layer.
      c.layer_is_local.resize(static_cast<size_t>(c.n_layer));
      for (int il = 0; il < c.n_layer; ++il) c.layer_is_local[il] = c.sliding_window > 0 && (il + 1) % 6 != 0;
      break;
    }
  }
  if (c.layer_is_local.empty()) c.layer_is_local.assign(static_cast<size_t>(c.n_layer), false);

  const gguf::TensorInfo* emb = f.find_tensor("token_embd.weight");
  if (!emb) r.fail("missing tensor 'token_embd.weight'");
  if (emb->dims.size() != 2 || emb->dims[0] != c.n_embd)
    r.fail("tensor 'token_embd.weight' has the wrong shape for embedding_length " + std::to_string(c.n_embd));
  c.n_vocab = static_cast<int32_t>(emb->dims[1]);
  c.tied_embeddings = f.find_tensor("output.weight") == nullptr;
  return c;
}

}  // namespace tandem
