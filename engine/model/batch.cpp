#include "engine/model/batch.hpp"

#include <stdexcept>

namespace tandem {

void Batch::add(SequenceKV& seq, std::span<const int32_t> tokens, std::vector<bool> want_logits) {
  if (tokens.empty()) return;
  for (const Entry& e : entries_)
    if (e.seq == &seq) throw std::logic_error("Batch::add: a sequence may appear only once per batch");
  const int32_t first = n_tokens();
  const int32_t start = seq.length();
  entries_.push_back({&seq, first, static_cast<int32_t>(tokens.size()), start});
  for (size_t i = 0; i < tokens.size(); ++i) {
    tokens_.push_back(tokens[i]);
    positions_.push_back(start + static_cast<int32_t>(i));
    seq_index_.push_back(static_cast<int32_t>(entries_.size() - 1));
    const bool want = want_logits.empty() ? i + 1 == tokens.size() : (i < want_logits.size() && want_logits[i]);
    if (want) output_rows_.push_back(first + static_cast<int32_t>(i));
  }
}

void Batch::add_all_logits(SequenceKV& seq, std::span<const int32_t> tokens) {
  add(seq, tokens, std::vector<bool>(tokens.size(), true));
}

void Batch::clear() {
  entries_.clear();
  tokens_.clear();
  positions_.clear();
  seq_index_.clear();
  output_rows_.clear();
}

}  // namespace tandem
