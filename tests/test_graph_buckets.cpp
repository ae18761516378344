// The host-only parts of decode graphs (engine/model/decode_buckets.hpp, graph_cache.hpp):
// which bucket a pass goes to, where its inputs lie in the one upload, what padding lanes
// read and write, and the bounded, least-recently-used cache of captured graphs.
#include <gtest/gtest.h>

#include <stdexcept>
#include <vector>

#include "engine/model/decode_buckets.hpp"
#include "engine/model/graph_cache.hpp"
#include "kernels/backend.hpp"

namespace tandem {
namespace {

TEST(CudaGraphBuckets, BatchBucketsRoundUpByAtMostAThird) {
  const std::vector<int32_t> want = {1, 2, 3, 4, 6, 6, 8, 8, 12, 12, 12, 12, 16, 16, 16, 16, 24};
  for (int32_t n = 1; n <= 17; ++n) EXPECT_EQ(decode_batch_bucket(n, 63), want[static_cast<size_t>(n - 1)]) << n;
  EXPECT_EQ(decode_batch_bucket(25, 63), 32);
  EXPECT_EQ(decode_batch_bucket(33, 63), 48);
  EXPECT_EQ(decode_batch_bucket(48, 63), 48);
  EXPECT_EQ(decode_batch_bucket(49, 63), 0) << "bucket 64 is above the most rows a capture may take";
  EXPECT_EQ(decode_batch_bucket(49, 64), 64);
  EXPECT_EQ(decode_batch_bucket(5, 5), 0) << "5 lanes need bucket 6";
  for (int32_t n = 1; n <= 4096; ++n) {
    const int32_t b = decode_batch_bucket(n, 1 << 20);
    ASSERT_GE(b, n);
    ASSERT_LE(3 * (b - n), b) << "more than a third of the lanes padding at n = " << n;
  }
  EXPECT_EQ(largest_decode_bucket(63), 48);
  EXPECT_EQ(largest_decode_bucket(64), 64);
  EXPECT_EQ(largest_decode_bucket(3), 3);
  EXPECT_EQ(largest_decode_bucket(0), 0);
  EXPECT_THROW(decode_batch_bucket(0, 63), std::invalid_argument);
}

TEST(CudaGraphBuckets, TableWidthsArePowersOfTwo) {
  const std::vector<std::pair<int32_t, int32_t>> cases = {{1, 1}, {2, 2}, {3, 4}, {4, 4}, {5, 8}, {9, 16}, {256, 256}, {257, 512}};
  for (auto [blocks, w] : cases) EXPECT_EQ(table_width_bucket(blocks), w) << blocks;
  EXPECT_THROW(table_width_bucket(0), std::invalid_argument);
}

TEST(CudaGraphBuckets, OneUploadHoldsEveryInputAndPaddingPointsAtThePadBlock) {
  const DecodeInputLayout l = decode_input_layout(4, 8);
  EXPECT_EQ(l.tokens, 0u);
  EXPECT_EQ(l.positions, 4u);
  EXPECT_EQ(l.seq_index, 8u);
  EXPECT_EQ(l.slots, 12u);
  EXPECT_EQ(l.out_rows, 16u);
  EXPECT_EQ(l.table, 20u);
  EXPECT_EQ(l.total, 20u + 4 * 8);

  const std::vector<int32_t> bt0 = {5, 9}, bt1 = {2, 3, 7};
  const std::vector<DecodeLane> lanes = {{11, 6, 9 * 4 + 2, bt0}, {22, 9, 7 * 4 + 1, bt1}};
  const std::vector<int32_t> outputs = {1};  // only the second lane wants logits
  std::vector<int32_t> v;
  fill_decode_inputs(l, lanes, outputs, /*pad_block=*/30, v);
  ASSERT_EQ(v.size(), l.total);
  EXPECT_EQ(std::vector<int32_t>(v.begin(), v.begin() + 4), (std::vector<int32_t>{11, 22, 0, 0}));
  EXPECT_EQ(std::vector<int32_t>(v.begin() + 4, v.begin() + 8), (std::vector<int32_t>{6, 9, 0, 0}));
  EXPECT_EQ(std::vector<int32_t>(v.begin() + 8, v.begin() + 12), (std::vector<int32_t>{0, 1, 2, 3}));
  EXPECT_EQ(std::vector<int32_t>(v.begin() + 12, v.begin() + 16), (std::vector<int32_t>{38, 29, kernels::kNoKvSlot, kernels::kNoKvSlot}))
      << "padding lanes store nothing in the cache";
  EXPECT_EQ(std::vector<int32_t>(v.begin() + 16, v.begin() + 20), (std::vector<int32_t>{1, 1, 2, 3}))
      << "the wanted rows, then padding rows";
  EXPECT_EQ(std::vector<int32_t>(v.begin() + 20, v.begin() + 28), (std::vector<int32_t>{5, 9, 0, 0, 0, 0, 0, 0}));
  EXPECT_EQ(std::vector<int32_t>(v.begin() + 28, v.begin() + 36), (std::vector<int32_t>{2, 3, 7, 0, 0, 0, 0, 0}));
  for (size_t i = 36; i < l.total; ++i) EXPECT_EQ(v[i], 30) << "a padding lane's table row is the pad block";

  // Exactly full: no pad block needed.
  const DecodeInputLayout full = decode_input_layout(2, 4);
  EXPECT_NO_THROW(fill_decode_inputs(full, lanes, outputs, -1, v));
  // What does not fit is refused.
  EXPECT_THROW(fill_decode_inputs(l, lanes, outputs, -1, v), std::invalid_argument) << "padding without a pad block";
  EXPECT_THROW(fill_decode_inputs(decode_input_layout(4, 2), lanes, outputs, 30, v), std::invalid_argument)
      << "a table wider than the bucket";
  EXPECT_THROW(fill_decode_inputs(decode_input_layout(1, 8), lanes, outputs, 30, v), std::invalid_argument);
  const std::vector<int32_t> bad_out = {2};
  EXPECT_THROW(fill_decode_inputs(l, lanes, bad_out, 30, v), std::invalid_argument) << "row 2 is padding";
}

// A verification pass: several lanes of one sequence share its table row (lanes 0-2 are
// sequence 0's tokens at positions 6-8, lane 3 sequence 1's); row 2, under no real lane,
// keeps zeros, and padding lanes 4 and 5 point at the pad block through their own rows.
TEST(CudaGraphBuckets, VerificationLanesShareTheirSequencesTableRow) {
  const DecodeInputLayout l = decode_input_layout(6, 4);
  const std::vector<int32_t> bt0 = {5, 9, 4}, bt1 = {2};
  const std::vector<DecodeLane> lanes = {{11, 6, 9 * 4 + 2, bt0, 0},
                                         {12, 7, 9 * 4 + 3, bt0, 0},
                                         {13, 8, 4 * 4 + 0, bt0, 0},
                                         {21, 3, 2 * 4 + 3, bt1, 1}};
  const std::vector<int32_t> outputs = {0, 1, 2, 3};
  std::vector<int32_t> v;
  fill_decode_inputs(l, lanes, outputs, /*pad_block=*/30, v);
  auto part = [&](size_t at, size_t n) { return std::vector<int32_t>(v.begin() + static_cast<ptrdiff_t>(at), v.begin() + static_cast<ptrdiff_t>(at + n)); };
  EXPECT_EQ(part(l.positions, 6), (std::vector<int32_t>{6, 7, 8, 3, 0, 0}));
  EXPECT_EQ(part(l.seq_index, 6), (std::vector<int32_t>{0, 0, 0, 1, 4, 5}));
  EXPECT_EQ(part(l.slots, 6), (std::vector<int32_t>{38, 39, 16, 11, kernels::kNoKvSlot, kernels::kNoKvSlot}));
  EXPECT_EQ(part(l.out_rows, 6), (std::vector<int32_t>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(part(l.table, 4), (std::vector<int32_t>{5, 9, 4, 0}));
  EXPECT_EQ(part(l.table + 4, 4), (std::vector<int32_t>{2, 0, 0, 0}));
  EXPECT_EQ(part(l.table + 8, 4), (std::vector<int32_t>{0, 0, 0, 0}));
  EXPECT_EQ(part(l.table + 16, 8), (std::vector<int32_t>(8, 30)));
  std::vector<DecodeLane> bad = lanes;
  bad[3].seq = 4;  // a padding lane's row
  EXPECT_THROW(fill_decode_inputs(l, bad, outputs, 30, v), std::invalid_argument);
}

struct FakeGraph final : kernels::CapturedGraph {
  explicit FakeGraph(int* launches) : launches_(launches) {}
  void launch() override { ++*launches_; }
  size_t nodes() const override { return 1; }
  int* launches_;
};

TEST(CudaGraphBuckets, CacheEvictsTheLeastRecentlyUsedAndDropsAllWhenMemoryMoves) {
  int launches = 0;
  GraphCache c(2);
  c.validate({1, 1});
  EXPECT_EQ(c.find({1, 4}), nullptr);
  c.insert({1, 4}, std::make_unique<FakeGraph>(&launches));
  c.insert({2, 4}, std::make_unique<FakeGraph>(&launches));
  ASSERT_NE(c.find({1, 4}), nullptr);  // (1, 4) is now the most recently used
  c.insert({3, 4}, std::make_unique<FakeGraph>(&launches));
  EXPECT_EQ(c.find({2, 4}), nullptr) << "the least recently used goes";
  EXPECT_NE(c.find({1, 4}), nullptr);
  EXPECT_NE(c.find({3, 4}), nullptr);
  EXPECT_EQ(c.stats().captures, 3);
  EXPECT_EQ(c.stats().evictions, 1);
  EXPECT_EQ(c.stats().replays, 3);
  EXPECT_EQ(c.stats().live, 2);

  c.validate({1, 1});
  EXPECT_EQ(c.stats().live, 2) << "same stamp: nothing moved";
  c.validate({1, 2});
  EXPECT_EQ(c.stats().live, 0);
  EXPECT_EQ(c.stats().invalidations, 1);
  EXPECT_EQ(c.find({1, 4}), nullptr);
  c.validate({2, 2});
  EXPECT_EQ(c.stats().invalidations, 1) << "dropping nothing is no invalidation";

  for (int b = 1; b <= 5; ++b) c.insert({b, 1}, std::make_unique<FakeGraph>(&launches));
  c.set_capacity(1);
  EXPECT_EQ(c.stats().live, 1);
  EXPECT_NE(c.find({5, 1}), nullptr);
  c.clear();
  EXPECT_EQ(c.stats().live, 0);
}

}  // namespace
}  // namespace tandem
