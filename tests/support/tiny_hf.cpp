#include "tests/support/tiny_hf.hpp"

#include <boost/json.hpp>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <stdexcept>

#include "engine/gguf/gguf.hpp"

namespace tandem::test {
namespace {

void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  if (!out) throw std::runtime_error("cannot write " + path);
}

std::string dtype_of(DType t) {
  switch (t) {
    case DType::F32: return "F32";
    case DType::F16: return "F16";
    case DType::BF16: return "BF16";
    default: throw std::invalid_argument(std::string("a Hugging Face folder holds floats, not ") + dtype_name(t));
  }
}

// The transformers name of a GGUF tensor (llama.cpp's names, mapped back).
std::string hf_name(const std::string& n, const std::string& arch) {
  if (n == "token_embd.weight") return "model.embed_tokens.weight";
  if (n == "output_norm.weight") return "model.norm.weight";
  if (n == "output.weight") return "lm_head.weight";
  const size_t a = n.find('.'), b = n.find('.', a + 1);
  const std::string layer = n.substr(a + 1, b - a - 1), rest = n.substr(b + 1);
  std::map<std::string, std::string> m = {
      {"attn_norm.weight", "input_layernorm.weight"},   {"attn_q.weight", "self_attn.q_proj.weight"},
      {"attn_k.weight", "self_attn.k_proj.weight"},     {"attn_v.weight", "self_attn.v_proj.weight"},
      {"attn_output.weight", "self_attn.o_proj.weight"}, {"attn_q.bias", "self_attn.q_proj.bias"},
      {"attn_k.bias", "self_attn.k_proj.bias"},         {"attn_v.bias", "self_attn.v_proj.bias"},
      {"ffn_gate.weight", "mlp.gate_proj.weight"},      {"ffn_up.weight", "mlp.up_proj.weight"},
      {"ffn_down.weight", "mlp.down_proj.weight"},      {"attn_q_norm.weight", "self_attn.q_norm.weight"},
      {"attn_k_norm.weight", "self_attn.k_norm.weight"}, {"post_attention_norm.weight", "post_attention_layernorm.weight"},
      {"post_ffw_norm.weight", "post_feedforward_layernorm.weight"}};
  m["ffn_norm.weight"] = arch == "gemma3" ? "pre_feedforward_layernorm.weight" : "post_attention_layernorm.weight";
  return "model.layers." + layer + "." + m.at(rest);
}

boost::json::object tokenizer_json(const gguf::File& f) {
  namespace json = boost::json;
  const std::string model = *f.get_string("tokenizer.ggml.model");
  const std::vector<std::string> tokens = *f.get_string_array("tokenizer.ggml.tokens");
  const std::vector<int64_t> types = *f.get_int_array("tokenizer.ggml.token_type");
  json::array added;
  json::object vocab;
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (types[i] == 3) {
      added.push_back(json::object{{"id", i}, {"content", tokens[i]}, {"single_word", false}, {"lstrip", false},
                                   {"rstrip", false}, {"normalized", false}, {"special", true}});
    }
    vocab[tokens[i]] = i;
  }
  json::object bpe{{"type", "BPE"}, {"dropout", nullptr}, {"continuing_subword_prefix", nullptr},
                   {"end_of_word_suffix", nullptr}, {"ignore_merges", false}, {"vocab", std::move(vocab)}};
  json::object tok{{"version", "1.0"}, {"truncation", nullptr}, {"padding", nullptr}, {"added_tokens", std::move(added)}};
  if (model == "gpt2") {
    json::array merges;  // the newer [left, right] form
    const std::vector<std::string> gguf_merges = *f.get_string_array("tokenizer.ggml.merges");
    for (const std::string& m : gguf_merges) {
      const size_t sp = m.find(' ');
      merges.push_back(json::array{m.substr(0, sp), m.substr(sp + 1)});
    }
    bpe["unk_token"] = nullptr;
    bpe["fuse_unk"] = false;
    bpe["byte_fallback"] = false;
    bpe["merges"] = std::move(merges);
    const json::object byte_level{{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}};
    tok["normalizer"] = nullptr;
    tok["pre_tokenizer"] = byte_level;
    tok["post_processor"] = byte_level;
    tok["decoder"] = byte_level;
  } else {
    // SentencePiece's pieces as a tokenizers BPE: every split of a normal piece into two
    // pieces is a merge, the best-scoring piece's first (the older "a b" string form).
    const std::vector<float> scores = *f.get_float_array("tokenizer.ggml.scores");
    std::map<std::string, size_t> ids;
    for (size_t i = 0; i < tokens.size(); ++i)
      if (types[i] == 1) ids.emplace(tokens[i], i);
    struct M {
      float score;
      size_t l, r;
      std::string text;
    };
    std::vector<M> ms;
    for (const auto& [piece, id] : ids)
      for (size_t k = 1; k < piece.size(); ++k) {
        if ((static_cast<unsigned char>(piece[k]) & 0xC0) == 0x80) continue;  // inside a character
        const auto l = ids.find(piece.substr(0, k)), r = ids.find(piece.substr(k));
        if (l != ids.end() && r != ids.end()) ms.push_back({scores[id], l->second, r->second, l->first + " " + r->first});
      }
    std::stable_sort(ms.begin(), ms.end(), [](const M& a, const M& b) {
      return a.score != b.score ? a.score > b.score : a.l != b.l ? a.l < b.l : a.r < b.r;
    });
    json::array merges;
    for (const M& m : ms) merges.push_back(json::value(m.text));
    bpe["unk_token"] = tokens[static_cast<size_t>(*f.get_int("tokenizer.ggml.unknown_token_id"))];
    bpe["fuse_unk"] = true;
    bpe["byte_fallback"] = true;
    bpe["merges"] = std::move(merges);
    json::array norm;
    if (f.get_bool("tokenizer.ggml.add_space_prefix").value_or(true))
      norm.push_back(json::object{{"type", "Prepend"}, {"prepend", "\xE2\x96\x81"}});
    norm.push_back(json::object{{"type", "Replace"}, {"pattern", json::object{{"String", " "}}}, {"content", "\xE2\x96\x81"}});
    tok["normalizer"] = json::object{{"type", "Sequence"}, {"normalizers", std::move(norm)}};
    tok["pre_tokenizer"] = nullptr;
    tok["post_processor"] = nullptr;
    tok["decoder"] = json::object{{"type", "Sequence"},
                                  {"decoders", json::array{json::object{{"type", "Replace"},
                                                                        {"pattern", json::object{{"String", "\xE2\x96\x81"}}},
                                                                        {"content", " "}},
                                                           json::object{{"type", "ByteFallback"}},
                                                           json::object{{"type", "Fuse"}}}}};
  }
  tok["model"] = std::move(bpe);
  return tok;
}

}  // namespace

