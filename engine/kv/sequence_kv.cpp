#include "engine/kv/sequence_kv.hpp"

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace tandem {

bool SequenceKV::reserve(int32_t n) {
  const int32_t bs = cache_->block_size();
  const size_t need = static_cast<size_t>((n + bs - 1) / bs);
  if (need <= table_.size()) return true;
  if (static_cast<int32_t>(need - table_.size()) > cache_->blocks().num_free()) return false;
  while (table_.size() < need) table_.push_back(cache_->blocks().allocate());
  return true;
}

void SequenceKV::set_length(int32_t n) {
  if (n < 0 || n > capacity()) throw std::logic_error("SequenceKV::set_length beyond reserved capacity");
  length_ = n;
}

void SequenceKV::truncate(int32_t n) {
  if (n < 0) n = 0;
  if (n < length_) length_ = n;
  const int32_t bs = cache_->block_size();
  const size_t keep = static_cast<size_t>((n + bs - 1) / bs);
  while (table_.size() > keep) {
    cache_->blocks().release(table_.back());
    table_.pop_back();
  }
}

void SequenceKV::adopt_prefix(std::vector<int32_t> blocks) {
  if (!table_.empty()) throw std::logic_error("SequenceKV::adopt_prefix on a sequence that holds blocks");
  table_ = std::move(blocks);
  length_ = static_cast<int32_t>(table_.size()) * cache_->block_size();
}

int32_t SequenceKV::slot(int32_t pos) const {
  const int32_t bs = cache_->block_size();
  if (pos < 0 || pos / bs >= static_cast<int32_t>(table_.size()))
    throw std::out_of_range("SequenceKV: position " + std::to_string(pos) + " has no block");
  return table_[static_cast<size_t>(pos / bs)] * bs + pos % bs;
}

void SequenceKV::check_writable(int32_t pos, int32_t n) const {
  const int32_t bs = cache_->block_size();
  const int32_t end = std::min(pos + n, capacity());  // blocks not allocated yet will be fresh ones
  for (int32_t p = pos; p < end; p = (p / bs + 1) * bs) {
    const int32_t block = table_[static_cast<size_t>(p / bs)];
    if (cache_->blocks().ref_count(block) != 1)
      throw std::logic_error("KV write of position " + std::to_string(p) + " into shared block " +
                             std::to_string(block));
  }
}

}  // namespace tandem
