// Tiny fixture models: every arch x tokenizer is written, read back through gguf::File
// and gguf-py, and checked for llama.cpp's names, shapes and metadata, a consistent
// vocabulary, and sane weight values.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <set>
#include <tuple>

#include "engine/gguf/gguf.hpp"
#include "kernels/cpu/fp16.hpp"
#include "tests/support/gguf_dump.hpp"
#include "tests/support/paths.hpp"
#include "tests/support/tiny_model.hpp"
#include "tests/support/tiny_vocab.hpp"

namespace tandem {
namespace {

using test::TinyModelSpec;

std::vector<float> as_floats(const gguf::File& f, const gguf::TensorInfo& t) {
  std::vector<float> out(static_cast<size_t>(t.numel()));
  const uint8_t* p = f.tensor_data(t);
  for (size_t i = 0; i < out.size(); ++i) {
    uint16_t h;
    switch (t.type) {
      case DType::F32: std::memcpy(&out[i], p + 4 * i, 4); break;
      case DType::F16: std::memcpy(&h, p + 2 * i, 2); out[i] = kernels::cpu::fp16_to_f32(h); break;
      case DType::BF16: std::memcpy(&h, p + 2 * i, 2); out[i] = kernels::cpu::bf16_to_f32(h); break;
      default: ADD_FAILURE() << "not a float tensor"; return {};
    }
  }
  return out;
}

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void expect_tensor(const gguf::File& f, const std::string& name, DType type, std::vector<int64_t> dims) {
  const gguf::TensorInfo* t = f.find_tensor(name);
  ASSERT_NE(t, nullptr) << name;
  EXPECT_EQ(t->type, type) << name;
  EXPECT_EQ(t->dims, dims) << name;
}

class TinyModel : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {};

TEST_P(TinyModel, WritesWhatLlamaCppFilesContain) {
  TinyModelSpec s;
  s.arch = std::get<0>(GetParam());
  s.tokenizer = std::get<1>(GetParam());
  if (s.arch == "gemma3") s.head_dim = 32;  // differs from n_embd / n_head = 16
  const int hd = s.head_dim ? s.head_dim : s.n_embd / s.n_head;
  const std::string path = test::scratch_dir("tiny-" + s.arch + "-" + s.tokenizer) + "/m.gguf";
  test::write_tiny_model(path, s);
  const auto f = gguf::File::open(path);
  const std::string& a = s.arch;

  EXPECT_EQ(f->architecture(), a);
  EXPECT_EQ(f->get_int(a + ".context_length"), s.n_ctx);
  EXPECT_EQ(f->get_int(a + ".embedding_length"), s.n_embd);
  EXPECT_EQ(f->get_int(a + ".block_count"), s.n_layer);
  EXPECT_EQ(f->get_int(a + ".feed_forward_length"), s.n_ff);
  EXPECT_EQ(f->get_int(a + ".attention.head_count"), s.n_head);
  EXPECT_EQ(f->get_int(a + ".attention.head_count_kv"), s.n_head_kv);
  EXPECT_FLOAT_EQ(*f->get_float(a + ".attention.layer_norm_rms_epsilon"), s.rms_eps);
  EXPECT_FLOAT_EQ(*f->get_float(a + ".rope.freq_base"), s.rope_theta);
  if (a == "gemma3") {
    EXPECT_EQ(f->get_int(a + ".attention.key_length"), hd);
    EXPECT_EQ(f->get_int(a + ".attention.value_length"), hd);
    EXPECT_EQ(f->get_int(a + ".attention.sliding_window"), 8);
  } else {
    EXPECT_EQ(f->get_int(a + ".rope.dimension_count"), hd);
    EXPECT_FALSE(f->has(a + ".attention.key_length"));
  }

  // Tensors: names, shapes (dims[0] innermost) and types as llama.cpp writes them.
  const int64_t E = s.n_embd, Q = s.n_head * hd, KV = s.n_head_kv * hd, F = s.n_ff;
  expect_tensor(*f, "token_embd.weight", DType::F32, {E, s.n_vocab});
  expect_tensor(*f, "output_norm.weight", DType::F32, {E});
  EXPECT_EQ(f->find_tensor("output.weight"), nullptr);  // tied
  for (int il = 0; il < s.n_layer; ++il) {
    const std::string p = "blk." + std::to_string(il) + ".";
    expect_tensor(*f, p + "attn_norm.weight", DType::F32, {E});
    expect_tensor(*f, p + "attn_q.weight", DType::F32, {E, Q});
    expect_tensor(*f, p + "attn_k.weight", DType::F32, {E, KV});
    expect_tensor(*f, p + "attn_v.weight", DType::F32, {E, KV});
    expect_tensor(*f, p + "attn_output.weight", DType::F32, {Q, E});
    expect_tensor(*f, p + "ffn_norm.weight", DType::F32, {E});
    expect_tensor(*f, p + "ffn_gate.weight", DType::F32, {E, F});
    expect_tensor(*f, p + "ffn_up.weight", DType::F32, {E, F});
    expect_tensor(*f, p + "ffn_down.weight", DType::F32, {F, E});
    EXPECT_EQ(f->find_tensor(p + "attn_q.bias") != nullptr, a == "qwen2");
    if (a == "qwen2") {
      expect_tensor(*f, p + "attn_q.bias", DType::F32, {Q});
      expect_tensor(*f, p + "attn_k.bias", DType::F32, {KV});
      expect_tensor(*f, p + "attn_v.bias", DType::F32, {KV});
    }
    EXPECT_EQ(f->find_tensor(p + "attn_q_norm.weight") != nullptr, a == "gemma3");
    if (a == "gemma3") {
      expect_tensor(*f, p + "attn_q_norm.weight", DType::F32, {hd});
      expect_tensor(*f, p + "attn_k_norm.weight", DType::F32, {hd});
      expect_tensor(*f, p + "post_attention_norm.weight", DType::F32, {E});
      expect_tensor(*f, p + "post_ffw_norm.weight", DType::F32, {E});
    }
  }
  const size_t per_layer = 9 + (a == "qwen2" ? 3 : 0) + (a == "gemma3" ? 4 : 0);
  EXPECT_EQ(f->tensors().size(), 2 + per_layer * s.n_layer);

  // Values: finite, norms near one, matmul weights within the default amplitude.
  for (const auto& t : f->tensors()) {
    const auto v = as_floats(*f, t);
    const bool is_norm = t.name.find("norm") != std::string::npos;
    float bound = 1.f;
    if (t.name.find("blk.") == 0 && !is_norm && t.name.find(".bias") == std::string::npos)
      bound = std::sqrt(3.f / static_cast<float>(t.dims[0]));
    for (float x : v) {
      ASSERT_TRUE(std::isfinite(x)) << t.name;
      if (is_norm) {
        ASSERT_NEAR(x, 1.f, 0.1001f) << t.name;
      } else {
        ASSERT_LE(std::fabs(x), bound * 1.0001f) << t.name;
      }
    }
  }

  // Tokenizer metadata.
  const auto tokens = *f->get_string_array("tokenizer.ggml.tokens");
  const auto types = *f->get_int_array("tokenizer.ggml.token_type");
  ASSERT_EQ(tokens.size(), static_cast<size_t>(s.n_vocab));
  ASSERT_EQ(types.size(), tokens.size());
  EXPECT_EQ(std::set<std::string>(tokens.begin(), tokens.end()).size(), tokens.size()) << "duplicate tokens";
  EXPECT_EQ(f->get_string("tokenizer.ggml.model"), s.tokenizer);
  const int64_t bos = *f->get_int("tokenizer.ggml.bos_token_id"), eos = *f->get_int("tokenizer.ggml.eos_token_id");
  EXPECT_EQ(types[bos], 3);
  EXPECT_EQ(types[eos], 3);
  if (s.tokenizer == "gpt2") {
    EXPECT_EQ(f->get_string("tokenizer.ggml.pre"), "default");
    EXPECT_EQ(tokens[' '], "\xc4\xa0");  // "Ġ": space is byte 0x20 -> U+0120
    EXPECT_EQ(tokens['\n'], "\xc4\x8a");  // "Ċ"
    EXPECT_EQ(tokens['A'], "A");
    EXPECT_EQ(tokens[s.n_vocab - 3], "<|endoftext|>");
    EXPECT_EQ(tokens[s.n_vocab - 1], "<|im_end|>");
    EXPECT_EQ(bos, s.n_vocab - 3);
    EXPECT_EQ(f->get_bool("tokenizer.ggml.add_bos_token"), false);
    EXPECT_FALSE(f->has("tokenizer.ggml.scores"));
    // Each merge joins two tokens that exist before the token it creates.
    const auto merges = *f->get_string_array("tokenizer.ggml.merges");
    ASSERT_EQ(merges.size(), static_cast<size_t>(s.n_vocab - 259));
    std::set<std::string> known(tokens.begin(), tokens.begin() + 256);
    for (size_t i = 0; i < merges.size(); ++i) {
      const size_t sp = merges[i].find(' ');
      ASSERT_NE(sp, std::string::npos) << merges[i];
      const std::string l = merges[i].substr(0, sp), r = merges[i].substr(sp + 1);
      EXPECT_TRUE(known.count(l) && known.count(r)) << merges[i];
      EXPECT_EQ(tokens[256 + i], l + r);
      known.insert(l + r);
    }
    EXPECT_TRUE(known.count("\xc4\xa0the")) << "' the' should be among the first merges";
    EXPECT_TRUE(f->has("tokenizer.chat_template"));
  } else {
    EXPECT_EQ(tokens[0], "<unk>");
    EXPECT_EQ(types[0], 2);
    EXPECT_EQ(tokens[1], "<s>");
    EXPECT_EQ(tokens[2], "</s>");
    EXPECT_EQ(bos, 1);
    EXPECT_EQ(eos, 2);
    EXPECT_EQ(f->get_int("tokenizer.ggml.unknown_token_id"), 0);
    EXPECT_EQ(f->get_bool("tokenizer.ggml.add_bos_token"), true);
    EXPECT_EQ(tokens[3], "<0x00>");
    EXPECT_EQ(tokens[3 + 0x0A], "<0x0A>");
    EXPECT_EQ(tokens[258], "<0xFF>");
    for (int i = 3; i < 259; ++i) EXPECT_EQ(types[i], 6);
    for (int i = 259; i < s.n_vocab; ++i) EXPECT_EQ(types[i], 1);
    const auto scores = *f->get_float_array("tokenizer.ggml.scores");
    ASSERT_EQ(scores.size(), tokens.size());
    for (int i = 260; i < s.n_vocab; ++i) EXPECT_LT(scores[i], scores[i - 1]);
    const std::set<std::string> set(tokens.begin(), tokens.end());
    EXPECT_TRUE(set.count("\xe2\x96\x81the")) << "'▁the' should be a piece";
    EXPECT_TRUE(set.count("e"));
    EXPECT_FALSE(f->has("tokenizer.ggml.merges"));
  }

  // gguf-py reads the same file the same way.
  std::string py;
  ASSERT_TRUE(test::gguf_dump_python(path, &py)) << py;
  EXPECT_EQ(test::gguf_dump(*f), py);
}

INSTANTIATE_TEST_SUITE_P(ArchTokenizer, TinyModel,
                         ::testing::Combine(::testing::Values("llama", "qwen2", "gemma3"),
                                            ::testing::Values("gpt2", "llama")),
                         [](const auto& info) { return std::get<0>(info.param) + "_" + std::get<1>(info.param); });

TEST(TinyModelOptions, UntiedHalfPrecisionAndDeterminism) {
  const std::string dir = test::scratch_dir("tiny-options");
  TinyModelSpec s;
  s.tied_embeddings = false;
  s.weight_type = DType::F16;
  s.embd_type = DType::BF16;
  s.n_vocab = 400;
  test::write_tiny_model(dir + "/a.gguf", s);
  const auto f = gguf::File::open(dir + "/a.gguf");
  expect_tensor(*f, "output.weight", DType::F16, {64, 400});
  expect_tensor(*f, "token_embd.weight", DType::BF16, {64, 400});
  expect_tensor(*f, "blk.1.ffn_down.weight", DType::F16, {96, 64});
  expect_tensor(*f, "blk.1.ffn_norm.weight", DType::F32, {64});
  const auto w = as_floats(*f, *f->find_tensor("blk.0.attn_q.weight"));
  double sum2 = 0;
  for (float x : w) sum2 += x * x;
  EXPECT_NEAR(std::sqrt(sum2 / w.size()), 1.0 / std::sqrt(64.0), 0.01);  // std 1/sqrt(fan_in)

  test::write_tiny_model(dir + "/b.gguf", s);
  EXPECT_EQ(read_all(dir + "/a.gguf"), read_all(dir + "/b.gguf"));
  s.seed = 2;
  test::write_tiny_model(dir + "/c.gguf", s);
  EXPECT_NE(read_all(dir + "/a.gguf"), read_all(dir + "/c.gguf"));
  s.weight_scale = 0.5f;
  test::write_tiny_model(dir + "/d.gguf", s);
  const auto fd = gguf::File::open(dir + "/d.gguf");
  float mx = 0;
  for (float x : as_floats(*fd, *fd->find_tensor("blk.0.ffn_up.weight"))) mx = std::max(mx, std::fabs(x));
  EXPECT_GT(mx, 0.45f);
  EXPECT_LE(mx, 0.5f);
}

TEST(TinyModelOptions, QuantizedWeights) {
  const std::string dir = test::scratch_dir("tiny-quant");
  for (DType t : {DType::Q8_0, DType::Q4_0, DType::Q4_K, DType::Q6_K}) {
    SCOPED_TRACE(dtype_name(t));
    TinyModelSpec s;
    const bool k = dtype_info(t).block_size == 256;
    s.n_embd = k ? 256 : 64;
    s.n_ff = k ? 512 : 96;
    s.weight_type = t;
    s.embd_type = t;
    s.tied_embeddings = false;
    test::write_tiny_model(dir + "/m.gguf", s);
    const auto f = gguf::File::open(dir + "/m.gguf");
    expect_tensor(*f, "blk.0.ffn_down.weight", t, {s.n_ff, s.n_embd});
    expect_tensor(*f, "token_embd.weight", t, {s.n_embd, s.n_vocab});
    expect_tensor(*f, "output.weight", t, {s.n_embd, s.n_vocab});
    expect_tensor(*f, "output_norm.weight", DType::F32, {s.n_embd});
    std::string py;
    ASSERT_TRUE(test::gguf_dump_python(dir + "/m.gguf", &py)) << py;
    EXPECT_EQ(test::gguf_dump(*f), py);
  }
}

TEST(TinyModelOptions, RefusesImpossibleSpecs) {
  const std::string path = test::scratch_dir("tiny-bad") + "/m.gguf";
  auto refuses = [&](auto edit) {
    TinyModelSpec s;
    edit(s);
    EXPECT_THROW(test::write_tiny_model(path, s), std::invalid_argument);
  };
  refuses([](TinyModelSpec& s) { s.arch = "gpt-j"; });
  refuses([](TinyModelSpec& s) { s.tokenizer = "wordpiece"; });
  refuses([](TinyModelSpec& s) { s.n_vocab = 258; });
  refuses([](TinyModelSpec& s) { s.n_vocab = 100000; });  // more merges than the text has
  refuses([](TinyModelSpec& s) { s.n_head = 3; });         // 64 % 3
  refuses([](TinyModelSpec& s) { s.n_head_kv = 3; });      // 4 % 3
  refuses([](TinyModelSpec& s) { s.weight_type = DType::Q4_K; });  // rows of 64 < 256-blocks
  refuses([](TinyModelSpec& s) { s.weight_type = DType::I32; });
  refuses([](TinyModelSpec& s) { s.embd_type = DType::Q8_K; });
}

TEST(TinyVocab, LargerVocabulariesAndSizes) {
  for (int n : {259, 260, 512, 1024}) {
    const auto g = test::build_gpt2_vocab(n);
    EXPECT_EQ(g.tokens.size(), static_cast<size_t>(n));
    EXPECT_EQ(g.merges.size(), static_cast<size_t>(n - 259));
    const auto l = test::build_llama_vocab(n);
    EXPECT_EQ(l.tokens.size(), static_cast<size_t>(n));
    EXPECT_EQ(l.scores.size(), static_cast<size_t>(n));
  }
  const auto& sym = test::gpt2_byte_symbols();
  EXPECT_EQ(std::set<std::string>(sym.begin(), sym.end()).size(), 256u);
  EXPECT_EQ(sym[0], "\xc4\x80");     // U+0100
  EXPECT_EQ(sym[0xAD], "\xc5\x83");  // soft hyphen -> U+0143, the last moved byte
  EXPECT_EQ(sym[0xFF], "\xc3\xbf");  // stays U+00FF
}

}  // namespace
}  // namespace tandem