std::vector<uint8_t> safetensors_bytes(const std::vector<StTensor>& tensors, const std::string& header_extra) {
  boost::json::object header{{"__metadata__", boost::json::object{{"format", "pt"}}}};
  uint64_t off = 0;
  for (const StTensor& t : tensors) {
    boost::json::array shape;
    for (int64_t d : t.shape) shape.push_back(d);
    header[t.name] = boost::json::object{{"dtype", t.dtype}, {"shape", std::move(shape)},
                                         {"data_offsets", boost::json::array{off, off + t.bytes.size()}}};
    off += t.bytes.size();
  }
  std::string text = boost::json::serialize(header) + header_extra;
  while (text.size() % 8 != 0) text += ' ';
  std::vector<uint8_t> out(8 + text.size() + off);
  const uint64_t n = text.size();
  for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = static_cast<uint8_t>(n >> (8 * i));
  std::memcpy(out.data() + 8, text.data(), text.size());
  size_t at = 8 + text.size();
  for (const StTensor& t : tensors) {
    if (!t.bytes.empty()) std::memcpy(out.data() + at, t.bytes.data(), t.bytes.size());
    at += t.bytes.size();
  }
  return out;
}

void write_safetensors(const std::string& path, const std::vector<StTensor>& tensors) {
  const std::vector<uint8_t> b = safetensors_bytes(tensors);
  write_text(path, std::string(b.begin(), b.end()));
}

