// Hugging Face model folders (engine/hf): the safetensors reader and its checks on corrupt
// files; tiny folders holding the same weights as a GGUF give the same logits bit for bit
// (every architecture, F32/F16/BF16, sharded or not), the same tokens from tokenizer.json
// (byte-level and SentencePiece-style), the same chat template and special tokens; an HF
// target with a GGUF or HF draft gives the target's greedy output; `weight_type` quantizes a
// float folder at load exactly as it would the GGUF; bad folders get errors naming the
// problem; NFC normalization on known cases. The real Qwen2.5-Coder folders are tested against
// transformers and tokenizers in tests/python/test_hf_models.py.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>

#include "engine/api/chat_prompt.hpp"
#include "engine/hf/model_file.hpp"
#include "engine/hf/safetensors.hpp"
#include "engine/text/tokenizer.hpp"
#include "engine/text/unicode_nfc.hpp"
#include "tandem/engine.hpp"
#include "tests/support/forward_check.hpp"
#include "tests/support/paths.hpp"
#include "tests/support/prompts.hpp"
#include "tests/support/tiny_hf.hpp"
#include "tests/support/tiny_vocab.hpp"

namespace tandem {
namespace {

namespace fs = std::filesystem;
using test::StTensor;

std::vector<uint8_t> f32_bytes(std::vector<float> v) {
  std::vector<uint8_t> b(v.size() * 4);
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}
void write_text(const std::string& path, const std::string& s) { std::ofstream(path, std::ios::binary) << s; }

// One thread, a small context: what every engine here needs.
LoadOptions options(const std::string& model, const std::string& draft = "", int32_t context = 64) {
  LoadOptions o;
  o.threads = 1;
  o.context = context;
  o.model_path = model;
  o.draft_model_path = draft;
  return o;
}

// The message of what `fn` throws ("" when it does not throw).
std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

// ---- safetensors -------------------------------------------------------------------------------

TEST(Safetensors, ReadsWhatTheFormatDefines) {
  const std::string dir = test::scratch_dir("st-read");
  std::vector<StTensor> ts = {{"a", "F32", {2, 3}, f32_bytes({1, 2, 3, 4, 5, 6})},
                              {"b.bias", "BF16", {4}, {0, 0x3f, 0, 0x40, 0, 0xc0, 0x80, 0x3f}},
                              {"empty", "I64", {0, 5}, {}},
                              {"c", "U8", {3}, {7, 8, 9}}};
  test::write_safetensors(dir + "/m.safetensors", ts);
  const auto f = st::File::open(dir + "/m.safetensors");
  ASSERT_EQ(f->tensors().size(), 4u);
  EXPECT_EQ(f->metadata().at("format"), "pt");
  const st::TensorInfo* a = f->find("a");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(a->numel(), 6);
  EXPECT_EQ(std::memcmp(f->data(*a), ts[0].bytes.data(), 24), 0);
  const st::TensorInfo* b = f->find("b.bias");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->dtype, st::Dtype::BF16);
  EXPECT_EQ(st::engine_type(b->dtype), DType::BF16);
  EXPECT_EQ(std::memcmp(f->data(*b), ts[1].bytes.data(), 8), 0);
  EXPECT_EQ(f->find("empty")->numel(), 0);
  EXPECT_FALSE(st::engine_type(f->find("c")->dtype).has_value());
  EXPECT_EQ(f->find("nope"), nullptr);
}

TEST(Safetensors, CorruptFilesGetAnErrorNamingTheProblem) {
  const std::vector<StTensor> good = {{"w", "F32", {2, 2}, f32_bytes({1, 2, 3, 4})}, {"v", "F16", {2}, {0, 0x3c, 0, 0x40}}};
  const std::vector<uint8_t> ok = test::safetensors_bytes(good);
  ASSERT_NO_THROW(st::File::from_memory(ok.data(), ok.size()));
  // A header and `data` bytes of data.
  auto header_of = [](std::string json, size_t data = 0) {
    while (json.size() % 8) json += ' ';
    std::vector<uint8_t> b(8 + json.size() + data);
    for (int i = 0; i < 8; ++i) b[static_cast<size_t>(i)] = static_cast<uint8_t>(json.size() >> (8 * i));
    std::memcpy(b.data() + 8, json.data(), json.size());
    return b;
  };
  struct Case {
    const char* name;
    std::vector<uint8_t> bytes;
    const char* expect;
  };
  std::vector<uint8_t> truncated = ok;
  truncated.resize(ok.size() - 3);
  std::vector<uint8_t> huge_len = ok;
  huge_len[5] = 0x7f;
  std::vector<uint8_t> data16 = header_of(R"({"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]}})", 16);
  const std::vector<Case> cases = {
      {"empty file", {}, "truncated file"},
      {"short", {1, 2, 3}, "truncated file"},
      {"truncated data", truncated, "truncated file"},
      {"header past the end", huge_len, "header length"},
      {"not JSON", header_of("{\"w\": [1, 2"), "not valid JSON"},
      {"not an object", header_of("[1, 2]"), "not a JSON object"},
      {"unknown dtype", header_of(R"({"w":{"dtype":"Q4","shape":[1],"data_offsets":[0,1]}})"), "unknown dtype"},
      {"no shape", header_of(R"({"w":{"dtype":"F32","data_offsets":[0,4]}})"), "no shape"},
      {"negative dim", header_of(R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})"), "negative"},
      {"wrong size", header_of(R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 16), "need"},
      {"reversed", header_of(R"({"w":{"dtype":"U8","shape":[0],"data_offsets":[4,0]}})"), "reversed"},
      {"past the data", header_of(R"({"w":{"dtype":"U8","shape":[2,2],"data_offsets":[0,4]}})", 3), "truncated file"},
      {"absurd dimension", header_of(R"({"w":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}})"), "cannot fit"},
      {"overflowing shape", header_of(R"({"w":{"dtype":"F32","shape":[4294967296,4294967296,4294967296],"data_offsets":[0,4]}})"),
       "cannot fit"},
      {"bad metadata", header_of(R"({"__metadata__":{"a":1}})"), "not a string"},
  };
  for (const Case& c : cases) {
    std::vector<uint8_t> b = c.bytes;
    const std::string err = error_of([&] { st::File::from_memory(b.data(), b.size(), "x.safetensors"); });
    EXPECT_NE(err.find(c.expect), std::string::npos) << c.name << ": " << err;
    EXPECT_EQ(err.rfind("x.safetensors: ", 0), 0u) << c.name << ": " << err;
  }
  // Two tensors sharing bytes.
  std::vector<uint8_t> overlap = header_of(
      R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", 12);
  EXPECT_NE(error_of([&] { st::File::from_memory(overlap.data(), overlap.size()); }).find("overlap"), std::string::npos);
  EXPECT_NO_THROW(st::File::from_memory(data16.data(), data16.size()));
}

