#include "engine/hf/hf_config.hpp"

#include <cmath>
#include <stdexcept>

#include "engine/hf/hf_json.hpp"

namespace tandem::hf {
namespace {

struct Cfg {
  const boost::json::object& o;
  const std::string& file;
  [[noreturn]] void fail(const std::string& what) const { throw std::runtime_error(file + ": " + what); }
  int64_t req_int(const char* key, int64_t lo, int64_t hi) const {
    const std::optional<int64_t> v = get_int(o, key, file);
    if (!v) fail("missing '" + std::string(key) + "'");
    if (*v < lo || *v > hi)
      fail("'" + std::string(key) + "' = " + std::to_string(*v) + " is outside [" + std::to_string(lo) + ", " +
           std::to_string(hi) + "]");
    return *v;
  }
  int64_t opt_int(const char* key, int64_t dflt, int64_t lo, int64_t hi) const {
    return get_int(o, key, file) ? req_int(key, lo, hi) : dflt;
  }
  double opt_number(const char* key, double dflt) const {
    const double v = get_number(o, key, file).value_or(dflt);
    if (!std::isfinite(v)) fail("'" + std::string(key) + "' is not finite");
    return v;
  }
  // A key that must be absent, null, false or equal to `ok` for the engine to compute the model
  // as the checkpoint defines it.
  void refuse_if_set(const char* key, const char* why) const {
    const boost::json::value* v = o.if_contains(key);
    if (!v || v->is_null() || (v->is_bool() && !v->as_bool())) return;
    fail("'" + std::string(key) + "' = " + boost::json::serialize(*v) + ": " + why);
  }
  std::string activation(const char* key, const char* dflt) const {
    return get_string(o, key, file).value_or(dflt);
  }
};

// The RoPE base: `rope_theta`, or in newer configs `rope_parameters.rope_theta`. Any scaling
// other than the default is refused (the engine has no scaled RoPE).
double rope_base(const Cfg& c, double dflt) {
  c.refuse_if_set("rope_scaling", "RoPE scaling is not supported");
  double theta = c.opt_number("rope_theta", dflt);
  if (const boost::json::value* p = c.o.if_contains("rope_parameters"); p && p->is_object()) {
    const boost::json::object& rp = p->as_object();
    const std::optional<std::string> type = get_string(rp, "rope_type", c.file);
    if (type && *type != "default") c.fail("rope_parameters.rope_type '" + *type + "' is not supported");
    if (const auto t = get_number(rp, "rope_theta", c.file)) theta = *t;
  }
  if (!(theta > 0.0)) c.fail("RoPE base must be positive");
  return theta;
}

}  // namespace

HfArch write_config_metadata(const boost::json::object& cfg, const std::string& file, const std::string& name,
                             gguf::Writer& w) {
  const Cfg c{cfg, file};
  std::string arch_class;
  if (const boost::json::value* a = cfg.if_contains("architectures"); a && a->is_array() && !a->as_array().empty() &&
                                                                      a->as_array()[0].is_string())
    arch_class = std::string(a->as_array()[0].as_string());
  const std::string model_type = get_string(cfg, "model_type", file).value_or("");
  HfArch h;
  if (arch_class == "Qwen2ForCausalLM" || (arch_class.empty() && model_type == "qwen2")) {
    h.gguf_arch = "qwen2";
  } else if (arch_class == "LlamaForCausalLM" || (arch_class.empty() && model_type == "llama")) {
    h.gguf_arch = "llama";
  } else if (arch_class == "Gemma3ForCausalLM" || (arch_class.empty() && model_type == "gemma3_text")) {
    h.gguf_arch = "gemma3";
  } else {
    const std::string what = arch_class.empty() ? "model_type '" + model_type + "'" : "architecture '" + arch_class + "'";
    c.fail("unsupported " + what +
           (arch_class == "Gemma3ForConditionalGeneration" ? " (the multimodal Gemma 3; use its text-only model)" : "") +
           " (supported: Qwen2ForCausalLM, LlamaForCausalLM, Gemma3ForCausalLM)");
  }
  const std::string& a = h.gguf_arch;
  constexpr int64_t kBig = int64_t{1} << 20;
  const int64_t n_embd = c.req_int("hidden_size", 1, kBig);
  const int64_t n_layer = c.req_int("num_hidden_layers", 1, 4096);
  h.n_head = c.req_int("num_attention_heads", 1, 4096);
  h.n_head_kv = c.opt_int("num_key_value_heads", h.n_head, 1, h.n_head);
  const int64_t n_ff = c.req_int("intermediate_size", 1, kBig);
  h.n_vocab = c.req_int("vocab_size", 1, int64_t{1} << 24);
  h.head_dim = c.opt_int("head_dim", n_embd / h.n_head, 1, 4096);
  h.tied_embeddings = get_bool(cfg, "tie_word_embeddings", file).value_or(a == "gemma3");
  const int64_t ctx = c.opt_int("max_position_embeddings", 2048, 1, int64_t{1} << 24);
  const double eps = c.opt_number("rms_norm_eps", 1e-6);
  if (!(eps > 0.0)) c.fail("'rms_norm_eps' must be positive");

  w.set_string("general.architecture", a);
  w.set_string("general.name", name);
  w.set_u32(a + ".embedding_length", static_cast<uint32_t>(n_embd));
  w.set_u32(a + ".block_count", static_cast<uint32_t>(n_layer));
  w.set_u32(a + ".attention.head_count", static_cast<uint32_t>(h.n_head));
  w.set_u32(a + ".attention.head_count_kv", static_cast<uint32_t>(h.n_head_kv));
  w.set_u32(a + ".feed_forward_length", static_cast<uint32_t>(n_ff));
  w.set_u32(a + ".context_length", static_cast<uint32_t>(ctx));
  w.set_u32(a + ".attention.key_length", static_cast<uint32_t>(h.head_dim));
  w.set_u32(a + ".attention.value_length", static_cast<uint32_t>(h.head_dim));
  w.set_f32(a + ".attention.layer_norm_rms_epsilon", static_cast<float>(eps));

  if (a == "qwen2" || a == "llama") {
    const std::string act = c.activation("hidden_act", "silu");
    if (act != "silu") c.fail("hidden_act '" + act + "' is not supported (silu)");
    w.set_f32(a + ".rope.freq_base", static_cast<float>(rope_base(c, 10000.0)));
    if (a == "qwen2") {
      c.refuse_if_set("use_sliding_window", "Qwen2's sliding-window attention is not supported");
    } else {
      c.refuse_if_set("attention_bias", "Llama attention biases are not supported");
      c.refuse_if_set("mlp_bias", "Llama MLP biases are not supported");
    }
  } else {  // gemma3
    const std::string act = c.activation("hidden_activation", "gelu_pytorch_tanh");
    if (act != "gelu_pytorch_tanh") c.fail("hidden_activation '" + act + "' is not supported (gelu_pytorch_tanh)");
    c.refuse_if_set("final_logit_softcapping", "logit soft-capping is not supported");
    c.refuse_if_set("attn_logit_softcapping", "attention soft-capping is not supported");
    const int64_t qpas = c.opt_int("query_pre_attn_scalar", h.head_dim, 1, 1 << 20);
    if (qpas != h.head_dim)
      c.fail("'query_pre_attn_scalar' = " + std::to_string(qpas) + " differs from head_dim " +
             std::to_string(h.head_dim) + " (not supported)");
    w.set_f32(a + ".rope.freq_base", static_cast<float>(rope_base(c, 1000000.0)));
    w.set_f32(a + ".rope.local.freq_base", static_cast<float>(c.opt_number("rope_local_base_freq", 10000.0)));
    const int64_t window = c.opt_int("sliding_window", 0, 0, int64_t{1} << 24);
    w.set_u32(a + ".attention.sliding_window", static_cast<uint32_t>(window));
    // The engine's Gemma 3 layer pattern: five sliding-window layers, then one global.
    if (const boost::json::value* lt = cfg.if_contains("layer_types"); lt && lt->is_array()) {
      const boost::json::array& types = lt->as_array();
      if (static_cast<int64_t>(types.size()) != n_layer) c.fail("'layer_types' has the wrong length");
      for (int64_t il = 0; il < n_layer; ++il) {
        const bool local = window > 0 && (il + 1) % 6 != 0;
        const boost::json::value& t = types[static_cast<size_t>(il)];
        if (!t.is_string() || t.as_string() != (local ? "sliding_attention" : "full_attention"))
          c.fail("'layer_types'[" + std::to_string(il) + "] differs from Gemma 3's pattern (five sliding, one full)");
      }
    }
  }
  return h;
}

}  // namespace tandem::hf
