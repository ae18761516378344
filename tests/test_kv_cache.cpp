// Paged KV cache bookkeeping: allocation, reference counts, growth, rollback, exhaustion;
// the prefix cache's publishing and eviction; shared blocks are never written.
#include <gtest/gtest.h>

#include "engine/forward.hpp"
#include "engine/kv_cache.hpp"
#include "engine/prefix_cache.hpp"
#include "kernels/backend.hpp"
#include "tests/support/paths.hpp"
#include "tests/support/tiny_model.hpp"

namespace tandem {
namespace {

ModelConfig tiny_config() {
  ModelConfig c;
  c.n_layer = 2;
  c.n_head = 4;
  c.n_head_kv = 2;
  c.head_dim = 8;
  c.n_embd = 32;
  return c;
}

TEST(BlockAllocator, AllocatesEveryBlockOnceThenReportsFull) {
  BlockAllocator a(4);
  std::vector<int32_t> got;
  for (int i = 0; i < 4; ++i) got.push_back(a.allocate());
  EXPECT_EQ(a.allocate(), -1);
  std::sort(got.begin(), got.end());
  EXPECT_EQ(got, (std::vector<int32_t>{0, 1, 2, 3}));
  EXPECT_EQ(a.num_free(), 0);
}

TEST(BlockAllocator, SharedBlockIsFreedByItsLastUser) {
  BlockAllocator a(2);
  const int32_t b = a.allocate();
  a.retain(b);
  EXPECT_EQ(a.ref_count(b), 2);
  a.release(b);
  EXPECT_EQ(a.num_free(), 1);
  a.release(b);
  EXPECT_EQ(a.num_free(), 2);
  EXPECT_THROW(a.release(b), std::logic_error);
  EXPECT_THROW(a.retain(b), std::logic_error);
}

TEST(SequenceKV, GrowsByBlocksAndRollsBack) {
  auto be = kernels::make_cpu_backend(1);
  KVCacheOptions o;
  o.block_size = 4;
  o.num_blocks = 5;
  KVCache cache(*be, tiny_config(), o);
  SequenceKV s(cache);
  ASSERT_TRUE(s.reserve(9));  // 3 blocks
  EXPECT_EQ(s.block_table().size(), 3u);
  EXPECT_EQ(cache.blocks().num_free(), 2);
  s.set_length(9);
  EXPECT_EQ(s.slot(5), s.block_table()[1] * 4 + 1);
  s.truncate(4);  // rejected draft tokens: back to one block
  EXPECT_EQ(s.length(), 4);
  EXPECT_EQ(s.block_table().size(), 1u);
  EXPECT_EQ(cache.blocks().num_free(), 4);
  EXPECT_THROW(s.slot(4), std::out_of_range);
}

TEST(SequenceKV, ReserveFailsWithoutSideEffectsWhenFull) {
  auto be = kernels::make_cpu_backend(1);
  KVCacheOptions o;
  o.block_size = 4;
  o.num_blocks = 3;
  KVCache cache(*be, tiny_config(), o);
  SequenceKV a(cache), b(cache);
  ASSERT_TRUE(a.reserve(8));
  EXPECT_FALSE(b.reserve(8));
  EXPECT_TRUE(b.block_table().empty());
  EXPECT_EQ(cache.blocks().num_free(), 1);
  a.clear();
  EXPECT_TRUE(b.reserve(12));
}

TEST(SequenceKV, DestructorReturnsBlocks) {
  auto be = kernels::make_cpu_backend(1);
  KVCacheOptions o;
  o.block_size = 2;
  o.num_blocks = 3;
  KVCache cache(*be, tiny_config(), o);
  {
    SequenceKV s(cache);
    ASSERT_TRUE(s.reserve(6));
    EXPECT_EQ(cache.blocks().num_free(), 0);
  }
  EXPECT_EQ(cache.blocks().num_free(), 3);
}

TEST(KVCache, SizesFollowTheModel) {
  auto be = kernels::make_cpu_backend(1);
  KVCacheOptions o;
  o.block_size = 16;
  o.max_tokens = 100;  // → 7 blocks
  o.dtype = DType::F16;
  KVCache cache(*be, tiny_config(), o);
  EXPECT_EQ(cache.blocks().num_total(), 7);
  EXPECT_EQ(cache.bytes(), KVCache::bytes_per_token(tiny_config(), DType::F16) * 7 * 16);
  EXPECT_EQ(KVCache::bytes_per_token(tiny_config(), DType::F16), 2u * 2 * 16 * 2);
}

// A sequence's blocks, without a KVCache: n freshly allocated blocks.
std::vector<int32_t> take_blocks(BlockAllocator& a, int n) {
  std::vector<int32_t> t;
  for (int i = 0; i < n; ++i) t.push_back(a.allocate());
  return t;
}

void release_all(BlockAllocator& a, const std::vector<int32_t>& blocks) {
  for (int32_t b : blocks) a.release(b);
}

// A sequence whose KV runs past its tokens (a stop inside accepted drafts) publishes only
// blocks made of its tokens.
TEST(PrefixCache, PublishStopsAtTheLastToken) {
  BlockAllocator a(4);
  PrefixCache pc(a, 4);
  const auto table = take_blocks(a, 3);                     // KV for 12 positions ...
  const std::vector<int32_t> tokens = {1, 2, 3, 4, 5, 6};  // ... of which 6 are tokens
  EXPECT_EQ(pc.publish(tokens, table, 12, 0), 1);
  EXPECT_EQ(pc.cached_blocks(), 1);
  EXPECT_EQ(a.ref_count(table[0]), 2);
  EXPECT_EQ(a.ref_count(table[1]), 1);
  EXPECT_EQ(a.ref_count(table[2]), 1);
  const std::vector<int32_t> longer = {1, 2, 3, 4, 5, 6, 7, 8};
  const auto found = pc.lookup(longer, 2);
  EXPECT_EQ(found, (std::vector<int32_t>{table[0]}));
  release_all(a, found);
  release_all(a, table);
}

// Eviction takes leaves: what stays cached is a prefix of the chain, which still matches.
TEST(PrefixCache, EvictsTheDeepestBlocksFirst) {
  BlockAllocator a(8);
  PrefixCache pc(a, 2);
  const std::vector<int32_t> tokens = {1, 2, 3, 4, 5, 6, 7, 8};
  const auto table = take_blocks(a, 4);
  EXPECT_EQ(pc.publish(tokens, table, 8, 0), 4);
  release_all(a, table);  // the sequence is gone: only the cache holds the blocks
  EXPECT_EQ(pc.evict(2), 2);
  EXPECT_EQ(a.ref_count(table[2]), 0);
  EXPECT_EQ(a.ref_count(table[3]), 0);
  const auto found = pc.lookup(tokens, 4);
  EXPECT_EQ(found, (std::vector<int32_t>{table[0], table[1]}));
  release_all(a, found);
  // Evicting a leaf makes its parent one: the rest of the chain goes in the same call.
  EXPECT_EQ(pc.evict(8), 2);
  EXPECT_EQ(pc.cached_blocks(), 0);
  EXPECT_EQ(a.num_free(), 8);
}

// Among the leaves, the least recently used goes first; blocks in use (and so their
// ancestors) stay.
TEST(PrefixCache, EvictsLeastRecentlyUsedLeavesAndNothingInUse) {
  BlockAllocator a(8);
  PrefixCache pc(a, 2);
  const std::vector<int32_t> ta = {1, 2, 3, 4}, tb = {1, 2, 5, 6}, tc = {7, 8};
  const auto sa = take_blocks(a, 2), sb = take_blocks(a, 2), sc = take_blocks(a, 1);
  pc.publish(ta, sa, 4, 0);
  pc.publish(tb, sb, 4, 0);  // its first block is ta's, already cached: sb[0] is not taken
  pc.publish(tc, sc, 2, 0);
  EXPECT_EQ(pc.cached_blocks(), 4);
  release_all(a, sa);
  release_all(a, sb);
  release_all(a, sc);
  const auto held = pc.lookup(ta, 2);  // a sequence uses ta's chain: the most recent
  ASSERT_EQ(held, sa);
  EXPECT_EQ(pc.evict(1), 1);
  EXPECT_EQ(a.ref_count(sb[1]), 0);  // tb's leaf: older than tc's
  EXPECT_EQ(pc.evict(4), 1);
  EXPECT_EQ(a.ref_count(sc[0]), 0);
  EXPECT_EQ(pc.cached_blocks(), 2);  // ta's chain, in use
  release_all(a, held);
  EXPECT_EQ(pc.evict(1), 1);
  const auto rest = pc.lookup(ta, 2);
  EXPECT_EQ(rest, (std::vector<int32_t>{sa[0]}));
  release_all(a, rest);
}

// There is no copy-on-write: a block another sequence or the prefix cache holds must never
// be written, or their KV would silently change under them.
TEST(Transformer, RefusesToWriteIntoASharedBlock) {
  test::TinyModelSpec spec;
  const std::string path = test::scratch_dir("kv-shared-write") + "/tiny.gguf";
  test::write_tiny_model(path, spec);
  auto be = kernels::make_cpu_backend(1);
  auto model = Model::load(path, *be);
  KVCacheOptions o;
  o.block_size = 4;
  o.max_tokens = 64;
  KVCache cache(*be, model->config(), o);
  Transformer tf(*model, cache);
  std::vector<float> logits;
  SequenceKV owner(cache);
  Batch b;
  b.add(owner, std::vector<int32_t>{5, 6, 7, 8, 9, 10, 11, 12});
  tf.forward(b, logits);
  auto share = [&] {  // the owner's two blocks, retained for another sequence
    for (int32_t blk : owner.block_table()) cache.blocks().retain(blk);
    return owner.block_table();
  };
  const std::vector<int32_t> next = {13};

  SequenceKV after(cache);  // writes past the shared prefix go to a block of its own
  after.adopt_prefix(share());
  b.clear();
  b.add(after, next);
  EXPECT_NO_THROW(tf.forward(b, logits));
  EXPECT_EQ(after.length(), 9);

  SequenceKV inside(cache);  // rolled back into the shared prefix: the next write would land in it
  inside.adopt_prefix(share());
  inside.truncate(6);
  const int32_t free_before = cache.blocks().num_free();
  b.clear();
  b.add(inside, next);
  EXPECT_THROW(tf.forward(b, logits), std::logic_error);
  EXPECT_EQ(inside.length(), 6);
  EXPECT_EQ(cache.blocks().num_free(), free_before);
}

}  // namespace
}  // namespace tandem
