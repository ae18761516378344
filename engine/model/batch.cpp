#include "engine/model/batch.hpp"

#include <stdexcept>
#include <string>

#include "kernels/tree_keys.hpp"

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
    if (!tree_.empty()) tree_.insert(tree_.end(), {start + static_cast<int32_t>(i) + 1, 0, 0, 0});
  }
}

void Batch::add_tree(SequenceKV& seq, std::span<const int32_t> tokens, std::span<const int32_t> positions,
                     int32_t tree_base, std::span<const uint64_t> masks) {
  if (tokens.empty()) return;
  if (positions.size() != tokens.size() || masks.size() != tokens.size())
    throw std::invalid_argument("Batch::add_tree: one position and one mask per token");
  const int32_t start = seq.length();
  for (size_t i = 0; i < tokens.size(); ++i) {
    const int32_t index = start + static_cast<int32_t>(i);
    const std::string at = "Batch::add_tree: token " + std::to_string(i) + " ";
    if (masks[i] == 0) {
      if (positions[i] != index) throw std::invalid_argument(at + "outside the tree must sit at its own index");
      continue;
    }
    const int32_t own = index - tree_base;
    if (tree_base < 0 || own < 0 || own >= kernels::kMaxTreeNodes)
      throw std::invalid_argument(at + "lies outside the tree's " + std::to_string(kernels::kMaxTreeNodes) + " slots");
    const uint64_t own_bit = uint64_t{1} << own;
    if (!(masks[i] & own_bit) || (masks[i] & ~((own_bit << 1) - 1)) != 0)
      throw std::invalid_argument(at + "must read its own key and none fed after it");
    if (tree_base + kernels::tree_popcount64(masks[i]) != positions[i] + 1)
      throw std::invalid_argument(at + "has a position that is not its depth in the tree");
  }
  if (tree_.empty())  // the ordinary tokens before: causal
    for (int32_t p : positions_) tree_.insert(tree_.end(), {p + 1, 0, 0, 0});
  const int32_t first = n_tokens();
  add_all_logits(seq, tokens);
  tree_.resize(static_cast<size_t>(n_tokens()) * kernels::kTreeFields);  // this entry's, set below
  for (size_t i = 0; i < tokens.size(); ++i) {
    const size_t t = static_cast<size_t>(first) + i;
    positions_[t] = positions[i];
    int32_t* f = tree_.data() + t * kernels::kTreeFields;
    f[0] = masks[i] ? tree_base : positions[i] + 1;
    f[1] = static_cast<int32_t>(static_cast<uint32_t>(masks[i]));
    f[2] = static_cast<int32_t>(static_cast<uint32_t>(masks[i] >> 32));
    f[3] = 0;
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
  tree_.clear();
}

}  // namespace tandem
