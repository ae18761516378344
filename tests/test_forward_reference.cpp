// The engine's forward pass against the independent NumPy reference, on tiny random
// models of every architecture (several weight types) and on the real SmolLM2-135M.
#include <gtest/gtest.h>

#include "engine/forward.hpp"
#include "tests/support/forward_check.hpp"
#include "tests/support/paths.hpp"
#include "tests/support/tiny_model.hpp"

namespace tandem {
namespace {

using test::compare_logits;

std::vector<int32_t> some_tokens(int n, int vocab, uint32_t seed) {
  std::vector<int32_t> t;
  uint32_t x = seed;
  for (int i = 0; i < n; ++i) {
    x = x * 1664525u + 1013904223u;
    t.push_back(static_cast<int32_t>((x >> 8) % static_cast<uint32_t>(vocab)));
  }
  return t;
}

struct Case {
  std::string arch;
  DType wtype;
  double tol;  // on max |diff| relative to the RMS of the reference logits
};
bool quantized(DType t) { return dtype_info(t).block_size > 1; }

class TinyForward : public ::testing::TestWithParam<Case> {};

TEST_P(TinyForward, MatchesNumpyReference) {
  const Case& c = GetParam();
  test::TinyModelSpec spec;
  spec.arch = c.arch;
  spec.weight_type = c.wtype;
  spec.embd_type = c.wtype;
  spec.tied_embeddings = c.arch != "qwen2";
  spec.n_embd = 256;  // a whole number of 256-element K-quant blocks
  spec.n_ff = 512;
  spec.n_head = 4;
  spec.n_head_kv = 2;
  spec.seed = 7;
  const std::string path = test::scratch_dir("fwd-" + c.arch + dtype_name(c.wtype)) + "/tiny.gguf";
  test::write_tiny_model(path, spec);
  const auto tokens = some_tokens(19, spec.n_vocab, 3);  // > sliding window, several KV blocks
  const auto ours = test::engine_logits(path, tokens);
  // Quantized weights: the engine quantizes activations to int8 on the fly; the reference
  // emulates that rounding, so the tolerance stays tight (float accumulation order only).
  const auto ref = test::reference_logits(path, tokens, quantized(c.wtype));
  const auto d = compare_logits(ours, ref, spec.n_vocab);
  // Float types: value by value. Quantized: an activation that lands on a rounding boundary
  // can round the other way in the reference, so a few logits move by more than the rest
  // (which ones depends on float rounding anywhere upstream, e.g. in attention: llama Q8_0
  // measured 3.05% of the logit RMS with the tiled attention, under 3% with the per-position
  // one, although the tiled one is the more accurate of the two in tests/test_cpu_ops.cpp).
  const double max_tol = quantized(c.wtype) ? 4e-2 : c.tol;
  EXPECT_LE(d.max_abs, max_tol * d.scale) << "max |diff| " << d.max_abs << ", RMS diff " << d.rms << ", logit RMS " << d.scale;
  EXPECT_LE(d.rms, c.tol * 5 * d.scale) << "RMS diff " << d.rms << ", logit RMS " << d.scale;
  EXPECT_GT(d.scale, 0.0);
  if (quantized(c.wtype)) {
    // Against exact float activations the difference is the activation rounding, which these
    // random (chaotic) models amplify more than real ones: a sanity bound only.
    const auto exact = compare_logits(ours, test::reference_logits(path, tokens, false), spec.n_vocab);
    EXPECT_LE(exact.max_abs, 0.15 * exact.scale);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Archs, TinyForward,
    ::testing::Values(Case{"llama", DType::F32, 1e-4}, Case{"qwen2", DType::F32, 1e-4}, Case{"gemma3", DType::F32, 1e-4},
                      Case{"llama", DType::F16, 1e-4}, Case{"qwen2", DType::BF16, 1e-4},
                      Case{"llama", DType::Q4_0, 2e-3}, Case{"qwen2", DType::Q4_K, 2e-3},
                      Case{"gemma3", DType::Q6_K, 2e-3}, Case{"llama", DType::Q8_0, 2e-3},
                      Case{"qwen2", DType::Q5_0, 2e-3}, Case{"llama", DType::Q4_1, 2e-3},
                      Case{"gemma3", DType::Q5_K, 2e-3}, Case{"qwen2", DType::Q3_K, 2e-3},
                      Case{"llama", DType::Q2_K, 2e-3}, Case{"llama", DType::Q5_1, 2e-3},
                      Case{"llama", DType::Q6_K, 2e-3}, Case{"gemma3", DType::Q4_K, 2e-3}),
    [](const auto& info) { return info.param.arch + "_" + dtype_name(info.param.wtype); });

// Processing a sequence in one batch, in chunks, or one token at a time must give the same
// logits: prefill, decode and speculative verification all rely on it.
TEST(Forward, ChunkingDoesNotChangeLogits) {
  test::TinyModelSpec spec;
  spec.arch = "qwen2";
  spec.weight_type = DType::Q8_0;
  spec.tied_embeddings = false;
  const std::string path = test::scratch_dir("fwd-chunks") + "/tiny.gguf";
  test::write_tiny_model(path, spec);
  auto be = kernels::make_cpu_backend(2);
  auto model = Model::load(path, *be);
  KVCacheOptions o;
  o.block_size = 4;
  o.max_tokens = 64;
  KVCache cache(*be, model->config(), o);
  Transformer tf(*model, cache);
  const auto tokens = some_tokens(11, spec.n_vocab, 5);
  std::vector<float> whole, piece, pieces;
  {
    SequenceKV s(cache);
    Batch b;
    b.add_all_logits(s, tokens);
    tf.forward(b, whole);
  }
  SequenceKV s(cache);
  for (size_t i = 0; i < tokens.size();) {
    const size_t n = i < 4 ? 4 : 1;  // a chunk of four, then single tokens
    Batch b;
    b.add_all_logits(s, std::span(tokens).subspan(i, n));
    tf.forward(b, piece);
    pieces.insert(pieces.end(), piece.begin(), piece.end());
    i += n;
  }
  ASSERT_EQ(whole.size(), pieces.size());
  for (size_t i = 0; i < whole.size(); ++i) ASSERT_NEAR(whole[i], pieces[i], 1e-4f) << i;
}

// Two sequences in one ragged batch give the same logits as each alone.
TEST(Forward, RaggedBatchMatchesSeparateRuns) {
  test::TinyModelSpec spec;
  spec.arch = "llama";
  const std::string path = test::scratch_dir("fwd-ragged") + "/tiny.gguf";
  test::write_tiny_model(path, spec);
  auto be = kernels::make_cpu_backend(2);
  auto model = Model::load(path, *be);
  KVCacheOptions o;
  o.block_size = 4;
  o.max_tokens = 128;
  KVCache cache(*be, model->config(), o);
  Transformer tf(*model, cache);
  const auto a = some_tokens(9, spec.n_vocab, 1), b = some_tokens(5, spec.n_vocab, 2);
  std::vector<float> la, lb, both;
  {
    SequenceKV s(cache);
    Batch bt;
    bt.add_all_logits(s, a);
    tf.forward(bt, la);
  }
  {
    SequenceKV s(cache);
    Batch bt;
    bt.add_all_logits(s, b);
    tf.forward(bt, lb);
  }
  SequenceKV sa(cache), sb(cache);
  Batch bt;
  bt.add_all_logits(sa, a);
  bt.add_all_logits(sb, b);
  tf.forward(bt, both);
  la.insert(la.end(), lb.begin(), lb.end());
  ASSERT_EQ(la.size(), both.size());
  for (size_t i = 0; i < la.size(); ++i) ASSERT_NEAR(la[i], both[i], 1e-4f) << i;
}

TEST(Forward, FullCacheIsReportedAndNothingChanges) {
  test::TinyModelSpec spec;
  const std::string path = test::scratch_dir("fwd-full") + "/tiny.gguf";
  test::write_tiny_model(path, spec);
  auto be = kernels::make_cpu_backend(1);
  auto model = Model::load(path, *be);
  KVCacheOptions o;
  o.block_size = 4;
  o.num_blocks = 2;
  KVCache cache(*be, model->config(), o);
  Transformer tf(*model, cache);
  SequenceKV s(cache);
  Batch b;
  const auto t = some_tokens(9, spec.n_vocab, 1);
  b.add(s, t);
  std::vector<float> logits;
  EXPECT_THROW(tf.forward(b, logits), KVCacheFull);
  EXPECT_EQ(s.length(), 0);
  EXPECT_EQ(cache.blocks().num_free(), 2);
}

TEST(Forward, RealSmolLM2MatchesReference) {
  const std::string path = test::model_path("smollm2-135m-instruct-q4_1.gguf");
  if (path.empty()) GTEST_SKIP() << "model not downloaded: run python3 scripts/fetch_models.py --models smollm2";
  // "The capital of France is" and a few more tokens.
  const std::vector<int32_t> tokens = {504, 3575, 282, 4649, 314, 3767, 30, 378, 3575};
  const auto ours = test::engine_logits(path, tokens);
  // 30 layers of int8-rounded activations: compare with the float reference statistically —
  // the same top token everywhere, a small RMS difference — rather than value by value.
  // (Emulating the int8 rounding in NumPy alone moves these logits by 4.9% RMS, 1.44 max;
  // the engine measured 3.1% RMS, 1.04 max.)
  const auto d = compare_logits(ours, test::reference_logits(path, tokens, false), 49152);
  EXPECT_EQ(d.argmax_mismatches, 0);
  EXPECT_LE(d.rms, 0.05 * d.scale) << "RMS diff " << d.rms << ", logit RMS " << d.scale;
  EXPECT_LE(d.max_abs, 0.2 * d.scale) << "max |diff| " << d.max_abs << ", logit RMS " << d.scale;
}

}  // namespace
}  // namespace tandem
