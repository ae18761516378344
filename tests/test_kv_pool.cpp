// The one KV pool of both models (engine/kv/kv_pool.hpp): page and block sizes, one buffer,
// one id space and one budget for caches of different shapes, blocks that never overlap,
// and through the engine: a draft of another shape decodes losslessly from the pool, and on
// the CUDA backend the arena holds one budget of KV for both models, not one per cache.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>

#include "engine/kv/kv_cache.hpp"
#include "engine/kv/kv_pool.hpp"
#include "engine/kv/sequence_kv.hpp"
#include "kernels/backend.hpp"
#include "tandem/engine.hpp"
#include "tests/support/paths.hpp"
#include "tests/support/prompts.hpp"
#include "tests/support/tiny_model.hpp"

namespace tandem {
namespace {

TEST(KVPool, PlansOnePageSizeForEveryCache) {
  // Qwen2.5-Coder 1.5B (28 layers, 2 x 128 wide) with 0.5B (24 layers, 2 x 64), f16.
  const KVShape qwen[] = {{28, 256}, {24, 128}};
  const KVPoolPlan p = plan_kv_pool(qwen, DType::F16, 16);
  EXPECT_EQ(p.page_bytes, 8192u);
  EXPECT_EQ(p.strips, 56);
  EXPECT_EQ(p.block_sizes, (std::vector<int32_t>{16, 32}));
  EXPECT_EQ(p.column_bytes(), size_t{56} * 8192);
  // A block costs the target exactly its own bytes; the draft, its column (24 of 28 layers).
  EXPECT_EQ(p.column_bytes() / 16, KVCache::bytes_per_token(qwen[0], DType::F16));
  EXPECT_EQ(p.blocks_for_tokens(100), 7u + 4u);

  // Rows with no power-of-two relation: 192 and 160 bytes share pages of 960 bytes.
  const KVShape odd[] = {{2, 96}, {3, 80}};
  const KVPoolPlan q = plan_kv_pool(odd, DType::F16, 16);
  EXPECT_EQ(q.page_bytes % 192, 0u);
  EXPECT_EQ(q.page_bytes % 160, 0u);
  EXPECT_GE(q.page_bytes, 16u * 192);
  EXPECT_EQ(q.page_bytes, 3840u);
  EXPECT_EQ(q.block_sizes, (std::vector<int32_t>{20, 24}));
  EXPECT_EQ(q.strips, 6);  // the deeper model's layers

  // Alone: the usual cache, block_size slots of every layer.
  const KVShape one[] = {{2, 16}};
  const KVPoolPlan r = plan_kv_pool(one, DType::F32, 4);
  EXPECT_EQ(r.page_bytes, 4u * 16 * 4);
  EXPECT_EQ(r.column_bytes(), KVCache::bytes_per_token(one[0], DType::F32) * 4);

  // A page no cache could fill sensibly, and bad arguments, are refused.
  const KVShape far[] = {{2, 4096}, {2, 2}};
  EXPECT_THROW(plan_kv_pool(far, DType::F16, 16), std::invalid_argument);
  EXPECT_THROW(plan_kv_pool(one, DType::F16, 0), std::invalid_argument);
  EXPECT_THROW(plan_kv_pool(one, DType::Q8_0, 16), std::invalid_argument);
  EXPECT_THROW(plan_kv_pool(std::span<const KVShape>(), DType::F16, 16), std::invalid_argument);
}

// A target (2 layers, 16 wide) and a draft of another shape (1 layer, 8 wide), f16.
const KVShape kPair[] = {{2, 16}, {1, 8}};

TEST(KVPool, CachesShareOneBufferOneIdSpaceAndOneBudget) {
  auto be = kernels::make_cpu_backend(1);
  const KVPoolPlan plan = plan_kv_pool(kPair, DType::F16, 4);
  ASSERT_EQ(plan.block_sizes, (std::vector<int32_t>{4, 8}));
  KVPool pool(*be, kPair, DType::F16, 4, 10 * plan.column_bytes() + 100);  // a remainder is not used
  EXPECT_EQ(pool.num_blocks(), 10);
  EXPECT_EQ(pool.bytes(), 10 * plan.column_bytes());
  EXPECT_EQ(pool.budget().total(), pool.bytes());
  KVCache target(pool, 0), draft(pool, 1);
  EXPECT_EQ(target.block_size(), 4);
  EXPECT_EQ(draft.block_size(), 8);
  EXPECT_EQ(target.block_bytes(), draft.block_bytes());
  EXPECT_EQ(target.blocks().budget(), draft.blocks().budget());
  // The same memory, not a reserve each.
  EXPECT_EQ(target.layer(0).k.buf, draft.layer(0).k.buf);
  EXPECT_EQ(target.bytes(), pool.bytes());

  SequenceKV t(target), d(draft);
  ASSERT_TRUE(t.reserve(4 * 4));  // 4 blocks
  EXPECT_EQ(draft.blocks().num_free(), 6);
  EXPECT_EQ(target.blocks().num_used(), 4);
  EXPECT_EQ(draft.blocks().num_used(), 0);
  EXPECT_FALSE(d.reserve(7 * 8));
  EXPECT_TRUE(d.block_table().empty());
  ASSERT_TRUE(d.reserve(6 * 8));
  EXPECT_EQ(pool.budget().used(), pool.budget().total());
  EXPECT_EQ(target.blocks().allocate(), -1);
  std::set<int32_t> ids(t.block_table().begin(), t.block_table().end());
  ids.insert(d.block_table().begin(), d.block_table().end());
  EXPECT_EQ(ids.size(), 10u);  // every block held once, by one cache
  EXPECT_EQ(*ids.rbegin(), 9);
  d.truncate(8);  // 5 draft blocks back: the target can take them
  EXPECT_EQ(target.blocks().num_free(), 5);
  EXPECT_TRUE(t.reserve(9 * 4));
  EXPECT_EQ(target.blocks().num_used(), 9);
  EXPECT_EQ(draft.blocks().num_used(), 1);
  // A block id is one cache's at a time: the other cannot release or share it.
  EXPECT_THROW(draft.blocks().release(t.block_table()[0]), std::logic_error);
  EXPECT_THROW(draft.blocks().retain(t.block_table()[0]), std::logic_error);
  t.clear();
  d.clear();
  EXPECT_EQ(pool.budget().used(), 0u);
  EXPECT_EQ(target.blocks().num_free(), 10);
}

// Every cache's blocks, in every layer's K and V, write only their own bytes: fill each
// block of one cache with a pattern through its tensors, then check that what the other
// cache's blocks read is untouched, and that all of it lies in the one buffer.
TEST(KVPool, BlocksOfBothCachesNeverOverlap) {
  auto be = kernels::make_cpu_backend(1);
  const KVPoolPlan plan = plan_kv_pool(kPair, DType::F16, 4);
  KVPool pool(*be, kPair, DType::F16, 4, 6 * plan.column_bytes());
  KVCache target(pool, 0), draft(pool, 1);
  SequenceKV t(target), d(draft);
  ASSERT_TRUE(t.reserve(3 * 4));
  ASSERT_TRUE(d.reserve(3 * 8));
  // Every (layer, K|V, block) of cache `tag`: the block's rows and their pattern, a
  // function of all four, for every element.
  auto each_block = [&](KVCache& c, const SequenceKV& s, int tag, const auto& fn) {
    for (int il = 0; il < kPair[tag].n_layer; ++il)
      for (int kv = 0; kv < 2; ++kv)
        for (int32_t b : s.block_table()) {
          const kernels::Tensor& x = kv ? c.layer(il).v : c.layer(il).k;
          const auto pattern = static_cast<uint16_t>(0x1000 * (tag + 1) + 0x100 * il + 0x10 * kv + b);
          fn(x.slice_rows(int64_t{b} * c.block_size(), c.block_size()), pattern,
             "cache " + std::to_string(tag) + " layer " + std::to_string(il) + (kv ? " V" : " K") + " block " +
                 std::to_string(b));
        }
  };
  auto fill = [&](KVCache& c, const SequenceKV& s, int tag) {
    each_block(c, s, tag, [&](const kernels::Tensor& rows, uint16_t pattern, const std::string&) {
      std::vector<uint16_t> v(static_cast<size_t>(rows.numel()), pattern);
      be->upload(rows, v.data(), v.size() * sizeof(uint16_t));
    });
  };
  auto check = [&](KVCache& c, const SequenceKV& s, int tag) {
    each_block(c, s, tag, [&](const kernels::Tensor& rows, uint16_t pattern, const std::string& what) {
      ASSERT_LE(rows.offset + rows.bytes(), pool.bytes()) << what;
      std::vector<uint16_t> v(static_cast<size_t>(rows.numel()));
      be->download(v.data(), rows, v.size() * sizeof(uint16_t));
      EXPECT_EQ(std::count(v.begin(), v.end(), pattern), static_cast<long>(v.size())) << what;
    });
  };
  fill(target, t, 0);
  fill(draft, d, 1);
  check(target, t, 0);
  check(draft, d, 1);
  fill(target, t, 0);  // and the other way round
  check(draft, d, 1);
}

// A target and a draft of another shape (fewer layers, fewer KV heads) over one
// vocabulary, written once.
struct ShapedPair {
  std::string target, draft;
};
const ShapedPair& shaped_pair() {
  static const ShapedPair p = [] {
    const std::string dir = test::scratch_dir("kv_pool_pair");
    test::TinyModelSpec t;
    t.arch = "qwen2";
    t.n_layer = 3;
    t.n_embd = 64;
    t.n_head = 4;
    t.n_head_kv = 2;
    t.seed = 5;
    test::TinyModelSpec d = t;
    d.n_layer = 2;
    d.n_head_kv = 1;
    d.seed = 6;
    ShapedPair out{dir + "/target.gguf", dir + "/draft.gguf"};
    test::write_tiny_model(out.target, t);
    test::write_tiny_model(out.draft, d);
    return out;
  }();
  return p;
}

LoadOptions shaped_load(const std::string& device) {
  LoadOptions o;
  o.model_path = shaped_pair().target;
  o.draft_model_path = shaped_pair().draft;
  o.threads = 1;
  o.context = 96;
  o.device = device;
  return o;
}

GenerateOptions greedy(int n, DraftMode mode) { return test::greedy_options(n, mode, 3); }

void expect_lossless_from_the_pool(const std::string& device) {
  auto e = Engine::load(shaped_load(device));
  const ModelInfo info = e->info();
  // Target 2 x 32 wide x 3 layers, draft 1 x 16 x 2: 16-token target blocks, 32-token draft
  // blocks, both a 6-strip column; one context of each: 7 + 4 blocks.
  const size_t column = 6 * 16 * 32 * 2;
  EXPECT_EQ(info.kv_bytes, (7 + 4) * column);
  for (uint32_t seed : {1u, 2u, 3u}) {
    const auto prompt = test::random_prompt(12, seed, 7);
    const GenerateResult plain = e->generate_tokens(prompt, greedy(40, DraftMode::None));
    const GenerateResult spec = e->generate_tokens(prompt, greedy(40, DraftMode::Model));
    EXPECT_EQ(spec.tokens, plain.tokens) << device << " seed " << seed;
    EXPECT_GT(spec.speculative.drafted_tokens, 0);
  }
}

TEST(KVPool, ADraftOfAnotherShapeIsLosslessFromThePool) { expect_lossless_from_the_pool("cpu"); }

TEST(KVPool, ADraftOfAnotherShapeIsLosslessFromThePoolOnEmulatedCuda) {
  expect_lossless_from_the_pool("cuda-emulated");
}

// The CUDA arena holds the models, one KV budget and the scratch: with a budget of 16 MiB,
// a 24 MiB arena suffices (two caches each reserved at the whole budget needed 32 MiB), and
// an arena too small for the pool names the KV cache and the --gpu-mem that would fit.
TEST(KVPool, TheCudaArenaHoldsOneBudgetForBothCaches) {
  LoadOptions o = shaped_load("cuda-emulated");
  o.kv_mem_bytes = size_t{16} << 20;
  o.gpu_mem_bytes = size_t{24} << 20;
  auto e = Engine::load(o);
  EXPECT_LE(e->info().kv_bytes, size_t{16} << 20);
  EXPECT_GT(e->info().kv_bytes, size_t{15} << 20);
  const auto prompt = test::random_prompt(12, 9, 7);
  const GenerateResult spec = e->generate_tokens(prompt, greedy(24, DraftMode::Model));
  EXPECT_EQ(spec.tokens.size(), 24u);
  EXPECT_GT(spec.speculative.drafted_tokens, 0);

  o.gpu_mem_bytes = size_t{12} << 20;
  try {
    Engine::load(o);
    ADD_FAILURE() << "a 16 MiB KV pool fitted a 12 MiB arena";
  } catch (const std::exception& ex) {
    const std::string what = ex.what();
    EXPECT_NE(what.find("KV"), std::string::npos) << what;
    EXPECT_NE(what.find("--gpu-mem"), std::string::npos) << what;
  }
}

}  // namespace
}  // namespace tandem