// ---- tiny folders against their GGUF -----------------------------------------------------------

struct Tiny {
  std::string gguf, dir;
};
Tiny tiny(const std::string& name, test::TinyModelSpec spec, int shards = 1) {
  const std::string d = test::scratch_dir("hf-" + name);
  Tiny t{d + "/model.gguf", d + "/folder"};
  test::write_tiny_hf(t.dir, t.gguf, spec, {shards});
  return t;
}

TEST(HfFolder, SameLogitsAsTheGgufBitForBit) {
  struct Case {
    const char* name;
    const char* arch;
    DType type;
    bool tied;
    int shards;
  };
  for (const Case& c : {Case{"llama_f32", "llama", DType::F32, true, 1}, Case{"qwen2_f32", "qwen2", DType::F32, false, 3},
                        Case{"gemma3_f32", "gemma3", DType::F32, true, 1}, Case{"qwen2_bf16", "qwen2", DType::BF16, false, 2},
                        Case{"llama_f16", "llama", DType::F16, false, 1}}) {
    SCOPED_TRACE(c.name);
    test::TinyModelSpec s;
    s.arch = c.arch;
    s.weight_type = c.type;
    s.embd_type = c.type;
    s.tied_embeddings = c.tied;
    s.n_layer = c.arch == std::string("gemma3") ? 7 : 2;  // a global layer after six local ones
    if (c.arch == std::string("gemma3")) s.tokenizer = "llama";
    const Tiny t = tiny(c.name, s, c.shards);
    const std::vector<int32_t> tokens = test::random_prompt(24, 5, 1);
    const std::vector<float> want = test::engine_logits(t.gguf, tokens, DType::F32, 1);
    const std::vector<float> got = test::engine_logits(t.dir, tokens, DType::F32, 1);
    ASSERT_FALSE(want.empty());
    EXPECT_TRUE(test::same_bits(got, want, static_cast<int64_t>(want.size() / tokens.size())));
  }
}