void gguf_to_tiny_hf(const std::string& gguf_path, const std::string& dir, const TinyHfOptions& opts) {
  namespace json = boost::json;
  const std::unique_ptr<gguf::File> f = gguf::File::open(gguf_path);
  const std::string arch = f->architecture();
  auto key = [&](const char* k) { return arch + "." + k; };
  const int64_t n_head = *f->get_int(key("attention.head_count"));
  const int64_t n_kv = f->get_int(key("attention.head_count_kv")).value_or(n_head);
  const int64_t n_embd = *f->get_int(key("embedding_length"));
  const int64_t head_dim = f->get_int(key("attention.key_length")).value_or(n_embd / n_head);
  std::filesystem::create_directories(dir);

  std::vector<StTensor> tensors;
  int64_t vocab_rows = 0;
  for (const gguf::TensorInfo& t : f->tensors()) {
    StTensor s;
    s.name = hf_name(t.name, arch);
    s.dtype = dtype_of(t.type);
    s.shape.assign(t.dims.rbegin(), t.dims.rend());
    const uint8_t* src = f->tensor_data(t);
    s.bytes.assign(src, src + t.nbytes);
    if (t.name == "token_embd.weight") vocab_rows = t.dims[1];
    const bool q = t.name.find("attn_q.weight") != std::string::npos, k = t.name.find("attn_k.weight") != std::string::npos;
    if (arch == "llama" && (q || k)) {
      // GGUF's rows rotate adjacent pairs; the checkpoint's rotate the two halves of a head.
      const int64_t heads = q ? n_head : n_kv, half = head_dim / 2;
      const size_t row = t.nbytes / static_cast<size_t>(t.dims[1]);
      for (int64_t h = 0; h < heads; ++h)
        for (int64_t i = 0; i < half; ++i)
          for (int64_t j = 0; j < 2; ++j)
            std::memcpy(s.bytes.data() + static_cast<size_t>(h * head_dim + j * half + i) * row,
                        src + static_cast<size_t>(h * head_dim + 2 * i + j) * row, row);
    }
    if (arch == "gemma3" && t.name.size() > 11 && t.name.compare(t.name.size() - 11, 11, "norm.weight") == 0) {
      float* v = reinterpret_cast<float*>(s.bytes.data());  // Gemma stores w for x·(1 + w)
      for (size_t i = 0; i < s.bytes.size() / 4; ++i) v[i] -= 1.0f;
    }
    tensors.push_back(std::move(s));
  }
  const int shards = std::max(1, opts.shards);
  if (shards == 1) {
    write_safetensors(dir + "/model.safetensors", tensors);
  } else {
    json::object map;
    const size_t per = (tensors.size() + static_cast<size_t>(shards) - 1) / static_cast<size_t>(shards);
    for (int s = 0; s < shards; ++s) {
      char name[64];
      std::snprintf(name, sizeof name, "model-%05d-of-%05d.safetensors", s + 1, shards);
      std::vector<StTensor> part;
      for (size_t i = static_cast<size_t>(s) * per; i < std::min(tensors.size(), static_cast<size_t>(s + 1) * per); ++i) {
        part.push_back(tensors[i]);
        map[tensors[i].name] = name;
      }
      write_safetensors(dir + "/" + name, part);
    }
    write_text(dir + "/model.safetensors.index.json",
               json::serialize(json::object{{"metadata", json::object{}}, {"weight_map", std::move(map)}}));
  }

  const bool tied = f->find_tensor("output.weight") == nullptr;
  json::object cfg{{"hidden_size", n_embd},
                   {"num_hidden_layers", *f->get_int(key("block_count"))},
                   {"num_attention_heads", n_head},
                   {"num_key_value_heads", n_kv},
                   {"intermediate_size", *f->get_int(key("feed_forward_length"))},
                   {"head_dim", head_dim},
                   {"vocab_size", vocab_rows},
                   {"max_position_embeddings", f->get_int(key("context_length")).value_or(2048)},
                   {"rms_norm_eps", *f->get_float(key("attention.layer_norm_rms_epsilon"))},
                   {"tie_word_embeddings", tied},
                   {"rope_theta", f->get_float(key("rope.freq_base")).value_or(10000.0)},
                   {"torch_dtype", "float32"}};
  if (arch == "qwen2") {
    cfg["architectures"] = json::array{"Qwen2ForCausalLM"};
    cfg["model_type"] = "qwen2";
    cfg["hidden_act"] = "silu";
    cfg["use_sliding_window"] = false;
  } else if (arch == "llama") {
    cfg["architectures"] = json::array{"LlamaForCausalLM"};
    cfg["model_type"] = "llama";
    cfg["hidden_act"] = "silu";
    cfg["attention_bias"] = false;
  } else {
    cfg["architectures"] = json::array{"Gemma3ForCausalLM"};
    cfg["model_type"] = "gemma3_text";
    cfg["hidden_activation"] = "gelu_pytorch_tanh";
    cfg["query_pre_attn_scalar"] = head_dim;
    const int64_t window = f->get_int(key("attention.sliding_window")).value_or(0);
    cfg["sliding_window"] = window;
    cfg["rope_local_base_freq"] = 10000.0;
    json::array lt;
    for (int64_t i = 0; i < *f->get_int(key("block_count")); ++i)
      lt.push_back(json::value(window > 0 && (i + 1) % 6 != 0 ? "sliding_attention" : "full_attention"));
    cfg["layer_types"] = std::move(lt);
  }
  write_text(dir + "/config.json", json::serialize(cfg));
  write_text(dir + "/tokenizer.json", json::serialize(tokenizer_json(*f)));

  const std::vector<std::string> tokens = *f->get_string_array("tokenizer.ggml.tokens");
  auto text_of = [&](const char* k) -> json::value {
    const auto id = f->get_int(k);
    return id && *id >= 0 && *id < static_cast<int64_t>(tokens.size()) ? json::value(tokens[static_cast<size_t>(*id)])
                                                                       : json::value(nullptr);
  };
  json::object tc{{"tokenizer_class", "PreTrainedTokenizerFast"},
                  {"bos_token", text_of("tokenizer.ggml.bos_token_id")},
                  {"eos_token", text_of("tokenizer.ggml.eos_token_id")},
                  {"unk_token", text_of("tokenizer.ggml.unknown_token_id")},
                  {"add_bos_token", f->get_bool("tokenizer.ggml.add_bos_token").value_or(false)},
                  {"add_eos_token", f->get_bool("tokenizer.ggml.add_eos_token").value_or(false)}};
  if (const auto ct = f->get_string("tokenizer.chat_template")) tc["chat_template"] = *ct;
  write_text(dir + "/tokenizer_config.json", json::serialize(tc));
  write_text(dir + "/generation_config.json",
             json::serialize(json::object{{"eos_token_id", *f->get_int("tokenizer.ggml.eos_token_id")}}));
}

void write_tiny_hf(const std::string& dir, const std::string& gguf_path, const TinyModelSpec& spec,
                   const TinyHfOptions& opts) {
  write_tiny_model(gguf_path, spec);
  gguf_to_tiny_hf(gguf_path, dir, opts);
}

}  // namespace tandem::test
