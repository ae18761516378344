// Re-quantizing the draft's weights at load (--draft-type, engine/model/requantize.hpp):
// the type names, the rows it writes, and through the engine: the draft's matrices take
// the new type and size, greedy speculation stays token for token the target's with every
// type (CPU, a reduced draft vocabulary, the CUDA backend), and bad settings are refused.
#include <gtest/gtest.h>

#include <cstring>

#include "engine/model/model.hpp"
#include "engine/model/requantize.hpp"
#include "engine/runtime/engine_access.hpp"
#include "engine/model/transformer.hpp"
#include "kernels/cpu/quant.hpp"
#include "tandem/engine.hpp"
#include "tandem/tandem.h"
#include "tests/support/paths.hpp"
#include "tests/support/prompts.hpp"
#include "tests/support/random_blocks.hpp"
#include "tests/support/tiny_model.hpp"

namespace tandem {
namespace {

TEST(DraftType, NamesParseInAnyCaseAndBadOnesAreRefused) {
  auto type_of = [](const std::string& s) { return parse_weight_options(s).matmul_type; };
  EXPECT_EQ(type_of("keep"), std::nullopt);
  EXPECT_EQ(type_of(""), std::nullopt);
  EXPECT_EQ(type_of("q4_0"), DType::Q4_0);
  EXPECT_EQ(type_of("Q8_0"), DType::Q8_0);
  EXPECT_EQ(type_of("q5_1"), DType::Q5_1);
  EXPECT_FALSE(parse_weight_options("q4_0").wide_only);
  for (const char* a : {"auto", "AUTO"}) {
    const WeightOptions w = parse_weight_options(a);
    EXPECT_EQ(w.matmul_type, DType::Q4_0) << a;
    EXPECT_TRUE(w.wide_only) << a;
    EXPECT_EQ(weight_options_name(w), "auto");
  }
  EXPECT_EQ(weight_options_name(parse_weight_options("Q4_1")), "q4_1");
  EXPECT_EQ(weight_options_name(WeightOptions{}), "keep");
  EXPECT_FALSE(names_explicit_weight_type("auto"));
  EXPECT_FALSE(names_explicit_weight_type("keep"));
  EXPECT_FALSE(names_explicit_weight_type(""));
  EXPECT_TRUE(names_explicit_weight_type("q8_0"));
  EXPECT_EQ(type_of("q4_k"), DType::Q4_K);
  try {
    parse_weight_options("q6_k");
    ADD_FAILURE() << "q6_k accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("q4_0"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("auto"), std::string::npos) << e.what();
  }
  EXPECT_THROW(parse_weight_options("f32"), std::invalid_argument);
  EXPECT_THROW(names_explicit_weight_type("q3_k"), std::invalid_argument);
}

// "auto" takes the quantized types above 5 bits per weight, and only those: the ones that
// decode slowest per weight. 4-bit types would only lose precision; float ones stay exact.
TEST(DraftType, AutoReQuantizesTheWideQuantizedMatricesOnly) {
  for (DType t : {DType::Q5_0, DType::Q5_1, DType::Q5_K, DType::Q6_K, DType::Q8_0})
    EXPECT_TRUE(wide_quantized(t)) << dtype_name(t);
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::Q4_0, DType::Q4_1, DType::Q4_K, DType::Q2_K,
                  DType::Q3_K})
    EXPECT_FALSE(wide_quantized(t)) << dtype_name(t);
  const WeightOptions a = parse_weight_options("auto");
  EXPECT_TRUE(requantizes(a, DType::Q8_0, 64));
  EXPECT_TRUE(requantizes(a, DType::Q6_K, 256));
  EXPECT_FALSE(requantizes(a, DType::Q4_K, 256));
  EXPECT_FALSE(requantizes(a, DType::F16, 64));
  EXPECT_FALSE(requantizes(a, DType::Q8_0, 48));  // rows of partial 32-blocks keep their type
  const WeightOptions q = parse_weight_options("q4_0");
  EXPECT_TRUE(requantizes(q, DType::F16, 64));
  EXPECT_TRUE(requantizes(q, DType::Q4_K, 256));
  EXPECT_FALSE(requantizes(q, DType::Q4_0, 64));
  EXPECT_FALSE(requantizes(WeightOptions{}, DType::Q8_0, 64));
}

