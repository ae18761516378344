// The engine's forward pass against the independent NumPy reference, on tiny random
// models of every architecture (several weight types) and on the real SmolLM2-135M.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <span>

#include "engine/model/transformer.hpp"
#include "kernels/cpu/quant.hpp"
#include "tests/support/amx_model.hpp"
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

// ---- batch invariance --------------------------------------------------------------------
// Processing a sequence in one batch, in chunks, or one token at a time, alone or beside other
// sequences, must give the same logits bit for bit: greedy speculative decoding and the
// scheduler's mixed prefill/decode batches are lossless only because the kernels promise it
// (a matmul over N tokens == N single-token matmuls, attention of a token independent of
// the other tokens of its batch). Every architecture and matmul kernel family is covered.

// The comparison itself: any bit counts, and the message locates the first difference.
TEST(SameBits, ReportsTheFirstDifference) {
  const std::vector<float> a = {1.0f, 2.0f, 0.0f, 4.0f, 5.0f, 6.0f};
  EXPECT_TRUE(test::same_bits(a, a, 3));
  std::vector<float> b = a;
  b[2] = -0.0f;  // equal as floats, not as bits
  b[4] = std::nextafter(5.0f, 6.0f);
  const auto r = test::same_bits(b, a, 3);
  ASSERT_FALSE(r);
  EXPECT_NE(std::string(r.message()).find("2 of 6 floats differ; first at index 2 (row 0, column 2): -0 (0x80000000) vs 0 (0x00000000)"),
            std::string::npos)
      << r.message();
  EXPECT_FALSE(test::same_bits(std::vector<float>(a.begin(), a.end() - 1), a, 3));
}

struct InvCase {
  std::string arch;
  DType wtype;
  DType kv_type;
};

class BatchInvariance : public ::testing::TestWithParam<InvCase> {
 protected:
  void SetUp() override {
    const InvCase& c = GetParam();
    spec_.arch = c.arch;
    spec_.weight_type = c.wtype;
    spec_.embd_type = c.wtype;
    spec_.tied_embeddings = c.arch != "qwen2";
    spec_.n_embd = 256;  // a whole number of 256-element K-quant blocks
    spec_.n_ff = 512;
    spec_.seed = 11;
    const std::string path =
        test::scratch_dir("fwd-inv-" + c.arch + dtype_name(c.wtype) + dtype_name(c.kv_type)) + "/tiny.gguf";
    test::write_tiny_model(path, spec_);
    be_ = kernels::make_cpu_backend(2);
    model_ = Model::load(path, *be_);
    KVCacheOptions o;
    o.block_size = 4;  // a chunk boundary rarely falls on a block boundary
    o.max_tokens = 256;
    o.dtype = c.kv_type;
    cache_ = std::make_unique<KVCache>(*be_, model_->config(), o);
    tf_ = std::make_unique<Transformer>(*model_, *cache_);
  }

  // Runs `body` once per kernel level this CPU has (each has its own matmul and attention
  // code, each must keep the promise), and at the AVX-512 level once more with the AMX
  // kernels on the model of the tile instructions (passes of 4 tokens or more take them,
  // shorter ones the VNNI kernels, so the comparisons cross the two), then restores the
  // detected level and AMX path.
  template <class F>
  void for_each_isa(F body) {
    namespace cpu = kernels::cpu;
    struct Restore {
      ~Restore() {
        cpu::force_isa(cpu::detected_isa());
        cpu::force_amx(cpu::detected_amx());
      }
    } restore;
    for (int l = 0; l <= static_cast<int>(cpu::detected_isa()); ++l) {
      const auto isa = static_cast<cpu::Isa>(l);
      SCOPED_TRACE(cpu::isa_name(isa));
      cpu::force_isa(isa);
      cpu::force_amx(cpu::AmxPath::Off);
      body();
      if (isa == cpu::Isa::Avx512) {
        SCOPED_TRACE("AMX kernels on the model");
        test::install_amx_model();
        cpu::force_amx(cpu::AmxPath::Model);
        body();
      }
    }
  }

  // All logits of `tokens` appended to a fresh sequence in one batch.
  std::vector<float> whole(std::span<const int32_t> tokens) {
    SequenceKV s(*cache_);
    Batch b;
    b.add_all_logits(s, tokens);
    std::vector<float> out;
    tf_->forward(b, out);
    return out;
  }

  test::TinyModelSpec spec_;
  std::unique_ptr<kernels::Backend> be_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<KVCache> cache_;
  std::unique_ptr<Transformer> tf_;
};

