#include "tests/support/tiny_model.hpp"

#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <vector>

#include "engine/gguf/gguf_writer.hpp"
#include "kernels/cpu/fp16.hpp"
#include "tests/support/random_blocks.hpp"
#include "tests/support/tiny_vocab.hpp"

namespace tandem::test {
namespace {

uint64_t splitmix64(uint64_t& s) {
  uint64_t z = (s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Per-tensor seed from the model seed and the tensor name, so a tensor's values do not
// depend on which other tensors the spec asks for.
uint64_t tensor_seed(uint64_t seed, const std::string& name) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (char c : name) h = (h ^ static_cast<unsigned char>(c)) * 0x100000001b3ull;
  uint64_t s = seed ^ h;
  return splitmix64(s);
}

// n values center + amplitude * U(-1, 1), stored as type t.
std::vector<uint8_t> random_data(DType t, int64_t n, uint64_t seed, float amplitude, float center, float perturb) {
  if (t != DType::F32 && t != DType::F16 && t != DType::BF16) {
    if (center != 0.f) throw std::logic_error("tiny model: offset values need a float type");
    return random_blocks(t, n, seed, amplitude);
  }
  std::vector<float> v(static_cast<size_t>(n));
  uint64_t s = seed;
  for (float& x : v) {
    const float u = static_cast<float>(splitmix64(s) >> 40) * (1.0f / 16777216.0f);  // [0, 1)
    x = center + amplitude * (2.f * u - 1.f);
  }
  if (perturb > 0.f) {
    uint64_t ps = ~seed;
    for (float& x : v) {
      const float u = static_cast<float>(splitmix64(ps) >> 40) * (1.0f / 16777216.0f);
      x += perturb * amplitude * (2.f * u - 1.f);
    }
  }
  std::vector<uint8_t> out(static_cast<size_t>(n) * dtype_info(t).type_size);
  for (size_t i = 0; i < v.size(); ++i) {
    if (t == DType::F32) {
      std::memcpy(out.data() + 4 * i, &v[i], 4);
    } else {
      const uint16_t h = t == DType::F16 ? kernels::cpu::f32_to_fp16(v[i]) : kernels::cpu::f32_to_bf16(v[i]);
      std::memcpy(out.data() + 2 * i, &h, 2);
    }
  }
  return out;
}

class Builder {
 public:
  Builder(gguf::Writer& w, const TinyModelSpec& s) : w_(w), s_(s) {}

  // A matmul weight [fan_in, fan_out]: std 1/sqrt(fan_in) keeps activations O(1).
  void matmul(const std::string& name, int64_t fan_in, int64_t fan_out, DType t) {
    const float amp = s_.weight_scale > 0.f ? s_.weight_scale : std::sqrt(3.f / static_cast<float>(fan_in));
    add(name, t, {fan_in, fan_out}, amp, 0.f);
  }
  void norm(const std::string& name, int64_t n) { add(name, DType::F32, {n}, 0.1f, 1.f); }
  void bias(const std::string& name, int64_t n) { add(name, DType::F32, {n}, 0.1f, 0.f); }
  void embedding(int64_t n_embd, int64_t n_vocab, DType t) {
    add("token_embd.weight", t, {n_embd, n_vocab}, 1.f, 0.f);
  }

 private:
  void add(const std::string& name, DType t, std::vector<int64_t> dims, float amp, float center) {
    const DTypeInfo& info = dtype_info(t);
    if (dims[0] % info.block_size != 0)
      throw std::invalid_argument("tiny model: tensor '" + name + "' row length " + std::to_string(dims[0]) +
                                  " is not a multiple of the " + info.name + " block size " +
                                  std::to_string(info.block_size));
    int64_t n = 1;
    for (int64_t d : dims) n *= d;
    std::vector<uint8_t> data = random_data(t, n, tensor_seed(s_.seed, name), amp, center, s_.perturb);
    if (name == "output.weight") {  // F32 rows of dims[0] values (check_spec)
      const std::vector<float> nan_row(static_cast<size_t>(dims[0]), std::numeric_limits<float>::quiet_NaN());
      for (int32_t r : s_.nan_output_rows)
        std::memcpy(data.data() + static_cast<size_t>(r) * nan_row.size() * sizeof(float), nan_row.data(),
                    nan_row.size() * sizeof(float));
    }
    w_.add_tensor(name, t, std::move(dims), data.data(), data.size());
  }

  gguf::Writer& w_;
  const TinyModelSpec& s_;
};

void check_spec(const TinyModelSpec& s, int head_dim) {
  auto bad = [](const std::string& why) { throw std::invalid_argument("tiny model: " + why); };
  if (s.arch != "llama" && s.arch != "qwen2" && s.arch != "gemma3") bad("unknown arch '" + s.arch + "'");
  if (s.tokenizer != "gpt2" && s.tokenizer != "llama") bad("unknown tokenizer '" + s.tokenizer + "'");
  if (s.n_embd <= 0 || s.n_layer <= 0 || s.n_head <= 0 || s.n_head_kv <= 0 || s.n_ff <= 0 || s.n_ctx <= 0)
    bad("sizes must be positive");
  if (s.head_dim == 0 && s.n_embd % s.n_head != 0) bad("n_embd is not a multiple of n_head");
  if (head_dim <= 0 || head_dim % 2 != 0) bad("head_dim must be positive and even");
  if (s.vocab_rows != 0 && s.vocab_rows < s.n_vocab) bad("vocab_rows must be 0 or at least n_vocab");
  if (s.n_head % s.n_head_kv != 0) bad("n_head is not a multiple of n_head_kv");
  if (s.eos_id >= s.n_vocab) bad("eos_id is outside the vocabulary");
  if (!s.nan_output_rows.empty() && (s.tied_embeddings || s.weight_type != DType::F32))
    bad("NaN output rows need an untied F32 output matrix");
  for (int32_t r : s.nan_output_rows)
    if (r < 0 || r >= std::max(s.n_vocab, s.vocab_rows)) bad("a NaN output row is outside the matrix");
  for (DType t : {s.weight_type, s.embd_type, s.mixed_type})
    if (!dtype_info(t).weight_ok) bad(std::string(dtype_name(t)) + " cannot be used for weights");
}

void add_tokenizer(gguf::Writer& w, const TinyModelSpec& s) {
  const TinyVocab v = s.tokenizer == "gpt2" ? build_gpt2_vocab(s.n_vocab) : build_llama_vocab(s.n_vocab);
  w.set_string("tokenizer.ggml.model", s.tokenizer);
  if (s.tokenizer == "gpt2") w.set_string("tokenizer.ggml.pre", "default");
  w.set_string_array("tokenizer.ggml.tokens", v.tokens);
  if (!v.scores.empty()) w.set_float_array("tokenizer.ggml.scores", v.scores);
  w.set_int32_array("tokenizer.ggml.token_type", v.token_types);
  if (!v.merges.empty()) w.set_string_array("tokenizer.ggml.merges", v.merges);
  w.set_u32("tokenizer.ggml.bos_token_id", static_cast<uint32_t>(v.bos_id));
  w.set_u32("tokenizer.ggml.eos_token_id", static_cast<uint32_t>(s.eos_id >= 0 ? s.eos_id : v.eos_id));
  if (v.unk_id >= 0) w.set_u32("tokenizer.ggml.unknown_token_id", static_cast<uint32_t>(v.unk_id));
  w.set_bool("tokenizer.ggml.add_bos_token", s.tokenizer == "llama");
  w.set_bool("tokenizer.ggml.add_eos_token", false);
  if (s.tokenizer == "gpt2")  // ChatML, which the <|im_start|>/<|im_end|> tokens exist for
    w.set_string("tokenizer.chat_template",
                 "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
                 "'<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' "
                 "}}{% endif %}");
}

}  // namespace

void write_tiny_model(const std::string& path, const TinyModelSpec& s) {
  const int hd = s.head_dim > 0 ? s.head_dim : (s.n_head > 0 ? s.n_embd / s.n_head : 0);
  check_spec(s, hd);
  const std::string& a = s.arch;
  const bool gemma = a == "gemma3";

  gguf::Writer w;
  w.set_string("general.architecture", a);
  w.set_string("general.name", "tandem-tiny-" + a);
  w.set_u32(a + ".context_length", static_cast<uint32_t>(s.n_ctx));
  w.set_u32(a + ".embedding_length", static_cast<uint32_t>(s.n_embd));
  w.set_u32(a + ".block_count", static_cast<uint32_t>(s.n_layer));
  w.set_u32(a + ".feed_forward_length", static_cast<uint32_t>(s.n_ff));
  w.set_u32(a + ".attention.head_count", static_cast<uint32_t>(s.n_head));
  w.set_u32(a + ".attention.head_count_kv", static_cast<uint32_t>(s.n_head_kv));
  w.set_f32(a + ".attention.layer_norm_rms_epsilon", s.rms_eps);
  w.set_f32(a + ".rope.freq_base", s.rope_theta);
  if (!gemma) w.set_u32(a + ".rope.dimension_count", static_cast<uint32_t>(hd));
  if (a == "llama") w.set_u32(a + ".vocab_size", static_cast<uint32_t>(s.n_vocab));
  if (gemma || hd * s.n_head != s.n_embd) {
    w.set_u32(a + ".attention.key_length", static_cast<uint32_t>(hd));
    w.set_u32(a + ".attention.value_length", static_cast<uint32_t>(hd));
  }
  if (gemma) w.set_u32(a + ".attention.sliding_window", static_cast<uint32_t>(s.sliding_window));
  add_tokenizer(w, s);

  Builder b(w, s);
  const int64_t E = s.n_embd, F = s.n_ff, Q = int64_t{s.n_head} * hd, KV = int64_t{s.n_head_kv} * hd;
  const int64_t rows = s.vocab_rows > 0 ? s.vocab_rows : s.n_vocab;
  b.embedding(E, rows, s.embd_type);
  for (int il = 0; il < s.n_layer; ++il) {
    const std::string p = "blk." + std::to_string(il) + ".";
    b.norm(p + "attn_norm.weight", E);
    b.matmul(p + "attn_q.weight", E, Q, s.weight_type);
    b.matmul(p + "attn_k.weight", E, KV, s.weight_type);
    const DType mixed = s.mixed_type != DType::F32 && il % 2 == 1 ? s.mixed_type : s.weight_type;
    b.matmul(p + "attn_v.weight", E, KV, mixed);
    if (a == "qwen2") {
      b.bias(p + "attn_q.bias", Q);
      b.bias(p + "attn_k.bias", KV);
      b.bias(p + "attn_v.bias", KV);
    }
    if (gemma) {
      b.norm(p + "attn_q_norm.weight", hd);
      b.norm(p + "attn_k_norm.weight", hd);
    }
    b.matmul(p + "attn_output.weight", Q, E, s.weight_type);
    if (gemma) b.norm(p + "post_attention_norm.weight", E);
    b.norm(p + "ffn_norm.weight", E);
    b.matmul(p + "ffn_gate.weight", E, F, s.weight_type);
    b.matmul(p + "ffn_up.weight", E, F, s.weight_type);
    b.matmul(p + "ffn_down.weight", F, E, mixed);
    if (gemma) b.norm(p + "post_ffw_norm.weight", E);
  }
  b.norm("output_norm.weight", E);
  if (!s.tied_embeddings) b.matmul("output.weight", E, rows, s.weight_type);
  w.write(path);
}

TinyPair write_tiny_pair(const std::string& dir, const TinyModelSpec& spec) {
  TinyPair r{dir + "/target.gguf", dir + "/close.gguf", dir + "/far.gguf"};
  write_tiny_model(r.target, spec);
  TinyModelSpec close = spec;
  close.weight_type = DType::F16;
  close.embd_type = DType::F16;
  write_tiny_model(r.close_draft, close);
  TinyModelSpec far = spec;
  far.seed = 77;
  far.n_layer = 1;
  write_tiny_model(r.far_draft, far);
  return r;
}

}  // namespace tandem::test