// Each row is the reference quantization of the row's dequantized values, whatever the
// source type and however many threads share the rows.
TEST(DraftType, RequantizedRowsAreTheReferenceOfTheDequantizedRows) {
  constexpr int64_t kRows = 150, kCols = 256;
  for (DType from : {DType::F32, DType::F16, DType::Q5_0, DType::Q4_K, DType::Q6_K}) {
    const auto src = test::random_blocks(from, kRows * kCols, 3);
    for (DType to : {DType::Q4_0, DType::Q8_0, DType::Q5_1}) {
      SCOPED_TRACE(std::string(dtype_name(from)) + " -> " + dtype_name(to));
      const auto got = requantize_rows(from, src.data(), kRows, kCols, to, 3);
      const auto one = requantize_rows(from, src.data(), kRows, kCols, to, 1);
      EXPECT_EQ(got, one);
      ASSERT_EQ(got.size(), row_bytes(to, kCols) * kRows);
      std::vector<float> x(kCols);
      std::vector<uint8_t> want(row_bytes(to, kCols));
      for (int64_t r = 0; r < kRows; r += 37) {
        kernels::cpu::dequantize_row_ref(from, src.data() + r * row_bytes(from, kCols), x.data(), kCols);
        kernels::cpu::quantize_row_ref(to, x.data(), want.data(), kCols);
        EXPECT_EQ(0, std::memcmp(got.data() + r * want.size(), want.data(), want.size())) << "row " << r;
      }
    }
  }
  const auto src = test::random_blocks(DType::F32, 64, 1);
  EXPECT_THROW(requantize_rows(DType::F32, src.data(), 1, 64, DType::Q4_K), std::invalid_argument);
}

const test::TinyPair& pair() {
  static const test::TinyPair p = [] {
    test::TinyModelSpec t;
    t.arch = "qwen2";
    t.tied_embeddings = false;
    t.seed = 12;
    return test::write_tiny_pair(test::scratch_dir("draft_type"), t);
  }();
  return p;
}

// A draft over pair()'s vocabulary with its matrices stored as `t` (random blocks: it
// rarely agrees, which the tests below do not need), written once into `dir`.
std::string typed_draft(const std::string& dir, DType t) {
  test::TinyModelSpec d;
  d.arch = "qwen2";
  d.tied_embeddings = false;
  d.seed = 12;
  d.weight_type = t;
  const std::string path = dir + "/draft_" + dtype_name(t) + ".gguf";
  test::write_tiny_model(path, d);
  return path;
}

std::unique_ptr<Engine> load(const std::string& type, const std::string& device = "cpu", int32_t vocab = 0) {
  LoadOptions o;
  o.model_path = pair().target;
  o.draft_model_path = pair().close_draft;
  o.threads = 1;
  o.context = 96;
  o.device = device;
  o.draft_type = type;
  o.draft_vocab = vocab;
  return Engine::load(o);
}

GenerateOptions greedy(int n, DraftMode mode) { return test::greedy_options(n, mode, 4); }

TEST(DraftType, TheDraftsMatricesTakeTheTypeAndTheTargetIsUntouched) {
  auto keep = load("keep");
  auto q4 = load("q4_0");
  EXPECT_EQ(keep->info().draft_type, "keep");
  EXPECT_EQ(q4->info().draft_type, "q4_0");
  EngineParts kp = EngineAccess::parts(*keep), qp = EngineAccess::parts(*q4);
  const Model& d = qp.draft->model();
  for (const LayerWeights& L : d.layers)
    for (const kernels::Tensor* w : {&L.wq, &L.wk, &L.wv, &L.wo, &L.w_gate, &L.w_up, &L.w_down})
      EXPECT_EQ(w->type, DType::Q4_0);
  EXPECT_EQ(d.output.type, DType::Q4_0);
  EXPECT_EQ(d.tok_embd.type, DType::F16);  // not the head (untied): kept
  EXPECT_EQ(d.layers[0].attn_norm.type, DType::F32);
  EXPECT_LT(d.weight_bytes(), kp.draft->model().weight_bytes() / 2);  // F16 → 4.5 bits
  EXPECT_EQ(qp.target.model().layers[0].wq.type, kp.target.model().layers[0].wq.type);
  EXPECT_EQ(qp.target.model().weight_bytes(), kp.target.model().weight_bytes());
}

void expect_lossless(Engine& e, const std::string& what) {
  int64_t accepted = 0;
  for (uint32_t seed : {1u, 2u, 3u}) {
    const auto prompt = test::random_prompt(10, seed, 7);
    const GenerateResult plain = e.generate_tokens(prompt, greedy(32, DraftMode::None));
    const GenerateResult spec = e.generate_tokens(prompt, greedy(32, DraftMode::Model));
    EXPECT_EQ(spec.tokens, plain.tokens) << what << " seed " << seed;
    EXPECT_GT(spec.speculative.drafted_tokens, 0) << what;
    accepted += spec.speculative.accepted_tokens;
  }
  EXPECT_GT(accepted, 0) << what << ": a re-quantized close draft should still agree sometimes";
}

TEST(DraftType, GreedySpeculationIsLosslessWithEveryType) {
  for (const char* t : {"q4_0", "q4_1", "q5_0", "q5_1", "q8_0"}) {
    auto e = load(t);
    expect_lossless(*e, t);
  }
  auto reduced = load("q4_0", "cpu", 160);  // the reduced head's rows re-quantized too
  expect_lossless(*reduced, "q4_0 with a reduced draft vocabulary");
}