void expect_same_tokenizer(const Tiny& t, const std::vector<std::string>& texts) {
  const auto a = Tokenizer::from_gguf(*gguf::File::open(t.gguf));
  const auto b = Tokenizer::from_gguf(*open_model_file(t.dir, false));
  ASSERT_EQ(a->n_vocab(), b->n_vocab());
  EXPECT_EQ(a->bos(), b->bos());
  EXPECT_EQ(a->eos(), b->eos());
  EXPECT_EQ(a->add_bos(), b->add_bos());
  for (int32_t id = 0; id < a->n_vocab(); ++id) {
    ASSERT_EQ(a->token_text(id), b->token_text(id)) << id;
    ASSERT_EQ(a->token_type(id), b->token_type(id)) << id;
  }
  const bool spm = a->model() == "llama";
  for (const std::string& s : texts)
    for (bool special : {false, true}) {
      // An empty text: the GGUF's SentencePiece still gets its dummy prefix; tokenizers'
      // Prepend normalizer has nothing to prepend to.
      if (spm && s.empty()) {
        EXPECT_TRUE(b->encode(s, special, special).size() == (special && b->add_bos() ? 1u : 0u));
        continue;
      }
      const auto ia = a->encode(s, special, special), ib = b->encode(s, special, special);
      EXPECT_EQ(ia, ib) << "'" << s << "'";
      EXPECT_EQ(a->decode(ia), b->decode(ib));
    }
}

std::vector<std::string> sample_texts() {
  std::vector<std::string> out = {"", " ", "  hello  world\n\n\tx", "def f(x):\n    return x * 2  # ok",
                                  "<|im_start|>user\nhi<|im_end|>", "naïve café — 日本語 🙂", "123456 3.14159"};
  const std::string& text = test::tiny_training_text();
  for (size_t i = 0; i + 80 < text.size() && out.size() < 60; i += 97) out.push_back(text.substr(i, 80));
  return out;
}

TEST(HfFolder, TokenizerJsonGivesTheGgufsTokens) {
  test::TinyModelSpec s;
  s.arch = "qwen2";
  s.n_vocab = 600;
  expect_same_tokenizer(tiny("tok-bpe", s), sample_texts());
  s.arch = "llama";
  s.tokenizer = "llama";
  expect_same_tokenizer(tiny("tok-spm", s), sample_texts());
}

TEST(HfFolder, ChatTemplateAndSpecialTokensComeFromTheTokenizerConfig) {
  test::TinyModelSpec s;
  s.arch = "qwen2";
  const Tiny t = tiny("chat", s);
  LoadOptions o = options(t.gguf);
  const auto eg = Engine::load(o);
  o.model_path = t.dir;
  const auto eh = Engine::load(o);
  const std::vector<ChatMessage> msgs = {{"system", "be brief"}, {"user", "hello there"}};
  const ChatPrompt pg = ChatPrompt::from_model(t.gguf, *eg), ph = ChatPrompt::from_model(t.dir, *eh);
  EXPECT_EQ(pg.render(msgs), ph.render(msgs));
  EXPECT_EQ(pg.tokenize(*eg, pg.render(msgs)), ph.tokenize(*eh, ph.render(msgs)));
  EXPECT_EQ(eh->info().architecture, "qwen2");
}

