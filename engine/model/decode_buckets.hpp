// The shapes decode graphs are captured for, and the one upload that feeds them.
//
// A decode pass (one new token per sequence) or a verification pass (every token wants its
// logits) is captured once per bucket: the number of tokens rounded up to a batch bucket, the block-table width rounded up to a power of
// two. The extra lanes are padding: they read token 0 at position 0 through a block table
// row of their own that points at a cache block no sequence holds (the pad block), and
// store nothing in the cache (their slot is kernels::kNoKvSlot: stored, all of them would
// write one row at once). Every op is batch invariant, so a real lane's logits are the same bits
// in any bucket; the paged attention kernel reads a token's table only up to its own
// position, so a wider table changes nothing either.
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace tandem {

// 1 2 3 4 6 8 12 16 24 32 48 64 96 ...: exact up to 4, then steps of 4/3 and 3/2. A pass
// of n ≤ 16 tokens reads each weight row once whatever n is (the small-M matmul takes 16
// tokens per weight read), so a padding lane costs arithmetic, not memory traffic; at most
// a third of the lanes are padding, and a batch that wanders over 1..48 sequences needs 11
// graphs per width rather than 48.
// The smallest bucket >= n, or 0 when it would exceed max_rows (the pass then runs directly).
int32_t decode_batch_bucket(int32_t n, int32_t max_rows);
// The largest bucket <= max_rows (0 when max_rows < 1).
int32_t largest_decode_bucket(int32_t max_rows);
// The smallest power of two >= blocks (blocks >= 1): a context that grows across a long
// generation changes bucket log2 times.
int32_t table_width_bucket(int32_t blocks);

// Where each input of a decode pass of `batch` lanes and a `width`-block table lies in the
// one I32 buffer uploaded before each launch (offsets and sizes in elements).
struct DecodeInputLayout {
  int32_t batch = 0, width = 0;
  size_t tokens = 0, positions = 0, seq_index = 0, slots = 0, out_rows = 0, table = 0;
  size_t total = 0;
};
DecodeInputLayout decode_input_layout(int32_t batch, int32_t width);

// One real lane: a new token, its position, the cache slot it writes, its sequence's block
// table and that table's row (-1: the lane's own index). A decode pass has a sequence a
// lane; a verification pass several lanes a sequence, which share its row.
struct DecodeLane {
  int32_t token = 0, position = 0, slot = 0;
  std::span<const int32_t> blocks;
  int32_t seq = -1;
};

// Fills `out` (layout.total elements): lane i < lanes.size() is lanes[i], its sequence's
// table in row lanes[i].seq (or i; 0 past its end, never read; a row must be below the
// number of lanes); lanes beyond are padding (token 0, position 0, seq_index their own,
// slot kernels::kNoKvSlot, a table row of pad_block).
// The output rows: `outputs` (rows of real lanes), then padding rows j (their own index) up
// to `batch`, so that the graph always computes batch rows of logits. pad_block may be -1
// when there are no padding lanes. Throws std::invalid_argument on inputs that do not fit.
void fill_decode_inputs(const DecodeInputLayout& layout, std::span<const DecodeLane> lanes,
                        std::span<const int32_t> outputs, int32_t pad_block, std::vector<int32_t>& out);

}  // namespace tandem