// The default ("auto") through the engine: a Q8_0 draft's matrices become Q4_0, a Q4_1
// draft's and the F16 close draft's stay as stored; greedy speculation stays lossless.
TEST(DraftType, TheDefaultAutoTakesOnlyTheWideDrafts) {
  const std::string dir = test::scratch_dir("draft_type_auto");
  auto draft_of = [&](DType t) { return typed_draft(dir, t); };
  struct Case {
    std::string draft;
    DType stored, loaded;
  };
  const Case cases[] = {{draft_of(DType::Q8_0), DType::Q8_0, DType::Q4_0},
                        {draft_of(DType::Q5_0), DType::Q5_0, DType::Q4_0},
                        {draft_of(DType::Q4_1), DType::Q4_1, DType::Q4_1},
                        {pair().close_draft, DType::F16, DType::F16}};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.draft);
    LoadOptions o;  // draft_type left at its default
    EXPECT_EQ(o.draft_type, "auto");
    o.model_path = pair().target;
    o.draft_model_path = c.draft;
    o.threads = 1;
    o.context = 96;
    auto e = Engine::load(o);
    EXPECT_EQ(e->info().draft_type, "auto");
    const Model& d = EngineAccess::parts(*e).draft->model();
    for (const LayerWeights& L : d.layers)
      for (const kernels::Tensor* w : {&L.wq, &L.wk, &L.wv, &L.wo, &L.w_gate, &L.w_up, &L.w_down})
        EXPECT_EQ(w->type, c.loaded) << "stored " << dtype_name(c.stored);
    EXPECT_EQ(d.output.type, c.loaded);
    EXPECT_EQ(EngineAccess::parts(*e).target.model().layers[0].wq.type, DType::F32);  // the target as stored
    for (uint32_t seed : {1u, 2u}) {
      const auto prompt = test::random_prompt(10, seed, 7);
      const GenerateResult plain = e->generate_tokens(prompt, greedy(24, DraftMode::None));
      const GenerateResult spec = e->generate_tokens(prompt, greedy(24, DraftMode::Model));
      EXPECT_EQ(spec.tokens, plain.tokens) << "seed " << seed;
      EXPECT_GT(spec.speculative.drafted_tokens, 0);
    }
  }
}

TEST(DraftType, GreedySpeculationIsLosslessOnEmulatedCuda) {
  auto e = load("q8_0", "cuda-emulated");
  EXPECT_EQ(e->info().draft_type, "q8_0");
  expect_lossless(*e, "q8_0 on cuda-emulated");
  // auto on the device: a Q8_0 draft's matrices go up as Q4_0.
  const std::string q8 = typed_draft(test::scratch_dir("draft_type_auto_cuda"), DType::Q8_0);
  LoadOptions o;
  o.model_path = pair().target;
  o.draft_model_path = q8;
  o.threads = 1;
  o.context = 96;
  o.device = "cuda-emulated";
  auto a = Engine::load(o);
  EXPECT_EQ(a->info().draft_type, "auto");
  EXPECT_EQ(EngineAccess::parts(*a).draft->model().layers[0].w_up.type, DType::Q4_0);
  for (uint32_t seed : {1u, 2u}) {
    const auto prompt = test::random_prompt(10, seed, 7);
    EXPECT_EQ(a->generate_tokens(prompt, greedy(24, DraftMode::Model)).tokens,
              a->generate_tokens(prompt, greedy(24, DraftMode::None)).tokens)
        << "seed " << seed;
  }
}

TEST(DraftType, BadSettingsAreRefusedAtLoad) {
  EXPECT_THROW(load("q6_k"), std::invalid_argument);
  LoadOptions o;
  o.model_path = pair().target;
  o.draft_type = "q4_0";  // no draft model
  EXPECT_THROW(Engine::load(o), std::invalid_argument);
  for (const char* fine : {"auto", "keep"}) {  // the default, and "as stored", need no draft
    o.draft_type = fine;
    EXPECT_NO_THROW(Engine::load(o)) << fine;
  }
  // Through the C API: the type in the load parameters and in the model info.
  tandem_load_params p;
  ASSERT_EQ(tandem_load_params_init(&p, sizeof p), TANDEM_OK);
  p.model_path = pair().target.c_str();
  p.draft_model_path = pair().close_draft.c_str();
  p.threads = 1;
  p.context = 64;
  p.draft_type = "q8_0";
  tandem_engine* engine = nullptr;
  ASSERT_EQ(tandem_engine_load(&p, &engine), TANDEM_OK) << tandem_last_error();
  tandem_model_info info;
  info.struct_size = sizeof info;
  ASSERT_EQ(tandem_engine_info(engine, &info), TANDEM_OK);
  EXPECT_STREQ(info.draft_type, "q8_0");
  tandem_engine_free(engine);
  p.draft_type = nullptr;  // the default: auto
  ASSERT_EQ(tandem_engine_load(&p, &engine), TANDEM_OK) << tandem_last_error();
  ASSERT_EQ(tandem_engine_info(engine, &info), TANDEM_OK);
  EXPECT_STREQ(info.draft_type, "auto");
  tandem_engine_free(engine);
  p.draft_type = "q3_k";
  EXPECT_NE(tandem_engine_load(&p, &engine), TANDEM_OK);
  EXPECT_NE(std::string(tandem_last_error()).find("q4_0"), std::string::npos) << tandem_last_error();
}

}  // namespace
}  // namespace tandem
