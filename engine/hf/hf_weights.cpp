#include "engine/hf/hf_weights.hpp"

#include <cstring>
#include <stdexcept>

#include "kernels/cpu/quant.hpp"

namespace tandem::hf {
namespace {

bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

struct Owner {
  std::shared_ptr<const Checkpoint> ckpt;
  std::vector<std::vector<uint8_t>> copies;
};

// Rows of a [n_head * head_dim, cols] matrix from half-split to interleaved RoPE order:
// within each head, new row 2i + j is old row j * head_dim / 2 + i.
std::vector<uint8_t> permute_rope_rows(const uint8_t* src, int64_t n_head, int64_t head_dim, size_t row_bytes) {
  std::vector<uint8_t> out(static_cast<size_t>(n_head * head_dim) * row_bytes);
  const int64_t half = head_dim / 2;
  for (int64_t h = 0; h < n_head; ++h)
    for (int64_t i = 0; i < half; ++i)
      for (int64_t j = 0; j < 2; ++j) {
        const int64_t to = h * head_dim + 2 * i + j, from = h * head_dim + j * half + i;
        std::memcpy(out.data() + static_cast<size_t>(to) * row_bytes, src + static_cast<size_t>(from) * row_bytes,
                    row_bytes);
      }
  return out;
}

}  // namespace

std::string gguf_tensor_name(const std::string& n, const std::string& arch) {
  if (n == "model.embed_tokens.weight") return "token_embd.weight";
  if (n == "model.norm.weight") return "output_norm.weight";
  if (n == "lm_head.weight") return "output.weight";
  if (ends_with(n, ".rotary_emb.inv_freq")) return "";
  static const std::string kLayers = "model.layers.";
  if (n.compare(0, kLayers.size(), kLayers) == 0) {
    const size_t dot = n.find('.', kLayers.size());
    const std::string idx = n.substr(kLayers.size(), dot == std::string::npos ? 0 : dot - kLayers.size());
    if (dot != std::string::npos && !idx.empty() && idx.size() < 6 &&
        idx.find_first_not_of("0123456789") == std::string::npos) {
      const std::string rest = n.substr(dot + 1), blk = "blk." + idx + ".";
      const bool gemma = arch == "gemma3";
      struct Row {
        const char* hf;
        const char* gguf;
      };
      static const Row kCommon[] = {
          {"input_layernorm.weight", "attn_norm.weight"},  {"self_attn.q_proj.weight", "attn_q.weight"},
          {"self_attn.k_proj.weight", "attn_k.weight"},    {"self_attn.v_proj.weight", "attn_v.weight"},
          {"self_attn.o_proj.weight", "attn_output.weight"}, {"mlp.gate_proj.weight", "ffn_gate.weight"},
          {"mlp.up_proj.weight", "ffn_up.weight"},         {"mlp.down_proj.weight", "ffn_down.weight"},
      };
      static const Row kQwen2[] = {{"self_attn.q_proj.bias", "attn_q.bias"},
                                   {"self_attn.k_proj.bias", "attn_k.bias"},
                                   {"self_attn.v_proj.bias", "attn_v.bias"},
                                   {"post_attention_layernorm.weight", "ffn_norm.weight"}};
      static const Row kLlama[] = {{"post_attention_layernorm.weight", "ffn_norm.weight"}};
      static const Row kGemma3[] = {{"self_attn.q_norm.weight", "attn_q_norm.weight"},
                                    {"self_attn.k_norm.weight", "attn_k_norm.weight"},
                                    {"post_attention_layernorm.weight", "post_attention_norm.weight"},
                                    {"pre_feedforward_layernorm.weight", "ffn_norm.weight"},
                                    {"post_feedforward_layernorm.weight", "post_ffw_norm.weight"}};
      for (const Row& r : kCommon)
        if (rest == r.hf) return blk + r.gguf;
      if (arch == "qwen2")
        for (const Row& r : kQwen2)
          if (rest == r.hf) return blk + r.gguf;
      if (arch == "llama")
        for (const Row& r : kLlama)
          if (rest == r.hf) return blk + r.gguf;
      if (gemma)
        for (const Row& r : kGemma3)
          if (rest == r.hf) return blk + r.gguf;
    }
  }
  throw std::runtime_error("tensor '" + n + "' is not part of a " + arch + " model");
}

MappedWeights map_weights(std::shared_ptr<const Checkpoint> ckpt, const HfArch& arch, const std::string& dir) {
  auto owner = std::make_shared<Owner>();
  owner->ckpt = ckpt;
  MappedWeights out;
  const bool gemma = arch.gguf_arch == "gemma3", llama = arch.gguf_arch == "llama";
  for (const Checkpoint::Entry& e : ckpt->tensors()) {
    const st::TensorInfo& t = *e.info;
    const std::string where = e.file->path() + ": ";
    std::string name;
    try {
      name = gguf_tensor_name(t.name, arch.gguf_arch);
    } catch (const std::runtime_error& err) {
      throw std::runtime_error(where + err.what());
    }
    if (name.empty()) continue;
    const std::optional<DType> type = st::engine_type(t.dtype);
    if (!type)
      throw std::runtime_error(where + "tensor '" + t.name + "' has dtype " + st::dtype_name(t.dtype) +
                               ", which is not a weight type (F32, F16, BF16)");
    if (t.shape.empty() || t.shape.size() > 2 || t.numel() == 0)
      throw std::runtime_error(where + "tensor '" + t.name + "' has an unexpected shape for a weight");
    gguf::File::ExternalTensor x;
    x.name = name;
    x.type = *type;
    x.dims.assign(t.shape.rbegin(), t.shape.rend());
    x.data = e.file->data(t);
    x.nbytes = t.nbytes();
    x.releasable = e.file->mapped();
    if (t.shape.size() == 1) {
      // Norms and biases: F32, as the forward pass reads them; Gemma's norms as 1 + w.
      const int64_t n = t.shape[0];
      std::vector<uint8_t>& f = owner->copies.emplace_back(static_cast<size_t>(n) * sizeof(float));
      float* v = reinterpret_cast<float*>(f.data());
      kernels::cpu::dequantize_row_ref(*type, x.data, v, n);
      if (gemma && ends_with(name, "norm.weight"))
        for (int64_t i = 0; i < n; ++i) v[i] += 1.0f;
      x.type = DType::F32;
      x.data = f.data();
      x.nbytes = f.size();
      x.releasable = false;
    } else if (llama && (ends_with(name, "attn_q.weight") || ends_with(name, "attn_k.weight"))) {
      const int64_t heads = ends_with(name, "attn_q.weight") ? arch.n_head : arch.n_head_kv;
      if (t.shape[0] != heads * arch.head_dim || arch.head_dim % 2 != 0)
        throw std::runtime_error(where + "tensor '" + t.name + "' has " + std::to_string(t.shape[0]) +
                                 " rows, not heads × head_dim = " + std::to_string(heads * arch.head_dim));
      std::vector<uint8_t>& p =
          owner->copies.emplace_back(permute_rope_rows(x.data, heads, arch.head_dim, x.nbytes / static_cast<size_t>(t.shape[0])));
      x.data = p.data();
      x.releasable = false;
    }
    out.tensors.push_back(std::move(x));
  }
  if (out.tensors.empty()) throw std::runtime_error(dir + ": the checkpoint has no tensors");
  out.owner = std::move(owner);
  return out;
}

}  // namespace tandem::hf