TEST(HfFolder, SpeculationWithAFolderTargetGivesTheTargetsGreedyOutput) {
  test::TinyModelSpec s;
  s.arch = "qwen2";
  s.tied_embeddings = false;
  s.seed = 3;
  const std::string d = test::scratch_dir("hf-spec");
  const test::TinyPair p = test::write_tiny_pair(d, s);
  test::gguf_to_tiny_hf(p.target, d + "/target-hf");
  test::gguf_to_tiny_hf(p.close_draft, d + "/close-hf");
  for (const std::string& draft : {p.close_draft, d + "/close-hf"}) {
    SCOPED_TRACE(draft);
    const auto e = Engine::load(options(d + "/target-hf", draft, 256));
    int64_t accepted = 0;
    for (uint32_t seed = 0; seed < 4; ++seed) {
      const std::vector<int32_t> prompt = test::random_prompt(5 + 3 * static_cast<int>(seed), seed, 1);
      GenerateOptions g;
      g.max_tokens = 32;
      g.sampling.temperature = 0.0f;
      g.ignore_eos = true;
      const GenerateResult plain = e->generate_tokens(prompt, g);
      for (int k : {1, 3, 6}) {
        g.speculative.mode = DraftMode::Model;
        g.speculative.draft_max = k;
        const GenerateResult spec = e->generate_tokens(prompt, g);
        ASSERT_EQ(spec.tokens, plain.tokens) << "k " << k;
        accepted += spec.speculative.accepted_tokens;
      }
      g.speculative = {};
    }
    EXPECT_GT(accepted, 0) << "the close draft should agree sometimes";
  }
}

// Pairing reads the vocabularies of both formats alike: a draft of another vocabulary is
// refused whichever of the two is a folder.
TEST(HfFolder, PairingRefusesAnotherVocabularyInEitherFormat) {
  test::TinyModelSpec s;
  s.arch = "qwen2";
  const Tiny bpe = tiny("pair-bpe", s);
  s.arch = "llama";
  s.tokenizer = "llama";
  const Tiny spm = tiny("pair-spm", s);
  for (const auto& [target, draft] : {std::pair{bpe.dir, spm.gguf}, std::pair{bpe.gguf, spm.dir}, std::pair{bpe.dir, spm.dir}}) {
    const std::string err = error_of([&, t = target, d = draft] { Engine::load(options(t, d)); });
    EXPECT_NE(err.find("tokenizer types differ"), std::string::npos) << target << " + " << draft << ": " << err;
  }
}

TEST(HfFolder, WeightTypeQuantizesAFloatFolderAsItWouldTheGguf) {
  test::TinyModelSpec s;
  s.arch = "llama";
  s.weight_type = DType::BF16;
  s.embd_type = DType::BF16;
  s.tied_embeddings = false;
  const Tiny t = tiny("weight-type", s);
  LoadOptions o = options(t.dir, "", 128);
  o.weight_type = "q8_0";
  const auto eh = Engine::load(o);
  o.model_path = t.gguf;
  const auto eg = Engine::load(o);
  EXPECT_EQ(eh->info().weight_type, "q8_0");
  o.weight_type = "keep";
  const auto kept = Engine::load(o);
  EXPECT_EQ(kept->info().weight_type, "keep");
  EXPECT_LT(eh->info().weight_bytes, kept->info().weight_bytes);
  GenerateOptions g;
  g.max_tokens = 24;
  g.sampling.temperature = 0.0f;
  g.ignore_eos = true;
  const std::vector<int32_t> prompt = test::random_prompt(9, 2, 1);
  EXPECT_EQ(eh->generate_tokens(prompt, g).tokens, eg->generate_tokens(prompt, g).tokens);
  o.weight_type = "auto";
  EXPECT_NE(error_of([&] { Engine::load(o); }).find("for drafts"), std::string::npos);
}

// The CUDA backend (under the SIMT emulator) reads a folder's bf16 matrices as stored, as it
// reads the GGUF's: the same greedy output, and speculation with a GGUF draft does not change it.
TEST(HfFolder, CudaBackendRunsAFolderAsItRunsTheGguf) {
  test::TinyModelSpec s;
  s.arch = "qwen2";
  s.weight_type = DType::BF16;
  s.embd_type = DType::BF16;
  s.tied_embeddings = false;
  s.n_layer = 1;
  const Tiny t = tiny("cuda", s);
  LoadOptions o = options(t.gguf);
  o.device = "cuda-emulated";
  const auto eg = Engine::load(o);
  o.model_path = t.dir;
  o.draft_model_path = t.gguf;
  const auto eh = Engine::load(o);
  ASSERT_NE(eh->info().backend.find("cuda-emulated"), std::string::npos) << eh->info().backend;
  GenerateOptions g;
  g.max_tokens = 12;
  g.sampling.temperature = 0.0f;
  g.ignore_eos = true;
  const std::vector<int32_t> prompt = test::random_prompt(6, 4, 1);
  const GenerateResult want = eg->generate_tokens(prompt, g);
  EXPECT_EQ(eh->generate_tokens(prompt, g).tokens, want.tokens);
  g.speculative.mode = DraftMode::Model;
  g.speculative.draft_max = 3;
  const GenerateResult spec = eh->generate_tokens(prompt, g);
  EXPECT_EQ(spec.tokens, want.tokens);
  EXPECT_GT(spec.speculative.accepted_tokens, 0) << "a draft of the same weights should agree";
}

