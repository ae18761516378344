#include "engine/model/decode_buckets.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "kernels/backend.hpp"

namespace tandem {

int32_t decode_batch_bucket(int32_t n, int32_t max_rows) {
  if (n < 1) throw std::invalid_argument("decode_batch_bucket: n must be positive");
  // 1 2 3 4, then 6 8 12 16 24 32 ...: 3 * 2^k and 4 * 2^k alternately.
  int64_t b = n <= 4 ? n : 0;
  for (int64_t lo = 4; b == 0; lo *= 2) {
    if (n <= lo * 3 / 2) b = lo * 3 / 2;
    else if (n <= lo * 2) b = lo * 2;
  }
  return b <= max_rows ? static_cast<int32_t>(b) : 0;
}

int32_t largest_decode_bucket(int32_t max_rows) {
  int32_t b = 0;
  for (int32_t n = 1; n <= max_rows;) {
    const int32_t next = decode_batch_bucket(n, max_rows);
    if (next == 0) break;
    b = next;
    n = next + 1;
  }
  return b;
}

int32_t table_width_bucket(int32_t blocks) {
  if (blocks < 1) throw std::invalid_argument("table_width_bucket: blocks must be positive");
  int32_t w = 1;
  while (w < blocks) w *= 2;
  return w;
}

DecodeInputLayout decode_input_layout(int32_t batch, int32_t width) {
  if (batch < 1 || width < 1) throw std::invalid_argument("decode_input_layout: empty shape");
  DecodeInputLayout l;
  l.batch = batch;
  l.width = width;
  const size_t b = static_cast<size_t>(batch);
  l.tokens = 0;
  l.positions = b;
  l.seq_index = 2 * b;
  l.slots = 3 * b;
  l.out_rows = 4 * b;
  l.table = 5 * b;
  l.total = l.table + b * static_cast<size_t>(width);
  return l;
}

void fill_decode_inputs(const DecodeInputLayout& l, std::span<const DecodeLane> lanes, std::span<const int32_t> outputs,
                        int32_t pad_block, std::vector<int32_t>& out) {
  const size_t b = static_cast<size_t>(l.batch), w = static_cast<size_t>(l.width);
  if (lanes.empty() || lanes.size() > b) throw std::invalid_argument("fill_decode_inputs: lanes do not fit the bucket");
  if (outputs.size() > b) throw std::invalid_argument("fill_decode_inputs: more outputs than lanes");
  if (lanes.size() < b && pad_block < 0)
    throw std::invalid_argument("fill_decode_inputs: padding lanes need a pad block");
  out.assign(l.total, 0);
  for (size_t i = 0; i < b; ++i) {
    const bool real = i < lanes.size();
    out[l.tokens + i] = real ? lanes[i].token : 0;
    out[l.positions + i] = real ? lanes[i].position : 0;
    const int32_t seq = real && lanes[i].seq >= 0 ? lanes[i].seq : static_cast<int32_t>(i);
    if (real && static_cast<size_t>(seq) >= lanes.size())
      throw std::invalid_argument("fill_decode_inputs: table row " + std::to_string(seq) + " is not below the lanes");
    out[l.seq_index + i] = seq;
    out[l.slots + i] = real ? lanes[i].slot : kernels::kNoKvSlot;
    int32_t* row = out.data() + l.table + static_cast<size_t>(seq) * w;
    if (real) {
      const auto& bt = lanes[i].blocks;
      if (bt.size() > w)
        throw std::invalid_argument("fill_decode_inputs: a block table of " + std::to_string(bt.size()) +
                                    " blocks is wider than the bucket (" + std::to_string(w) + ")");
      std::copy(bt.begin(), bt.end(), row);
    } else {
      std::fill(row, row + w, pad_block);
    }
  }
  for (size_t j = 0; j < outputs.size(); ++j) {
    if (outputs[j] < 0 || outputs[j] >= static_cast<int32_t>(lanes.size()))
      throw std::invalid_argument("fill_decode_inputs: output row " + std::to_string(outputs[j]) + " is not a lane");
    out[l.out_rows + j] = outputs[j];
  }
  for (size_t j = outputs.size(); j < b; ++j) out[l.out_rows + j] = static_cast<int32_t>(j);
}

}  // namespace tandem