// 37 tokens: more than the matmul's 32-token pass (mm::kMaxTokens) and than gemma3's sliding
// window (8); the chunks are of sizes that are not multiples of the token groups (4 and 8)
// and straddle KV blocks, and include single tokens (decode).
TEST_P(BatchInvariance, ChunkedPrefillGivesTheSameBits) {
  const auto tokens = some_tokens(37, spec_.n_vocab, 5);
  for_each_isa([&] {
    const auto ref = whole(tokens);
    std::vector<float> pieces, piece;
    SequenceKV s(*cache_);
    size_t i = 0;
    for (const size_t n : {5u, 1u, 7u, 13u, 1u, 1u, 9u}) {
      Batch b;
      b.add_all_logits(s, std::span(tokens).subspan(i, n));
      tf_->forward(b, piece);
      pieces.insert(pieces.end(), piece.begin(), piece.end());
      i += n;
    }
    ASSERT_EQ(i, tokens.size());
    EXPECT_TRUE(test::same_bits(pieces, ref, spec_.n_vocab));
  });
}

// A scheduler-style ragged batch: a decode step of a sequence that has context, beside two
// prefills of different lengths, equals each sequence run alone.
TEST_P(BatchInvariance, RaggedBatchGivesTheSameBits) {
  const auto a = some_tokens(10, spec_.n_vocab, 1), b = some_tokens(13, spec_.n_vocab, 2),
             c = some_tokens(6, spec_.n_vocab, 3);
  for_each_isa([&] {
    const auto ref_a = whole(a), ref_b = whole(b), ref_c = whole(c);
    SequenceKV sa(*cache_), sb(*cache_), sc(*cache_);
    std::vector<float> first, both;
    {
      Batch bt;
      bt.add_all_logits(sa, std::span(a).first(9));
      tf_->forward(bt, first);
    }
    Batch bt;
    bt.add_all_logits(sb, b);
    bt.add_all_logits(sa, std::span(a).last(1));
    bt.add_all_logits(sc, c);
    tf_->forward(bt, both);
    // Rows come in batch order: b, then a's last token, then c.
    std::vector<float> want(ref_b);
    want.insert(want.end(), ref_a.end() - spec_.n_vocab, ref_a.end());
    want.insert(want.end(), ref_c.begin(), ref_c.end());
    EXPECT_TRUE(test::same_bits(both, want, spec_.n_vocab));
    first.insert(first.end(), both.begin() + static_cast<ptrdiff_t>(b.size()) * spec_.n_vocab,
                 both.begin() + static_cast<ptrdiff_t>(b.size() + 1) * spec_.n_vocab);
    EXPECT_TRUE(test::same_bits(first, ref_a, spec_.n_vocab));
  });
}

INSTANTIATE_TEST_SUITE_P(
    Archs, BatchInvariance,
    ::testing::Values(InvCase{"llama", DType::F32, DType::F32}, InvCase{"qwen2", DType::F16, DType::F16},
                      InvCase{"gemma3", DType::BF16, DType::F32}, InvCase{"llama", DType::Q4_0, DType::F16},
                      InvCase{"llama", DType::Q4_1, DType::F16}, InvCase{"qwen2", DType::Q5_0, DType::F16},
                      InvCase{"qwen2", DType::Q8_0, DType::F32}, InvCase{"gemma3", DType::Q5_1, DType::F16},
                      InvCase{"llama", DType::Q2_K, DType::F16}, InvCase{"qwen2", DType::Q3_K, DType::F16},
                      InvCase{"gemma3", DType::Q4_K, DType::F16}, InvCase{"llama", DType::Q5_K, DType::F16},
                      InvCase{"qwen2", DType::Q6_K, DType::F16}, InvCase{"gemma3", DType::Q8_0, DType::F16}),
    [](const auto& info) {
      return info.param.arch + "_" + dtype_name(info.param.wtype) + "_kv" + dtype_name(info.param.kv_type);
    });

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
  TANDEM_REQUIRE_MODEL(path, "smollm2");
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

// The batch-invariance promise on real shapes (576-wide rows, 9 query heads over 3 KV heads,
// Q4_1 layers with Q8_0 embeddings) and the F16 cache the engine uses by default.
TEST(Forward, RealSmolLM2ChunkedPrefillGivesTheSameBits) {
  TANDEM_REQUIRE_MODEL(path, "smollm2");
  auto be = kernels::make_cpu_backend(2);
  auto model = Model::load(path, *be);
  KVCacheOptions o;
  o.block_size = 16;
  o.max_tokens = 128;
  KVCache cache(*be, model->config(), o);
  Transformer tf(*model, cache);
  const int n_vocab = model->config().n_vocab;
  const auto tokens = some_tokens(37, n_vocab, 9);
  std::vector<float> whole, pieces, piece;
  {
    SequenceKV s(cache);
    Batch b;
    b.add_all_logits(s, tokens);
    tf.forward(b, whole);
  }
  SequenceKV s(cache);
  size_t i = 0;
  for (const size_t n : {5u, 1u, 7u, 13u, 1u, 1u, 9u}) {
    Batch b;
    b.add_all_logits(s, std::span(tokens).subspan(i, n));
    tf.forward(b, piece);
    pieces.insert(pieces.end(), piece.begin(), piece.end());
    i += n;
  }
  EXPECT_TRUE(test::same_bits(pieces, whole, n_vocab));
}

}  // namespace
}  // namespace tandem