// ---- bad folders --------------------------------------------------------------------------------

TEST(HfFolder, BadFoldersGetAnErrorNamingTheProblem) {
  test::TinyModelSpec s;
  s.arch = "qwen2";
  s.tied_embeddings = false;
  const Tiny base = tiny("bad-base", s, 2);
  struct Case {
    const char* name;
    std::function<void(const std::string&)> spoil;
    const char* expect;
  };
  auto edit = [](const std::string& file, const std::string& from, const std::string& to) {
    std::string t = read_text(file);
    const size_t at = t.find(from);
    if (at == std::string::npos) throw std::logic_error("fixture lacks " + from);
    write_text(file, t.replace(at, from.size(), to));
  };
  const std::vector<Case> cases = {
      {"no config", [](const std::string& d) { fs::remove(d + "/config.json"); }, "no config.json"},
      {"config not JSON", [](const std::string& d) { write_text(d + "/config.json", "{\"hidden_size\": "); },
       "not valid JSON"},
      {"unknown architecture",
       [&](const std::string& d) { edit(d + "/config.json", "Qwen2ForCausalLM", "MambaForCausalLM"); },
       "unsupported architecture 'MambaForCausalLM'"},
      {"rope scaling",
       [&](const std::string& d) { edit(d + "/config.json", "\"hidden_act\"", "\"rope_scaling\":{\"type\":\"yarn\"},\"hidden_act\""); },
       "RoPE scaling"},
      {"vocab_size not the embedding's rows",
       [&](const std::string& d) { edit(d + "/config.json", "\"vocab_size\":320", "\"vocab_size\":321"); },
       "config.json's vocab_size is 321"},
      {"Metaspace after SentencePiece's normalizer",
       [&](const std::string& d) {
         edit(d + "/tokenizer.json", "\"normalizer\":null",
              "\"normalizer\":{\"type\":\"Replace\",\"pattern\":{\"String\":\" \"},\"content\":\"\u2581\"}");
         edit(d + "/tokenizer.json", "\"pre_tokenizer\":{\"type\":\"ByteLevel\"", "\"pre_tokenizer\":{\"type\":\"Metaspace\"");
       },
       "pre-tokenizer 'Metaspace' after SentencePiece's normalizer is not supported"},
      {"wrong hidden size",
       [&](const std::string& d) { edit(d + "/config.json", "\"hidden_size\":64", "\"hidden_size\":80"); },
       "wrong shape"},
      {"no tokenizer", [](const std::string& d) { fs::remove(d + "/tokenizer.json"); }, "tokenizer.json: missing"},
      {"WordPiece tokenizer", [&](const std::string& d) { edit(d + "/tokenizer.json", "\"BPE\"", "\"WordPiece\""); },
       "WordPiece"},
      {"unknown pre-tokenizer",
       [&](const std::string& d) { edit(d + "/tokenizer.json", "\"pre_tokenizer\":{\"type\":\"ByteLevel\"", "\"pre_tokenizer\":{\"type\":\"Whitespace\""); },
       "pre-tokenizer"},
      {"no weights",
       [](const std::string& d) {
         for (const auto& e : fs::directory_iterator(d))
           if (e.path().string().find("safetensors") != std::string::npos) fs::remove(e.path());
       },
       "no weights"},
      {"missing shard", [](const std::string& d) { fs::remove(d + "/model-00002-of-00002.safetensors"); }, "missing shard"},
      {"truncated shard",
       [](const std::string& d) {
         const std::string p = d + "/model-00001-of-00002.safetensors";
         fs::resize_file(p, fs::file_size(p) - 100);
       },
       "truncated file"},
      {"tensor not where the index says",
       [&](const std::string& d) { edit(d + "/model.safetensors.index.json", "model-00002-of-00002", "model-00001-of-00002"); },
       "is missing (the index puts it here)"},
      {"no lm_head though untied",
       [&](const std::string& d) { edit(d + "/model.safetensors.index.json", "\"lm_head.weight\"", "\"lm_head.weight_x\""); },
       "is missing"},
  };
  for (const Case& c : cases) {
    const std::string d = test::scratch_dir(std::string("hf-bad-") + std::to_string(&c - cases.data()));
    fs::copy(base.dir, d, fs::copy_options::recursive | fs::copy_options::overwrite_existing);
    c.spoil(d);
    const std::string err = error_of([&] { Engine::load(options(d)); });
    EXPECT_NE(err.find(c.expect), std::string::npos) << c.name << ": " << err;
  }
  // One-file checkpoints holding a tensor of an integer type where a weight goes, and one the
  // architecture does not have.
  const std::vector<std::pair<StTensor, const char*>> odd = {
      {{"model.norm.weight", "I64", {64}, std::vector<uint8_t>(512)}, "dtype I64, which is not a weight type"},
      {{"model.layers.0.mlp.experts.0.w1", "F32", {2}, f32_bytes({1, 2})}, "not part of a qwen2 model"}};
  for (const auto& [tensor, expect] : odd) {
    const std::string d = test::scratch_dir("hf-bad-tensor");
    fs::copy(base.dir, d, fs::copy_options::recursive | fs::copy_options::overwrite_existing);
    for (const char* f : {"model.safetensors.index.json", "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"})
      fs::remove(d + "/" + f);
    test::write_safetensors(d + "/model.safetensors", {tensor});
    const std::string err = error_of([&] { Engine::load(options(d)); });
    EXPECT_NE(err.find(expect), std::string::npos) << err;
  }
}

