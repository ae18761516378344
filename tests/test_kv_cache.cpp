// Paged KV cache bookkeeping: allocation, reference counts, growth, rollback, exhaustion;
// the prefix cache's publishing and eviction; shared blocks are never written.
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>

#include "engine/model/transformer.hpp"
#include "engine/kv/kv_cache.hpp"
#include "engine/kv/prefix_cache.hpp"
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

// Resident memory of this process (Linux: /proc/self/statm).
size_t resident_bytes() {
  std::ifstream f("/proc/self/statm");
  size_t size = 0, resident = 0;
  f >> size >> resident;
  return resident * static_cast<size_t>(sysconf(_SC_PAGESIZE));
}

// A cache may be reserved at the most it could ever hold (it shares a budget with another
// cache): constructing it must not touch that memory. Fresh anonymous pages are zero
// already; zero-filling them would make the whole reserve resident.
TEST(KVCache, ConstructionDoesNotTouchTheReserve) {
  auto be = kernels::make_cpu_backend(1);
  KVCacheOptions o;
  o.block_size = 16;
  o.num_blocks = 131072;  // 256 MiB at 128 bytes per token
  const size_t before = resident_bytes();
  KVCache cache(*be, tiny_config(), o);
  ASSERT_EQ(cache.bytes(), size_t{256} << 20);
  EXPECT_LT(resident_bytes() - before, size_t{32} << 20);
  // ... and it reads as zero.
  std::vector<uint16_t> row(16, 1);
  const kernels::Tensor& k = cache.layer(1).k;
  be->download(row.data(), k.slice_rows(70000, 1), row.size() * sizeof(uint16_t));
  EXPECT_EQ(row, std::vector<uint16_t>(16, 0));
}

// Two caches of different bytes per token (a target and a one-layer draft) draw on one
// byte budget: blocks in use never cost more than it, and either's blocks reduce what the
// other can take.
TEST(KVBudget, BothCachesDrawFromOneByteBudget) {
  auto be = kernels::make_cpu_backend(1);
  ModelConfig draft_config = tiny_config();
  draft_config.n_layer = 1;
  const size_t target_block = KVCache::bytes_per_token(tiny_config(), DType::F16) * 4;
  const size_t draft_block = KVCache::bytes_per_token(draft_config, DType::F16) * 4;
  ASSERT_EQ(target_block, 2 * draft_block);
  KVBudget budget(10 * target_block);
  KVCacheOptions o;
  o.block_size = 4;
  o.budget = &budget;
  KVCache target(*be, tiny_config(), o), draft(*be, draft_config, o);
  // Each reserved at the most it could hold alone; the budget decides what is used.
  EXPECT_EQ(target.blocks().num_total(), 10);
  EXPECT_EQ(draft.blocks().num_total(), 20);
  EXPECT_EQ(target.block_bytes(), target_block);
  SequenceKV t(target), d(draft);
  ASSERT_TRUE(t.reserve(4 * 4));
  EXPECT_EQ(budget.used(), 4 * target_block);
  EXPECT_EQ(draft.blocks().num_free(), 12);  // the 6 target blocks' bytes left
  EXPECT_FALSE(d.reserve(13 * 4));
  EXPECT_TRUE(d.block_table().empty());
  ASSERT_TRUE(d.reserve(12 * 4));
  EXPECT_EQ(budget.used(), budget.total());
  EXPECT_EQ(target.blocks().num_free(), 0);
  EXPECT_EQ(target.blocks().allocate(), -1);  // free block ids, but no bytes
  EXPECT_FALSE(t.reserve(5 * 4));
  d.truncate(2 * 4);  // 10 draft blocks back: room for 5 target blocks
  EXPECT_EQ(target.blocks().num_free(), 5);
  EXPECT_EQ(draft.blocks().num_used(), 2);
  EXPECT_TRUE(t.reserve(9 * 4));
  EXPECT_FALSE(t.reserve(10 * 4));
  t.clear();
  d.clear();
  EXPECT_EQ(budget.used(), 0u);
}

TEST(KVBudget, UsedNeverExceedsTheBudgetUnderChurn) {
  auto be = kernels::make_cpu_backend(1);
  ModelConfig draft_config = tiny_config();
  draft_config.n_layer = 1;
  KVBudget budget(KVCache::bytes_per_token(tiny_config(), DType::F16) * 2 * 37);  // not a whole number of blocks
  KVCacheOptions o;
  o.block_size = 2;
  o.budget = &budget;
  KVCache target(*be, tiny_config(), o), draft(*be, draft_config, o);
  std::vector<std::unique_ptr<SequenceKV>> seqs;
  for (int i = 0; i < 6; ++i) seqs.push_back(std::make_unique<SequenceKV>(i % 2 ? draft : target));
  uint32_t x = 12345;
  int refused = 0;
  for (int step = 0; step < 2000; ++step) {
    x = x * 1664525u + 1013904223u;
    SequenceKV& s = *seqs[(x >> 8) % seqs.size()];
    const int32_t n = static_cast<int32_t>((x >> 16) % 40);
    if ((x >> 28) % 3 == 0) {
      s.truncate(n);
    } else if (!s.reserve(n)) {
      ++refused;
    }
    const size_t used = static_cast<size_t>(target.blocks().num_used()) * target.block_bytes() +
                        static_cast<size_t>(draft.blocks().num_used()) * draft.block_bytes();
    ASSERT_EQ(budget.used(), used) << step;
    ASSERT_LE(budget.used(), budget.total()) << step;
  }
  EXPECT_GT(refused, 0);  // the budget did bind
  seqs.clear();
  EXPECT_EQ(budget.used(), 0u);
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

// idle_blocks: cached blocks no sequence holds, i.e. what eviction could give back (the
// server reports the KV cache as in use without them).
TEST(PrefixCache, IdleBlocksAreTheOnesOnlyTheCacheHolds) {
  BlockAllocator a(8);
  PrefixCache pc(a, 2);
  const std::vector<int32_t> ta = {1, 2, 3, 4}, tb = {5, 6};
  const auto sa = take_blocks(a, 2), sb = take_blocks(a, 1);
  pc.publish(ta, sa, 4, 0);
  pc.publish(tb, sb, 2, 0);
  EXPECT_EQ(pc.idle_blocks(), 0);  // both sequences still run
  release_all(a, sb);
  EXPECT_EQ(pc.idle_blocks(), 1);
  release_all(a, sa);
  EXPECT_EQ(pc.idle_blocks(), 3);
  const auto held = pc.lookup(ta, 1);  // a new sequence adopts ta's first block
  EXPECT_EQ(pc.idle_blocks(), 2);
  release_all(a, held);
  // Every idle block can really be evicted.
  EXPECT_EQ(pc.evict(8), 3);
  EXPECT_EQ(pc.idle_blocks(), 0);
  EXPECT_EQ(a.num_free(), 8);
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