// ---- NFC ----------------------------------------------------------------------------------------

TEST(Nfc, ComposesReordersAndLeavesNfcTextAlone) {
  using utf8::nfc;
  EXPECT_EQ(nfc("plain ascii"), "plain ascii");
  EXPECT_EQ(nfc("e\u0301"), "\u00e9");                          // e + acute → é
  EXPECT_EQ(nfc("\u00e9"), "\u00e9");                           // already composed
  EXPECT_EQ(nfc("\u212b"), "\u00c5");                           // ANGSTROM SIGN, a singleton → Å
  EXPECT_EQ(nfc("a\u0323\u0302"), "\u1ead");                    // dot below + circumflex → ậ
  EXPECT_EQ(nfc("a\u0302\u0323"), "\u1ead");                    // the same, reordered by class first
  EXPECT_EQ(nfc("\u1100\u1161\u11a8"), "\uac01");               // Hangul L V T → 각
  EXPECT_EQ(nfc("\uac00\u11a8"), "\uac01");                     // LV + T
  EXPECT_EQ(nfc("\u0958"), "\u0915\u093c");                     // a composition exclusion stays decomposed
  EXPECT_EQ(nfc("a\u0301\u0301"), "\u00e1\u0301");              // the second acute is blocked by the first
  EXPECT_EQ(nfc("\u0301e"), "\u0301e");                         // a leading mark has nothing to join
  EXPECT_EQ(nfc(">\u0338"), "\u226f");                          // NOT GREATER-THAN
  EXPECT_EQ(nfc("日本語 🙂"), "日本語 🙂");
}

TEST(Nfc, TheTokenizerNormalizesTextButNotSpecialTokens) {
  test::TinyModelSpec s;
  s.arch = "qwen2";
  const Tiny t = tiny("nfc", s);
  std::string tj = read_text(t.dir + "/tokenizer.json");
  tj.replace(tj.find("\"normalizer\":null"), 17, "\"normalizer\":{\"type\":\"NFC\"}");
  write_text(t.dir + "/tokenizer.json", tj);
  const auto tok = Tokenizer::from_gguf(*open_model_file(t.dir, false));
  EXPECT_EQ(tok->encode("caf\u0065\u0301", false, false), tok->encode("caf\u00e9", false, false));
  // The special token stays whole: NFC is applied to the text between special tokens.
  const auto ids = tok->encode("<|im_end|>\u0338", false, true);
  ASSERT_FALSE(ids.empty());
  EXPECT_EQ(tok->token_text(ids[0]), "<|im_end|>");
}

}  // namespace
}  // namespace tandem
